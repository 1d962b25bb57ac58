// lattice: one binary, one sub-command per concern.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"
#include "core/env_switch.hpp"
#include "core/error.hpp"
#include "core/standard_output.hpp"
#include "core/version.hpp"
#include "kernels/gemm.hpp"

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
    {"launch", lattice::cli::run_launch, "run a training job under mpirun, restarting it from its checkpoint when a rank is lost"},
    {"report", lattice::cli::run_report, "draw a training run's JSON Lines as one self-contained HTML page"},
};

constexpr int kMaxThreads = 4096;  // cli/flag_rules.cpp: --threads

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
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return 0;
    std::fprintf(stderr, "lattice: error: cannot write standard output: %s\n", std::strerror(errno));
    return 1;
  }
  // libgomp sizes its first parallel region by OMP_NUM_THREADS before any flag is read: 100000 died
  // of SIGSEGV inside libgomp, 32768 of "Thread creation failed". The most --threads takes, as well.
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    for (const char* item = env; *item;) {  // "4" or a nested list "4,2"
      char* end = nullptr;
      const long long n = std::strtoll(item, &end, 10);
      // Not a count (0, -1, abc, 1.5): libgomp would warn and take every core; said here instead.
      if (end == item || n < 1 || (*end && *end != ',' && *end != ' ')) {
        std::fprintf(stderr, "lattice: error: OMP_NUM_THREADS=%s is not a thread count (a whole number of at least 1, "
                     "or a list of them such as 4,2): unset it, or pass --threads\n", env);
        return 1;
      }
      if (n > kMaxThreads) {
        std::fprintf(stderr, "lattice: error: OMP_NUM_THREADS=%s asks for more threads than lattice runs (at most %d; "
                     "unset it, or pass --threads)\n", env, kMaxThreads);
        return 1;
      }
      item = end != item ? end : item + 1;
      while (*item == ',' || *item == ' ') ++item;
    }
  }
  if (!lattice::gemm_split_env_valid()) {
    std::fprintf(stderr, "lattice: error: LATTICE_GEMM=%s is neither whole nor parts (an A/B switch for how GEMMs "
                 "are cut over the threads: unset it)\n", std::getenv("LATTICE_GEMM"));
    return 1;
  }
  if (!lattice::gemm_bf16_env_valid()) {
    std::fprintf(stderr, "lattice: error: LATTICE_GEMM_BF16=%s is neither native nor widened (an A/B switch for how "
                 "bf16 GEMMs run on the CPU: unset it)\n", std::getenv("LATTICE_GEMM_BF16"));
    return 1;
  }
  // The GPU's A/B switches (docs/gpu.md), misspelt: refused on any build, not silently the default.
  struct Switch {
    const char* name;
    const char* refusal;  // the values it takes, as the error says them
    const char* what;
    bool takes_report;
  };
  for (const Switch& sw : {Switch{"LATTICE_CUDA_GEMM_EPILOGUES", "neither 0 nor 1", "the GPU's GEMM epilogues", false},
                           Switch{"LATTICE_CUDA_GEMM_TUNE", "none of 0, 1 and report", "the GPU's GEMM tuner", true},
                           Switch{"LATTICE_CUDA_ATTENTION_DENSE", "neither 0 nor 1",
                                  "the GPU attention's dense forms", false}}) {
    const std::string v = lattice::env_value(sw.name);
    if (v.empty() || v == "0" || v == "1" || (sw.takes_report && v == "report")) continue;
    std::fprintf(stderr, "lattice: error: %s=%s is %s (an A/B switch for %s, docs/gpu.md: unset it)\n", sw.name,
                 v.c_str(), sw.refusal, sw.what);
    return 1;
  }
  if (name == "--version" || name == "version") {  // `lattice 0.3.0 (commit d95709d, built ..., GNU 12.2.0)`
    if (argc == 3 && (std::string(argv[2]) == "--help" || std::string(argv[2]) == "-h")) {  // as every command
      std::printf("Print the version and the commit this binary was built from.\nUsage: lattice version\n");
      return 0;
    }
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
        // One line, whatever the message holds (a path with a newline), in the user's words rather
        // than a library's (core/error.hpp).
        const std::string what = lattice::error_line(e);
        std::fprintf(stderr, "lattice %s: error: %s\n", c.name, what.c_str());
        return lattice::exit_status_of(e);
      }
    }
  }
  std::fprintf(stderr, "lattice: error: unknown command '%s' (try: lattice --help)\n", name.c_str());
  return 2;
}
