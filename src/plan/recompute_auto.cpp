#include "plan/recompute_auto.hpp"

#include <algorithm>

#include "analysis/memory_categories.hpp"
#include "core/error.hpp"
#include "core/stage_partition.hpp"
#include "plan/evaluate.hpp"
#include "plan/memory_model.hpp"
#include "plan/report.hpp"

namespace lattice::plan {

using analysis::mib_text;

Recompute strongest_mode(const std::vector<LayerRecompute>& plan) {
  Recompute mode = Recompute::none;
  for (LayerRecompute m : plan) {
    if (forward_recomputed(m)) return Recompute::full;
    if (m == LayerRecompute::selective) mode = Recompute::selective;
  }
  return mode;
}

AutoRecompute choose_recompute_plan(const PlanRequest& request, int64_t budget) {
  const LayoutConfig& l = request.layout;
  require(budget > 0, "--memory-budget must be a positive number of bytes");
  require(!request.model.moe.enabled(),
          "--recompute auto plans dense models (the per-rank memory model has no MoE block yet)");
  require(l.virtual_stages == 1, "--recompute auto needs --virtual-stages 1");
  require(!request.zero_bubble, "--recompute auto does not yet count ZB-H1's deferred weight-pass operands: choose "
                                "with --schedule 1f1b, or give --recompute-plan");
  PlanRequest r = request;
  r.layout.recompute = Recompute::none, r.layout.recompute_plan.clear();
  r.layout.recompute_method = RecomputeMethod::block, r.layout.recompute_layers = -1;
  const analysis::MemoryCase c = memory_case(r);
  const StagePartition partition = StagePartition::of(r.layout, r.model.layers);
  // Selective's backward re-makes the s² tensors at full precision: with 8-bit kept tensors that can
  // exceed a segment's tail, where the chooser's fast order does not hold; fused attention has none.
  const bool allow_selective = !l.fused_attention() && !l.fp8_kept;
  AutoRecompute out;
  out.plan.assign(size_t(r.model.layers), LayerRecompute::none);
  for (int stage = 0; stage < l.pp; ++stage) {
    const analysis::StageRecomputeCosts costs = analysis::stage_recompute_costs(c, stage);
    const std::vector<int> layers = partition.layers_of_rank(stage, l.pp);
    const analysis::RecomputeChoice least =
        analysis::least_peak_recompute(costs, int(layers.size()), allow_selective);
    // Besides the activations' instant, the accounted peak may fall where the plan changes nothing
    // (the optimizer step's transient buffers, a checkpoint's staging).
    const analysis::CategoryBytes fixed = analysis::rank_memory(c, stage, {least.plan});
    const double elsewhere = double(fixed.accounted_peak) > least.peak ? double(fixed.accounted_peak) : 0.0;
    const std::string where = l.pp > 1 ? "stage " + std::to_string(stage) + "'s" : "a rank's";
    require(costs.fixed <= double(budget) && elsewhere <= double(budget),
            "--memory-budget " + mib_text(double(budget)) + " (" + std::to_string(int64_t(budget)) + " bytes) is below " +
                where + " model states and buffers (" + std::to_string(int64_t(std::max(costs.fixed, elsewhere))) +
                " bytes before any activation)");
    require(least.peak <= double(budget),
            "--memory-budget " + mib_text(double(budget)) + ": the least peak any recompute plan reaches on " + where +
                " layers is " + mib_text(least.peak) + " (" + recompute_plan_text(least.plan) +
                (allow_selective ? "" : "; selective not offered") + ")");
    analysis::RecomputeChoice choice = analysis::choose_recompute(costs, int(layers.size()), double(budget),
                                                                  allow_selective);
    for (size_t i = 0; i < layers.size(); ++i) out.plan[size_t(layers[i])] = choice.plan[i];
    out.peak = std::max(out.peak, choice.peak);
    out.recompute_flops += choice.flops * double(r.micro_batches()) * double(l.tp * l.dp);
    out.least_peak.push_back(least.peak);
    out.stages.push_back(std::move(choice));
  }
  out.model_flops = plan_flops(request).model_flops;
  return out;
}

std::string describe_recompute_plan(const AutoRecompute& a, int stages) {
  std::string text;
  for (int s = 0; s < stages && size_t(s) < a.stages.size(); ++s) {
    if (!text.empty()) text += ", ";
    text += (stages > 1 ? "stage " + std::to_string(s) + " " : "") + recompute_plan_text(a.stages[size_t(s)].plan);
  }
  return text;
}

}  // namespace lattice::plan
