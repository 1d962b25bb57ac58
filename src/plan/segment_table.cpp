#include "plan/segment_table.hpp"

#include <cmath>
#include <numeric>

#include "analysis/memory_categories.hpp"
#include "analysis/recompute_choice.hpp"
#include "core/stage_partition.hpp"
#include "plan/memory_model.hpp"

namespace lattice::plan {

std::vector<StageSegments> segment_table(const PlanRequest& r) {
  std::vector<StageSegments> out;
  const LayoutConfig& l = r.layout;
  if (l.recompute != Recompute::full || !l.recompute_plan.empty() || r.model.moe.enabled()) return out;
  const StagePartition partition = StagePartition::of(l, r.model.layers);
  const analysis::MemoryCase c = memory_case(r);
  const analysis::ActivationShape x = activation_shape(r);
  for (int stage = 0; stage < l.pp; ++stage) {
    // The rank's chunks (virtual stages stage, stage + p, …): k must divide each.
    std::vector<int> chunks;
    int common = 0;
    for (int s = stage; s < partition.stages(); s += l.pp) chunks.push_back(partition.layers(s)), common = std::gcd(common, partition.layers(s));
    StageSegments t;
    t.stage = stage;
    t.layers = common;
    t.I = double(analysis::layer_kept_bytes(x, LayerRecompute::checkpoint));
    t.A = double(analysis::layer_live_bytes(x, LayerRecompute::checkpoint));
    t.k_star = std::sqrt(common * t.I / t.A);
    t.d_star = std::sqrt(common * t.A / t.I);
    t.chen = std::sqrt(double(common));
    const analysis::StageRecomputeCosts costs = analysis::stage_recompute_costs(c, stage);
    size_t least = 0;
    for (int k = 1; k <= common; ++k) {
      if (common % k) continue;
      std::vector<LayerRecompute> modes;
      for (int n : chunks)
        for (int j = 0; j < n; ++j) modes.push_back(j % k ? LayerRecompute::in_segment : LayerRecompute::checkpoint);
      SegmentRow row;
      row.k = k;
      row.kept = t.I * double(modes.size() / size_t(k));
      row.peak = analysis::stage_activation_peak(costs, modes);
      if (!t.rows.empty() && row.peak < t.rows[least].peak) least = t.rows.size();
      t.rows.push_back(row);
    }
    t.rows[least].least = true;
    out.push_back(t);
  }
  return out;
}

}  // namespace lattice::plan
