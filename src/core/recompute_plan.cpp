#include "core/recompute_plan.hpp"

#include <algorithm>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/stage_partition.hpp"

namespace lattice {

char to_char(LayerRecompute r) {
  switch (r) {
    case LayerRecompute::none: return 'n';
    case LayerRecompute::selective: return 's';
    case LayerRecompute::checkpoint: return 'c';
    case LayerRecompute::in_segment: return '~';
  }
  return '?';
}

std::string recompute_plan_text(const std::vector<LayerRecompute>& plan) {
  std::string text;
  text.reserve(plan.size());
  for (LayerRecompute r : plan) text += to_char(r);
  return text;
}

std::vector<LayerRecompute> parse_recompute_plan(const std::string& text) {
  require(!text.empty(), "--recompute-plan: empty (one character a layer: n s c ~)");
  std::vector<LayerRecompute> plan;
  plan.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    switch (text[i]) {
      case 'n': plan.push_back(LayerRecompute::none); break;
      case 's': plan.push_back(LayerRecompute::selective); break;
      case 'c': plan.push_back(LayerRecompute::checkpoint); break;
      case '~': plan.push_back(LayerRecompute::in_segment); break;
      default:
        fail("--recompute-plan '" + text + "': character " + std::to_string(i + 1) +
             " is not one of n (none), s (selective), c (checkpoint), ~ (in a segment)");
    }
  }
  return plan;
}

namespace {

std::vector<LayerRecompute> checked_plan(const LayoutConfig& layout, int layers) {
  const std::vector<LayerRecompute>& plan = layout.recompute_plan;
  const std::string text = recompute_plan_text(plan);
  require(int(plan.size()) == layers, "--recompute-plan '" + text + "' has " + std::to_string(plan.size()) +
                                          " layers, the model " + std::to_string(layers));
  const StagePartition stages = StagePartition::of(layout, layers);
  for (int s = 0; s < stages.stages(); ++s)
    require(plan[size_t(stages.begin(s))] != LayerRecompute::in_segment,
            "--recompute-plan '" + text + "': layer " + std::to_string(stages.begin(s)) + " begins stage " +
                std::to_string(s) + " and so cannot continue a segment (~); segments never cross a stage");
  // A ~ continues the segment of the checkpoint below it: above n or s there is none to continue (the
  // engine ran "n~" as "c~" while the run said "none"; the planner refuses it in these words).
  for (size_t i = 1; i < plan.size(); ++i)
    require(plan[i] != LayerRecompute::in_segment || forward_recomputed(plan[i - 1]),
            "--recompute-plan '" + text + "': layer " + std::to_string(i) + " is in a segment no checkpoint below it starts");
  return plan;
}

}  // namespace

std::vector<LayerRecompute> layer_recompute(const LayoutConfig& layout, int layers) {
  if (!layout.recompute_plan.empty()) return checked_plan(layout, layers);
  const bool uniform = layout.recompute_method == RecomputeMethod::uniform;
  require(!uniform || layout.recompute == Recompute::full,
          "--recompute-method uniform needs --recompute full (got --recompute " +
              std::string(to_string(layout.recompute)) + ")");
  switch (layout.recompute_in_effect()) {
    case Recompute::none: return std::vector<LayerRecompute>(size_t(layers), LayerRecompute::none);
    case Recompute::selective: return std::vector<LayerRecompute>(size_t(layers), LayerRecompute::selective);
    case Recompute::full: break;
  }
  std::vector<LayerRecompute> plan(size_t(layers), LayerRecompute::none);
  const int k = layout.recompute_layers;
  if (!uniform) {
    // Block: the first k layers of each (virtual) stage, as Megatron's block method counts them per
    // pipeline stage (-1: every layer). With one stage, the model's first k.
    if (k < 0) return std::vector<LayerRecompute>(size_t(layers), LayerRecompute::checkpoint);
    const StagePartition stages = StagePartition::of(layout, layers);
    for (int s = 0; s < stages.stages(); ++s)
      for (int j = 0; j < std::min(k, stages.layers(s)); ++j) plan[size_t(stages.begin(s) + j)] = LayerRecompute::checkpoint;
    return plan;
  }
  require(k >= 0, "--recompute-method uniform needs --recompute-layers k (the layers of a segment)");
  require(k >= 1, "--recompute-layers must be at least 1 with --recompute-method uniform (got " +
                      std::to_string(k) + ")");
  require(k <= layers, "--recompute-layers (" + std::to_string(k) + ") is more than --layers (" +
                           std::to_string(layers) + ")");
  const StagePartition stages = StagePartition::of(layout, layers);
  for (int s = 0; s < stages.stages(); ++s) {
    const int n = stages.layers(s);
    require(n % k == 0, "--recompute-method uniform --recompute-layers " + std::to_string(k) + ": stage " +
                            std::to_string(s) + " holds " + std::to_string(n) + " layers, which " +
                            std::to_string(k) + " does not divide");
    for (int j = 0; j < n; ++j)
      plan[size_t(stages.begin(s) + j)] = j % k == 0 ? LayerRecompute::checkpoint : LayerRecompute::in_segment;
  }
  return plan;
}

}  // namespace lattice
