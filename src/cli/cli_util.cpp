#include "cli/cli_util.hpp"

#include <filesystem>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <string>
#include <vector>

#include "cli/config_file.hpp"
#include "cli/flag_rules.hpp"
#include "comm/distributed.hpp"
#include "core/error.hpp"

namespace lattice::cli {

namespace {
// Edit distance, for "did you mean": a misspelt flag a letter or two away from a real one.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// CLI11's own message lists the unexpected arguments reversed (it takes a vector last argument
// first; remaining() gives them back as typed): name them as typed, and the nearest flag.
std::string unexpected_arguments(const CLI::App& app, const std::vector<std::string>& rest) {
  std::string text = rest.size() == 1 ? "an argument it does not take:" : "arguments it does not take:";
  for (const std::string& arg : rest) text += " " + arg;
  for (const std::string& arg : rest) {
    if (arg.rfind("--", 0) != 0) continue;
    const std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    std::string best;
    size_t best_distance = 3;  // at most two edits away: further is a guess, not a typo
    for (const CLI::Option* opt : app.get_options())
      for (const std::string& candidate : opt->get_lnames()) {
        const size_t d = edit_distance(name, candidate);
        if (d < best_distance) best_distance = d, best = candidate;
      }
    if (!best.empty()) text += " (did you mean --" + best + "?)";
    break;
  }
  return text + "; " + app.get_name() + " --help lists its flags";
}

// A refused flag or value, a usage error or not, said once under a launcher (report_after_rank0):
// 64 ranks given the same command line wrote 64 copies of a usage line.
int refuse_value(const std::string& command, const std::string& message, int status) {
  if (comm::started_by_launcher() && comm::launcher_rank() != 0)
    return report_after_rank0(command, message, status);
  std::fprintf(stderr, "lattice %s: error: %s\n", command.c_str(), message.c_str());
  return status;
}
}  // namespace

std::optional<int> refuse_several_ranks(const std::string& command) {
  if (comm::launcher_size() <= 1) return std::nullopt;
  return refuse_value(command,
                      "lattice " + command + " runs as one process, and was started as " +
                          std::to_string(comm::launcher_size()) + " ranks: start it without mpirun",
                      1);
}

int report_after_rank0(const std::string& command, const std::string& message, int status) {
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::fprintf(stderr, "lattice %s: rank %d: error: %s\n", command.c_str(), comm::launcher_rank(), message.c_str());
  return status;
}

std::optional<int> parse_flags(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  const std::string command = argc > 0 ? argv[0] : app.get_name();
  try {
    // An empty value would read as 0 (or an empty path): never what was meant.
    for (size_t i = 0; i < args.size(); ++i) {
      const size_t eq = args[i].find('=');
      const bool empty_attached = args[i].rfind("--", 0) == 0 && eq != std::string::npos && eq + 1 == args[i].size();
      require(!args[i].empty() && !empty_attached,
              "an empty value for " + (empty_attached ? args[i].substr(0, eq) : i > 0 ? args[i - 1] : std::string("an argument")));
    }
    if (auto bad = canonical_numbers(app, args, command)) return refuse_value(command, bad->message, bad->usage ? 2 : 1);
    check_repeated_flags(app, args);  // the command line's own: --config's may be overridden
    // What it lets through (the same name twice, a flag's same value twice) takes the last value in
    // every command, as train's and plan's flags always did (CLI11's own rule refused it in raw words).
    for (CLI::Option* opt : app.get_options())
      if (opt->get_expected_min() >= 1 && opt->get_expected_max() == 1)
        opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    // --config FILE: its settings go first, so the command line's flags (TakeLast) win.
    if (app.get_option_no_throw("--config"))
      for (size_t i = 0; i < args.size(); ++i) {
        std::string path;
        if (args[i] == "--config" && i + 1 < args.size()) path = args[i + 1];
        else if (args[i].rfind("--config=", 0) == 0) path = args[i].substr(9);
        else continue;
        for (size_t j = i + 2; j < args.size(); ++j)
          require(args[j] != "--config" && args[j].rfind("--config=", 0) != 0,
                  "--config given twice (one file of flags per run)");
        std::vector<std::string> settings = config_file_args(path, app);
        if (auto bad = canonical_numbers(app, settings, command))
          return refuse_value(command, "config " + path + ": " + bad->message, bad->usage ? 2 : 1);
        args.insert(args.begin(), settings.begin(), settings.end());
        break;
      }
  } catch (const InputError& e) {
    return refuse_value(command, e.what(), 2);
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help (or --version): print it (once under a launcher), succeed
      if (comm::started_by_launcher() && comm::launcher_rank() != 0) return 0;
      return app.exit(e);
    }
    std::string message = dynamic_cast<const CLI::ExtrasError*>(&e) ? unexpected_arguments(app, app.remaining()) : e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');  // the one-line error contract
    return refuse_value(command, message, 2);
  } catch (const InputError& e) {  // a flag's own callback refused its value: said once, as below
    return refuse_value(command, e.what(), exit_status_of(e));
  }
  // The flag rules (cli/flag_rules.hpp): a value out of its bounds or two flags that contradict is
  // an invalid value (exit 1, as the commands' own checks), said once under a launcher (by rank 0;
  // the others wait, so that the launcher does not end the job before rank 0 has written it).
  try {
    check_flag_conflicts(app, command);
    check_flag_bounds(app, command);
  } catch (const InputError& e) {
    return refuse_value(command, e.what(), exit_status_of(e));
  }
  return std::nullopt;
}

void add_overwrite_flag(CLI::App& app, bool& overwrite) {
  app.add_flag("--overwrite", overwrite,
               "let an output path replace an existing file lattice did not write (never an input of this command)");
}

int64_t token_file_bytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const char* name : {"/train.bin", "/val.bin"}) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(dir + name, ec);
    if (!ec) bytes += int64_t(size);
  }
  return bytes;
}

}  // namespace lattice::cli
