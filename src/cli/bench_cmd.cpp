// `lattice bench`: measure this machine for the planner's cpu preset.
#include <cstdio>
#include <iostream>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "plan/measure.hpp"

namespace lattice::cli {

int run_bench(int argc, char** argv) {
  CLI::App app("Measure GEMM rates and memory bandwidth (the planner's cpu calibration).", "lattice bench");
  double seconds = 1.0;
  bool json = false;
  app.add_option("--seconds", seconds, "time spent on each measurement")->capture_default_str();
  app.add_flag("--json", json, "one JSON line on stdout (lattice plan --hardware FILE.json reads it)");
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  require(seconds > 0 && seconds <= 60, "--seconds must be in (0, 60]");
  const plan::Measurement m = plan::measure_this_machine(seconds);
  if (json) {
    std::cout << plan::measurement_json(m) << "\n";
    return 0;
  }
  std::printf("threads %d\nGEMM fp32 %.1f GFLOP/s\nGEMM bf16 %.1f GFLOP/s\ntriad bandwidth %.1f GB/s\n"
              "runtime resident %.1f MiB (libraries, threads, kernels: what no allocator sees)\n",
              m.threads, m.gemm_fp32_flops / 1e9, m.gemm_bf16_flops / 1e9, m.memory_bandwidth / 1e9,
              double(m.runtime_rss_bytes) / (1 << 20));
  return 0;
}

}  // namespace lattice::cli
