#pragma once
// `--recompute auto --memory-budget BYTES` (issue 19, docs/design.md §4): each pipeline stage's recompute
// plan with the least recompute FLOPs whose predicted accounted peak a rank fits the budget, chosen by
// analysis::choose_recompute over the stage's costs from the per-category memory model. Every rank
// computes the same plan from the same flags; `lattice train` runs it and `lattice plan` prints it.
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/recompute_choice.hpp"
#include "plan/plan_request.hpp"

namespace lattice::plan {

struct AutoRecompute {
  std::vector<LayerRecompute> plan;               // every layer, bottom first: the layout's recompute_plan
  std::vector<analysis::RecomputeChoice> stages;  // each pipeline stage's choice
  std::vector<double> least_peak;                 // each stage's least peak any plan reaches
  double peak = 0;                                // the largest stage's predicted accounted peak
  double recompute_flops = 0;                     // per step, all stages and micro-batches of one pipeline
  double model_flops = 0;                         // the step's forward + backward FLOPs, for the overhead
};

// Throws InputError naming the stage and the least peak when no plan fits, or the model states and
// buffers when even those exceed the budget. Dense models, one virtual stage, no --pipeline-layers auto.
AutoRecompute choose_recompute_plan(const PlanRequest& r, int64_t budget);

// The layout's strongest mode in a chosen plan (full when it keeps any checkpoint, else selective
// when any layer is, else none): what `--recompute` reads as afterwards.
Recompute strongest_mode(const std::vector<LayerRecompute>& plan);

// "stage 0 c~c~ssnn, stage 1 ...": one line's worth.
std::string describe_recompute_plan(const AutoRecompute& a, int stages);

}  // namespace lattice::plan
