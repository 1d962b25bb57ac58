#pragma once
// What `lattice plan` is asked about: a model, a batch, a layout and the machines.
#include <cstdint>
#include <string>

#include "analysis/formulas.hpp"
#include "analysis/moe_formulas.hpp"
#include "core/config.hpp"

namespace lattice::plan {

struct PlanRequest {
  ModelConfig model;
  LayoutConfig layout;       // layout.dp = gpus / (t·c·p); layout.ep (MoE) divides it
  int micro_batch = 1;       // b
  int global_batch = 1;      // B sequences per iteration
  int gpus = 1;              // t · c · p · dp
  int64_t gpu_memory = 0;    // bytes per device
  int64_t data_bytes = 0;    // token files a run reads (--data), for the per-category prediction
  bool save = false;         // the run writes a checkpoint (--save)
  bool offload_optimizer = false;  // AdamW's moments kept on disk (--offload-optimizer)
  bool offload_params = false;     // ZeRO-3's fp32 weight shards on disk too (--offload-params)
  bool zero_bubble = false;        // --schedule zb-h1: backward split, weight passes in the bubbles
  bool gpipe = false;              // --schedule gpipe: 1F1B's passes and time, every micro-batch kept at once
  bool pipedream_2bw = false;      // --schedule pipedream-2bw: no flush, two weight versions
  // --memory-budget: gpu_memory is a budget of the tracking allocator's accounted bytes a rank (the
  // largest stage's accounted peak must fit), not a device's memory for eq. 5's total.
  bool accounted_budget = false;
  // oneDNN's GEMM scratchpads join the workspaces (kernels/gemm.hpp), as this engine runs the step; a few
  // MiB at most, kept for every preset so that plan and train predict the same bytes (not in --search).
  bool engine_scratch = true;
  int threads = 1;                 // threads a rank runs (zb-h1: each keeps LayerNorm partial sums for W)

  int micro_batches() const { return global_batch / (micro_batch * layout.dp); }  // n_mb per rank
  int weight_versions() const { return pipedream_2bw ? 2 : 1; }  // of weights and gradients a stage keeps
  // 16-bit weights and gradients with fp32 masters (--params-dtype; the planner's default is bf16).
  bool mixed_precision() const { return layout.mixed_precision(); }
  // GEMMs run in the activations' dtype (the device's bf16 or fp32 peak).
  bool bf16_compute() const { return layout.activation_dtype == DType::bf16; }
};

// The activation shape of one micro-batch on one rank, as the formulas take it.
analysis::ActivationShape activation_shape(const PlanRequest& r);
analysis::FlopsShape flops_shape(const PlanRequest& r);
// MoE models: what one MoE layer keeps on one rank for one micro-batch, with balanced experts — the
// rank routes A = routed_assignments_bound(s·b tokens) assignments and its experts receive A rows
// (the most loaded rank of a real run can receive more).
analysis::MoEKeptShape moe_kept_shape(const PlanRequest& r);
// The same for the most loaded rank: its experts receive the bound on rows (moe_received_rows_bound).
analysis::MoEKeptShape moe_loaded_shape(const PlanRequest& r);

// Empty when the layout can run; otherwise one sentence naming the broken constraint.
std::string layout_problem(const PlanRequest& r);
// Throws InputError with layout_problem's sentence.
void check_layout(const PlanRequest& r);

}  // namespace lattice::plan
