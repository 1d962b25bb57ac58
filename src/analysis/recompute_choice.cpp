// The stage peak and recompute FLOPs of a per-layer plan (docs/design.md §4). choose_recompute and
// least_peak_recompute live in recompute_chooser.cpp.
#include "analysis/recompute_choice.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace lattice::analysis {

namespace {

const LayerModeCost& cost_of(const StageRecomputeCosts& costs, LayerRecompute r) {
  return costs.mode[static_cast<size_t>(r)];
}

}  // namespace

double stage_activation_peak(const StageRecomputeCosts& costs, const std::vector<LayerRecompute>& plan) {
  // Backward runs top-down: unit u holds its live bytes over the kept bytes of the layers below it.
  double kept = 0;      // K so far (layers below the current unit)
  double unit_max = 0;  // max over units of pre(u) + live(u)
  size_t i = 0;
  const size_t n = plan.size();
  while (i < n) {
    if (plan[i] == LayerRecompute::in_segment)
      fail("recompute plan '" + recompute_plan_text(plan) + "': layer " + std::to_string(i) +
           " is in a segment no checkpoint below it starts");
    size_t end = i + 1;
    if (plan[i] == LayerRecompute::checkpoint)
      while (end < n && plan[end] == LayerRecompute::in_segment) ++end;
    double live = 0, unit_kept = 0;
    for (size_t j = i; j < end; ++j) {
      live += cost_of(costs, plan[j]).live;
      unit_kept += cost_of(costs, plan[j]).kept;
    }
    const double extra = end == n ? costs.top_extra : costs.rest_extra;
    unit_max = std::max(unit_max, kept + live + extra);
    kept += unit_kept;
    i = end;
  }
  return (costs.in_flight - 1) * kept + std::max(kept + costs.head + costs.head_extra, unit_max) + costs.fixed;
}

double recompute_flops(const StageRecomputeCosts& costs, const std::vector<LayerRecompute>& plan) {
  double flops = 0;
  for (LayerRecompute r : plan) flops += cost_of(costs, r).flops;
  return flops;
}

}  // namespace lattice::analysis
