#pragma once
// `lattice bench`: measures this machine the way the time model needs it — GEMM rates for fp32 and
// bf16 inputs at transformer shapes, the bandwidth element-wise kernels reach, and (under mpirun,
// through comm/measure_collectives.hpp) the collectives' times — so the `cpu` preset of `lattice
// plan` can be calibrated here (`--hardware FILE.json` reads a saved result) and `--hardware local`
// can read what `lattice bench --save` saved for its number of ranks.
#include <functional>
#include <map>
#include <string>

#include "plan/comm_table.hpp"
#include "plan/hardware.hpp"

namespace lattice::plan {

struct Measurement {
  double gemm_fp32_flops = 0, gemm_bf16_flops = 0;  // FLOP/s
  double memory_bandwidth = 0;                      // bytes/s of a triad a[i] = b[i] + s·c[i]
  // AVX-512 FMA throughput on the threads, and the clock it shows the cores ran at (core/machine_peak.hpp),
  // for the trainer's peak; 0 where not measured (no AVX-512, or a bench saved before it was).
  double fma_fp32_flops = 0, fma_clock_ghz = 0;
  // The bf16 dot product's throughput on the threads (VDPBF16PS chains), which decides whether bf16
  // GEMMs widen to fp32 (core/machine_peak.hpp); 0 where not measured (no AVX512-BF16, or older).
  double dpbf16_flops = 0;
  int threads = 0;
  // The runtime's resident constant: what this process holds with its libraries loaded, its
  // threads started and its GEMM kernels generated, beyond the tracking allocator's bytes — what
  // a training run's summary reports as unaccounted (one process; MPI's own segments not included).
  int64_t runtime_rss_bytes = 0;
};

// `before_each` (may be empty) runs before each timed test: under mpirun a world barrier, so every
// rank's test runs at once and the rates carry the sharing of the cores and the memory.
Measurement measure_this_machine(double seconds_per_test, const std::function<void()>& before_each = {});
// The cpu preset with measured rates substituted.
Hardware hardware_from(const Measurement& m);
std::string measurement_json(const Measurement& m);
// Reads a `lattice bench --json` result, schema 1 or 2 (throws InputError naming the file and the
// problem; a schema-2 file is checked whole, as read_local_bench does).
Hardware hardware_from_file(const std::string& path);

// Seconds of the median call of `body` after one untimed call: at least 3 calls, about `seconds` of
// them in all (at most max_calls). The median, since another process's burst would skew a mean.
// `untimed` (may be empty) runs before each timed call, outside its time.
double median_call_seconds(double seconds, const std::function<void()>& body, size_t max_calls = 1000,
                           const std::function<void()>& untimed = {});

// The element-wise kernels of a transformer layer, timed at GPT-2-small's shape (b 4, s 256, h 768,
// a 12, fp32 activations) at this process's OpenMP threads: kernel -> bytes/s, where the bytes are
// those plan/time_model.cpp charges for that kernel (d = 4 bytes an element), so a kernel's time is
// the model's bytes over its rate. Per element of the tensor the kernel runs on:
//   layernorm_fwd           2d       read x, write y (mean and rstd not counted)        [s, b, h]
//   bias_gelu_fwd           2d       read the FC1 output, write the GeLU (bias: in the GEMM) [s, b, 4h]
//   bias_dropout_add_fwd    3d + 1   x += dropout(y + bias), p 0.1: read x, y; write x; mask byte
//   residual_add_fwd        3d       the same without dropout (x += y + bias)
//   softmax_fwd             2d       causal softmax of the scores, read and written     [b, a, s, s]
//   softmax_dropout_fwd     4d + 1   softmax and its dropout in one pass: probs, dropped, mask
//   *_bwd                   twice its forward's bytes (the model charges a backward 2× the forward):
//                           layernorm_backward; gelu_backward + FC1's bias column sums; dropout
//                           backward (or the copy) + the row-parallel bias's column sums; dropout
//                           backward + softmax_causal_backward
//   to_bf16                 6        read fp32, write bf16 (the 16-bit copies of weights and operands)
// (`adamw` is added by cli/bench_cmd.cpp, which may use optim: 36 bytes a parameter, fp32 AdamW
// with the gradient-norm read and the gradient's zeroing, as time_model.cpp's optimizer term.)
// Each rate is the median call's; `before_each` as for measure_this_machine.
std::map<std::string, double> measure_elementwise(double seconds_per_kernel,
                                                  const std::function<void()>& before_each = {});

// Where `lattice bench --save` puts the result of `ranks` processes on this host:
// ${LATTICE_BENCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lattice}/bench-<hostname>-np<ranks>.json.
std::string bench_result_path(int ranks);
std::string bench_host_name();  // gethostname, with characters a file name cannot hold replaced by '_'

struct LocalBench {  // a schema-2 `lattice bench --json` result
  std::string host, path;
  std::string measured_at;  // UTC, ISO 8601 (empty when the file does not say)
  int cores = 0, ranks = 1, threads_per_rank = 0;
  Measurement compute;                        // today's GEMM rates, triad bandwidth, runtime RSS
  std::map<std::string, double> elementwise;  // kernel -> bytes/s (keys as written in the JSON)
  CommTable comm;                             // empty for a one-process bench
  int comm_cells_left_out = 0;                // MPI cells its --budget ran out before
  double comm_seconds = 0;                    // what the MPI part took (its budget is at most 60 s)
};
LocalBench read_local_bench(const std::string& path);  // InputError naming the file and the problem

}  // namespace lattice::plan
