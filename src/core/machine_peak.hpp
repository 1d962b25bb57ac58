#pragma once
// The peak FLOP/s of the cores a rank's threads run on, for the GEMM path the dtype takes: the MFU's
// denominator (docs/mfu.md). One formula, one place:
//
//   peak = physical cores × clock × FLOP/cycle/core of the GEMM path
//
// read from /proc/cpuinfo (flags, "model name", "cpu MHz", topology), /sys/devices/system/cpu
// (thread_siblings_list, core_id, physical_package_id, cpufreq/cpuinfo_max_freq) and
// sched_getaffinity. The texts are inputs (MachineTexts), so the formula is tested on any machine's.
#include <map>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace lattice {

// The widest GEMM instruction set the GEMM library will use (kernels/gemm.hpp: oneDNN's effective
// ISA, which ONEDNN_MAX_CPU_ISA may lower), as a cap on what the CPU flags offer.
enum class GemmIsa { any, sse41, avx2, avx512_core, avx512_core_bf16, amx };  // any: no cap

// One logical CPU's sysfs files, each "" where absent.
struct CpuSysfs {
  std::string thread_siblings_list, core_id, physical_package_id;
  std::string cpufreq_max_khz;  // cpufreq/cpuinfo_max_freq
};

struct MachineTexts {
  std::string cpuinfo;        // /proc/cpuinfo
  std::vector<int> allowed;   // sched_getaffinity's CPUs; empty: unknown (every processor of cpuinfo)
  std::map<int, CpuSysfs> sysfs;  // by logical CPU
  // A clock measured on this machine (a saved `lattice bench`'s FMA loop), and what to call it: where
  // above the clock the texts give, the peak takes it (docs/mfu.md). 0: none.
  double measured_ghz = 0;
  std::string measured_clock_source;
};

// Reads this machine: /proc/cpuinfo, /sys/devices/system/cpu/cpuN/..., sched_getaffinity. The paths
// can be redirected (tests, or describing another machine): LATTICE_CPUINFO names a cpuinfo file,
// LATTICE_CPU_SYSFS a directory standing for /sys/devices/system/cpu.
// `this_machine`: the real files whatever the variables say (how this process computes, not what
// it reports).
MachineTexts read_machine_texts(bool this_machine = false);

struct PeakEstimate {
  double flops = 0;    // FLOP/s; 0: unknown (why_unknown says why)
  std::string source;  // what was used, e.g. "AMX bf16: 2 cores × 2.60 GHz (cpufreq max) × 1024 FLOP/cycle"
  std::string tag;     // short, for the step line: "AMX", "AVX-512", "given", "bench"
  std::string why_unknown;
  int cores = 0;
  double ghz = 0, flop_per_cycle = 0;
  bool bf16_widened = false;  // bf16 GEMMs take the fp32 FMA path, their operands widened (below)
};

// The theoretical peak of the physical cores `threads` OpenMP threads run on (at most one thread a
// core counts; hyperthread siblings count once), for `dtype`'s GEMM path capped at `isa`.
PeakEstimate theoretical_peak(const MachineTexts& machine, DType dtype, int threads, GemmIsa isa = GemmIsa::any);

// Whether bf16 GEMMs widen their operands to fp32 (exactly) and run the fp32 GEMM: where the CPU's
// bf16 dot product (VDPBF16PS) gives fewer FLOPs a cycle than its fp32 FMAs and no AMX is in reach
// (`isa`): Intel cores without AMX (kernels/gemm.cpp; docs/mfu.md). The first CPU this process may
// run on stands for all, as in theoretical_peak.
bool bf16_gemm_widens(const MachineTexts& machine, GemmIsa isa);

// The bf16 dot-product throughput (FLOP/s) `threads` threads reach: VDPBF16PS chains as the FMA loop
// below. 0 where the CPU has no AVX512-BF16.
double measure_dpbf16_flops(int threads);

// The fp32 FMA throughput (FLOP/s) `threads` OpenMP threads reach: twelve independent AVX-512 FMA
// chains a thread, the best of sixteen runs of about 5 ms. 0 where the CPU has no AVX-512.
double measure_fma_fp32_flops(int threads);

// The clock (GHz) the cores ran at while `threads` threads reached `fma_flops` in that loop: the rate
// over the AVX-512 FMA path's FLOP/cycle and the cores the threads run on (theoretical_peak's count).
// Where cpuinfo's clock is a guest's base ("cpu MHz"), this one is the truth: `lattice bench` saves it
// as MachineTexts::measured_ghz's source. 0 where unknown (no AVX-512 path, no cores, no rate).
double clock_from_fma(const MachineTexts& machine, int threads, double fma_flops);

// --peak-flops: source "given (--peak-flops)".
PeakEstimate given_peak(double flops);

// "5.32 TFLOP/s", "700 GFLOP/s": a peak as people read it (3 significant digits).
std::string flops_text(double flops);

// Parsing helpers (exposed for the tests).
std::vector<int> parse_cpu_list(const std::string& text);  // "0-3,8" -> 0 1 2 3 8; bad text -> {}
double model_name_ghz(const std::string& model_name);       // "... @ 2.60GHz" -> 2.6; none -> 0

}  // namespace lattice
