#pragma once
// `lattice bench`: measures this machine the way the time model needs it — GEMM rates for fp32 and
// bf16 inputs at transformer shapes, and the bandwidth element-wise kernels reach — so the `cpu`
// preset of `lattice plan` can be calibrated here (`--hardware FILE.json` reads a saved result).
#include <string>

#include "plan/hardware.hpp"

namespace lattice::plan {

struct Measurement {
  double gemm_fp32_flops = 0, gemm_bf16_flops = 0;  // FLOP/s
  double memory_bandwidth = 0;                      // bytes/s of a triad a[i] = b[i] + s·c[i]
  int threads = 0;
  // The runtime's resident constant: what this process holds with its libraries loaded, its
  // threads started and its GEMM kernels generated, beyond the tracking allocator's bytes — what
  // a training run's summary reports as unaccounted (one process; MPI's own segments not included).
  int64_t runtime_rss_bytes = 0;
};

Measurement measure_this_machine(double seconds_per_test);
// The cpu preset with measured rates substituted.
Hardware hardware_from(const Measurement& m);
std::string measurement_json(const Measurement& m);
// Reads a `lattice bench --json` result (throws InputError naming the file and the problem).
Hardware hardware_from_file(const std::string& path);

}  // namespace lattice::plan
