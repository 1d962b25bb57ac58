#pragma once
// Hardware presets for the time model: peak and achieved compute, memory bandwidth, and the
// α–β parameters of the links inside a node and between nodes. Calibration notes in docs/plan.md.
#include <cstdint>
#include <string>
#include <vector>

namespace lattice::plan {

// One α–β link: sending n bytes between two ranks costs alpha + n * beta seconds.
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

  double peak_flops(bool bf16) const { return bf16 ? peak_flops_bf16 : peak_flops_fp32; }
};

// Throws InputError naming the known presets when `name` is not one (case-insensitive).
const Hardware& hardware_preset(const std::string& name);
std::vector<std::string> hardware_names();

}  // namespace lattice::plan
