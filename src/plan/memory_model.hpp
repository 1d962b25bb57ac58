#pragma once
// Memory of the most loaded rank (the first pipeline stage), entirely from analysis/formulas and
// analysis/moe_formulas.
#include <cstdint>

#include <vector>

#include "analysis/formulas.hpp"
#include "analysis/memory_categories.hpp"
#include "plan/plan_request.hpp"

namespace lattice::plan {

// With uneven stages (--pipeline-layers) the "first stage" figures are those of the heaviest stage.
struct MemoryPlan {
  int stage = 0;  // the stage that decides what fits: the first, or the heaviest (uneven stages, ZB-H1)
  int64_t activation_bytes_per_layer = 0;   // Table 2 row of the first layer under this layout (as a dense layer)
  int64_t moe_layer_activation_bytes = 0;   // MoE models: one MoE layer's bytes, balanced experts (else 0)
  int64_t moe_received_rows_max = 0;        // rows this rank's experts can receive unbalanced (moe_received_rows_bound)
  int64_t moe_layer_activation_bytes_max = 0;  // one MoE layer's bytes when they do
  int first_stage_moe_layers = 0;           // MoE layers among the first stage's L/p
  double first_stage_layer_bytes = 0;       // eq. 5 with the interleaved factor
  int64_t extra_activation_bytes = 0;       // embedding masks; with p == 1 final LN, logits
  double first_stage_activation_bytes = 0;  // the two above
  int64_t shard_parameters = 0;             // parameters on the most loaded shard
  int64_t dense_parameters = 0;             // of which reduced over the N_d data-parallel ranks
  int64_t expert_parameters = 0;            // of which experts, reduced over the N_d/e expert-data-parallel ranks
  analysis::ModelStateBytes model_state;    // per rank, after ZeRO sharding
  double total_bytes = 0;                   // model states + first-stage activations
  int64_t capacity_bytes = 0;
  // Every byte by category, per pipeline stage (docs/design.md §4): dense models; empty for MoE,
  // whose block's workspaces and routing buffers the prediction does not cover yet.
  std::vector<analysis::CategoryBytes> by_stage;
  bool accounted_capacity = false;  // --memory-budget: the largest stage's accounted peak must fit
  bool fits() const;
};

MemoryPlan plan_memory(const PlanRequest& r);
// The request as the per-category model takes it (analysis::rank_memory); no rank writes a checkpoint.
analysis::MemoryCase memory_case(const PlanRequest& r);

}  // namespace lattice::plan
