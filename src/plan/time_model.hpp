#pragma once
// Predicted iteration time of a layout: GEMMs at a calibrated fraction of peak, memory-bound
// kernels at a calibrated bandwidth, α–β collectives (none overlapped with compute, as in the
// paper's Megatron), and the pipeline bubble of 1F1B / interleaved 1F1B.
#include <vector>

#include "plan/collectives.hpp"
#include "plan/hardware.hpp"
#include "plan/plan_request.hpp"

namespace lattice::plan {

// Seconds per iteration, split so the parts add up to iteration_s.
struct TimePlan {
  double gemm_s = 0;         // forward + backward matrix multiplies, all micro-batches
  double elementwise_s = 0;  // LayerNorm, softmax, dropout, GeLU, residual, cross-entropy
  double recompute_s = 0;    // extra forward work recomputation adds (GEMM + element-wise + TP)
  double tp_comm_s = 0;      // tensor/sequence-parallel all-reduce or reduce-scatter + all-gather
  double ep_comm_s = 0;      // MoE: the experts' all-to-alls (dispatch, combine; forward and backward)
  double cp_comm_s = 0;      // context parallelism: Ulysses' all-to-alls (8 a layer and micro-batch, 9 fused)
  double pp_comm_s = 0;      // point-to-point between stages
  double bubble_s = 0;       // (p-1)/m micro-batch slots of idle pipeline
  double dp_comm_s = 0;      // data-parallel gradient all-reduce or ZeRO traffic, embedding sync
  double expert_dp_comm_s = 0;  // MoE: the part of dp_comm_s spent on the expert-data-parallel groups
  double optimizer_s = 0;    // Adam step over the owned parameters (memory bound, or its offload I/O)
  double offload_s = 0;      // --offload-params: each bucket's piece read from disk before its gathers
  double iteration_s = 0;
  double bubble_fraction = 0;
  Algorithm tp_algorithm = Algorithm::none;
  Algorithm dp_algorithm = Algorithm::none;
};

TimePlan plan_time(const PlanRequest& r, const Hardware& hw);

// One micro-batch's forward and backward seconds of each layer (recompute and TP/EP communication
// included) and of the output layer: what plan_time's slowest stage adds up, and what the pipeline
// partitioner (analysis/partition.hpp) balances.
struct StageSeconds {
  std::vector<double> layer;
  // The block method's first k layers of each stage (k = block_k >= 0): which layers those are
  // depends on the partition, so `layer` counts none and `recompute` what re-running each would add.
  int block_k = -1;
  std::vector<double> recompute;
  double head = 0;
  bool measured = false;  // from the hardware's MeasuredLayerCosts (its shape and layout are this run's)
};
StageSeconds stage_seconds(const PlanRequest& r, const Hardware& hw);

// One transformer layer, one micro-batch, one rank: the paper's Table 4 quantities.
struct LayerTime {
  double forward_s = 0;
  double backward_s = 0;  // includes the recomputation the layout asks for
};
LayerTime layer_time(const PlanRequest& r, const Hardware& hw);

// Bytes element-wise kernels move per layer forward (Megatron's fused kernels); backward moves
// about twice as much. Exposed for the tests and the docs.
double layer_elementwise_bytes(const analysis::ActivationShape& x);
double attention_elementwise_bytes(const analysis::ActivationShape& x);  // the s² part alone
// An MoE layer's MLP block instead of the dense MLP's bias-GeLU: the router's fp32 softmax (read and
// write N·E), the dispatch permutation (read and write A·h), the combine (read A·h, write N·h), and the
// experts' bias-GeLU on the R received rows (read and write R·f/t), at d bytes an element.
double moe_mlp_elementwise_bytes(const analysis::MoEKeptShape& m);

}  // namespace lattice::plan
