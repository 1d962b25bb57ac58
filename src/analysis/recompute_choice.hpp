#pragma once
// One pipeline stage's activation peak under a per-layer recompute plan, and the plan with the least
// recompute FLOPs whose peak fits a budget (issue 19, docs/design.md §4). Pure arithmetic on bytes and
// FLOPs per layer mode: analysis/memory_categories fills the costs from a model's shape, the planner
// and `train --recompute auto` call the chooser, and the tests check it against brute force.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/recompute_plan.hpp"

namespace lattice::analysis {

// What one layer of the stage costs in each mode, for one micro-batch (indexed by LayerRecompute).
struct LayerModeCost {
  double kept = 0;   // bytes it holds from its forward to its backward
  double live = 0;   // bytes its backward holds at once (a segment's layer: its full activations)
  double flops = 0;  // forward FLOPs its backward re-runs
};

struct StageRecomputeCosts {
  std::array<LayerModeCost, 4> mode{};  // none, selective, checkpoint, in_segment
  double head = 0;       // H: tensors the output layer holds until its backward (last stage), freed before any layer's
  double in_flight = 1;  // f: micro-batches whose kept tensors the schedule holds at once on this stage
  double fixed = 0;      // everything the plan does not change: model states, buffers, embedding's tensors
  // What backward holds beyond `fixed` (ZeRO-2/3's gradient buckets, docs/design.md §8): X_h at the
  // output layer's backward, X_top at the top unit's, X_rest at every unit below it.
  double head_extra = 0, top_extra = 0, rest_extra = 0;
};

// (f − 1)·K + max(K + H + X_h, max over backward units u of [kept below u + live(u) + X_u]) + fixed, where
// K is the stage's kept bytes, X_u is X_top for the top unit and X_rest below, and a unit is a segment (checkpoint and the in_segment layers above it; live is
// the sum of its layers' live bytes, its checkpoint's kept input reused) or a single none/selective
// layer. `plan` lists the stage's layers bottom first; it must be valid (every in_segment above a
// checkpoint or in_segment). Throws InputError when it is not.
double stage_activation_peak(const StageRecomputeCosts& costs, const std::vector<LayerRecompute>& plan);
double recompute_flops(const StageRecomputeCosts& costs, const std::vector<LayerRecompute>& plan);

struct RecomputeChoice {
  std::vector<LayerRecompute> plan;  // bottom first
  double peak = 0;                   // stage_activation_peak(costs, plan)
  double flops = 0;                  // recompute_flops(costs, plan)
};

// The plan of `layers` layers with the least recompute FLOPs whose peak is at most `budget`; ties go to
// the lower peak, then to fewer checkpoints. Without `allow_selective` no layer is selective. Throws
// InputError when no plan fits, naming the least peak any plan reaches (and that plan).
RecomputeChoice choose_recompute(const StageRecomputeCosts& costs, int layers, double budget,
                                 bool allow_selective = true);
// "12.34 MiB": how the chooser's errors, and its callers', name bytes.
std::string mib_text(double bytes);

// The plan with the least peak (ignoring FLOPs; ties to fewer FLOPs).
RecomputeChoice least_peak_recompute(const StageRecomputeCosts& costs, int layers, bool allow_selective = true);

}  // namespace lattice::analysis
