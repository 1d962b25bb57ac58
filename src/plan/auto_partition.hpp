#pragma once
// `--pipeline-layers auto`: PipeDream's partitioner (analysis/partition.hpp) fed by the planner —
// each layer's seconds from the time model (plan_time's own per-layer costs, the output layer on
// the last stage) and each candidate stage's bytes from the per-category prediction
// (analysis::rank_memory, everything a rank holds). `lattice train`, `lattice plan` and the
// planner's search all partition through here (docs/design.md §6).
#include "analysis/partition.hpp"
#include "plan/hardware.hpp"
#include "plan/plan_request.hpp"

namespace lattice::plan {

analysis::PartitionCosts partition_costs(const PlanRequest& r, const Hardware& hw);

// The counts for r's model over its p stages (m = 1) minimising the slowest stage within
// `memory_cap` bytes per rank. Throws InputError when none fits (naming the smallest peak).
analysis::Partition auto_partition(const PlanRequest& r, const Hardware& hw, double memory_cap);

}  // namespace lattice::plan
