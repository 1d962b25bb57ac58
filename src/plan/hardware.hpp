#pragma once
// Hardware presets for the time model: peak and achieved compute, memory bandwidth, and the
// α–β parameters of the links inside a node and between nodes. Calibration notes in docs/plan.md.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lattice::plan {

// One α–β link: sending n bytes between two ranks costs alpha + n * beta seconds.
class CommTable;  // plan/comm_table.hpp
class GemmTimer;  // plan/gemm_shapes.hpp

struct Link {
  double alpha = 0;  // seconds per message (latency)
  double beta = 0;   // seconds per byte (1 / bandwidth per rank)
};

// One dense layer and the output layer timed by `lattice bench --layer-costs` at one shape and
// layout, in one process: per micro-batch, a layer's forward, input pass and weight pass, and the
// output layer's forward and backward. The pipeline partitioner uses them instead of the time model
// for runs of the same shape (plan/time_model.hpp, stage_seconds).
struct MeasuredLayerCosts {
  int64_t hidden = 0, heads = 0, seq_len = 0, micro_batch = 0, vocab = 0;
  std::string activation_dtype, recompute, attention;
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0, head_s = 0;
  bool valid() const { return forward_s > 0; }
};

// `--hardware local` (plan/local_hardware.hpp): `ranks` processes of `threads` OpenMP threads on this
// host's `cores`, as `mpirun -np ranks` runs them. Compute is timed here per GEMM shape and charged at
// the share of the cores a rank gets; communication is read from a saved `lattice bench` of that many
// ranks (plan/comm_table.hpp). Empty (cores = 0) for every other preset.
struct LocalHost {
  int cores = 0, ranks = 1, threads = 1;
  std::shared_ptr<const CommTable> comm;  // measured MPI times; null for one rank
  std::shared_ptr<GemmTimer> gemm;        // per-shape GEMM seconds at `threads`, measured when first asked
  double elementwise_bandwidth = 0;       // bytes/s of element-wise work a rank reaches at `threads`
  // The bench's rate of each element-wise kernel (plan/measure.hpp: bytes as the time model counts
  // them), where a bench of these ranks and threads measured them; empty: elementwise_bandwidth alone.
  std::map<std::string, double> kernel_rates;
  bool rates_shared = false;  // the rates were measured with every rank running (the sharing is in them)
  std::string source;                     // the bench file read (or "measured now")
  bool active() const { return cores > 0; }
  // The part of its `threads` a rank runs on while `busy` ranks compute at once (processor sharing:
  // R·T threads on C cores each get C/(R·T) of a core).
  double share(double busy) const;
};

struct Hardware {
  std::string name;
  double peak_flops_bf16 = 0;   // dense 16-bit peak per device (the MFU denominator)
  double peak_flops_fp32 = 0;   // peak for fp32 activations (TF32 on GPUs)
  double gemm_efficiency = 1;   // fraction of peak large transformer GEMMs reach (calibrated)
  double memory_bandwidth = 0;  // bytes/s element-wise kernels achieve (calibrated)
  int64_t memory_bytes = 0;     // device memory
  int devices_per_node = 1;     // tensor-parallel groups stay inside one node
  Link intra;                   // inside a node (NVLink / shared memory)
  Link inter;                   // between nodes (one NIC per device)
  // --offload-optimizer: bytes/s the optimizer's moments move each way between the offload
  // directory and memory (a local NVMe for the GPU presets; measured by bench/offload.sh for cpu).
  double offload_bandwidth = 3e9;
  MeasuredLayerCosts layer_costs;  // from a `lattice bench --layer-costs --json` file, else none
  LocalHost local;                 // --hardware local: this machine as mpirun runs a layout on it

  double peak_flops(bool bf16) const { return bf16 ? peak_flops_bf16 : peak_flops_fp32; }
};

// Throws InputError naming the known presets when `name` is not one (case-insensitive).
const Hardware& hardware_preset(const std::string& name);
std::vector<std::string> hardware_names();

}  // namespace lattice::plan
