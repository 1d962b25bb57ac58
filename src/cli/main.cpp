// lattice: one binary, one sub-command per concern.
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"
#include "core/standard_output.hpp"
#include "core/version.hpp"

namespace {
struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};
const Command kCommands[] = {
    {"prepare", lattice::cli::run_prepare, "tokenize a text corpus into train.bin / val.bin"},
    {"train", lattice::cli::run_train, "train a GPT model"},
    {"eval", lattice::cli::run_eval, "evaluate a checkpoint on a token file"},
    {"sample", lattice::cli::run_sample, "generate text from a checkpoint"},
    {"plan", lattice::cli::run_plan, "memory, FLOPs and time of a layout; search the best layout"},
    {"bench", lattice::cli::run_bench, "measure this machine's GEMM rates and bandwidth (plan's cpu preset)"},
    {"groups", lattice::cli::run_groups, "print the TP/DP/PP/embedding process groups of a layout"},
    {"schedule", lattice::cli::run_schedule, "simulate a pipeline schedule: bubble, activations held, timeline SVG"},
    {"report", lattice::cli::run_report, "draw a training run's JSON Lines as one self-contained HTML page"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: lattice <command> [flags]   (lattice <command> --help for its flags)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out, "  %-10s %s\n", "version", "print the version and the commit this binary was built from (also --version)");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {  // `lattice 0.3.0 (commit d95709d, built ..., GNU 12.2.0)`
    if (argc > 2) {
      std::fprintf(stderr, "lattice: error: %s takes no arguments\n", name.c_str());
      return 2;
    }
    lattice::standard_output::start("version");
    std::printf("%s\n", lattice::version::kLine);
    return lattice::standard_output::exit_status(0);
  }
  for (const auto& c : kCommands) {
    if (name == c.name) {
      lattice::standard_output::start(c.name);
      try {
        // Output that did not reach its file (a full disk under `> log.jsonl`) is a failure too;
        // a reader that left (`| head`) is not (core/standard_output.hpp).
        return lattice::standard_output::exit_status(c.run(argc - 1, argv + 1));
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "lattice %s: error: out of memory: the sizes asked for need more memory than this "
                     "machine can give (lower --micro-batch, --seq-len, --hidden or --layers)\n", c.name);
        return 1;
      } catch (const std::length_error&) {
        std::fprintf(stderr, "lattice %s: error: a size asked for is too large to represent\n", c.name);
        return 1;
      } catch (const std::exception& e) {
        std::string what = e.what();  // one line, whatever the message holds (a path with a newline)
        for (char& ch : what)
          if (ch == '\n' || ch == '\r') ch = ' ';
        std::fprintf(stderr, "lattice %s: error: %s\n", c.name, what.c_str());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "lattice: error: unknown command '%s' (try: lattice --help)\n", name.c_str());
  return 2;
}
