#pragma once
// Memory of the most loaded rank (the first pipeline stage), entirely from analysis/formulas.
#include <cstdint>

#include "analysis/formulas.hpp"
#include "plan/plan_request.hpp"

namespace lattice::plan {

struct MemoryPlan {
  int64_t activation_bytes_per_layer = 0;   // Table 2 row of the first layer under this layout
  double first_stage_layer_bytes = 0;       // eq. 5 with the interleaved factor
  int64_t extra_activation_bytes = 0;       // embedding masks; with p == 1 final LN, logits
  double first_stage_activation_bytes = 0;  // the two above
  int64_t shard_parameters = 0;             // parameters on the most loaded shard
  analysis::ModelStateBytes model_state;    // per rank, after ZeRO sharding
  double total_bytes = 0;                   // model states + first-stage activations
  int64_t capacity_bytes = 0;
  bool fits() const { return total_bytes <= double(capacity_bytes); }
};

MemoryPlan plan_memory(const PlanRequest& r);

}  // namespace lattice::plan
