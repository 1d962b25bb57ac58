#include "plan/evaluate.hpp"

#include <algorithm>
#include <vector>

#include "core/recompute_plan.hpp"

namespace lattice::plan {

FlopsPlan plan_flops(const PlanRequest& r) {
  const analysis::FlopsShape f = flops_shape(r);
  FlopsPlan out;
  // Fused attention: selective recomputes nothing (no s² tensor was dropped), and the backward
  // recomputes QKᵀ in every mode (docs/design.md §3.1).
  const Recompute recompute = r.layout.recompute_in_effect();
  const double fused_extra = r.layout.fused_attention() ? analysis::fused_attention_recompute_flops(f) : 0.0;
  if (r.model.moe.enabled()) {
    // Active parameters: each token passes through k experts, not E (analysis/moe_formulas). Eq. 8's
    // selective form has no MoE counterpart, so both hardware figures are the operation count.
    out.model_flops = analysis::moe_model_flops(r.model, r.global_batch);
    out.hardware_flops = out.hardware_flops_counted =
        analysis::moe_hardware_flops_counted(r.model, r.global_batch, recompute) + fused_extra;
  } else {
    out.model_flops = analysis::model_flops(f);
    out.hardware_flops = analysis::hardware_flops_paper(f, recompute) + fused_extra;
    out.hardware_flops_counted = analysis::hardware_flops_counted(f, recompute) + fused_extra;
  }
  // Full recompute of only some layers re-runs only their forward.
  if (r.layout.recompute == Recompute::full && r.layout.recompute_layers >= 0 &&
      r.layout.recompute_method == RecomputeMethod::block && r.layout.recompute_plan.empty()) {
    const std::vector<LayerRecompute> plan = layer_recompute(r.layout, r.model.layers);  // k of each stage
    const double share = double(std::count(plan.begin(), plan.end(), LayerRecompute::checkpoint)) / r.model.layers;
    const double extra = out.hardware_flops_counted - fused_extra - out.model_flops;
    out.hardware_flops = out.hardware_flops_counted = out.model_flops + share * extra + fused_extra;
  }
  return out;
}

Utilisation utilisation(const FlopsPlan& f, int gpus, double seconds, double peak_flops) {
  Utilisation u;
  u.iteration_s = seconds;
  u.peak_flops = peak_flops;
  const double capacity = seconds * gpus * peak_flops;
  if (capacity > 0) {
    u.mfu = f.model_flops / capacity;
    u.hfu = f.hardware_flops / capacity;
    u.hfu_counted = f.hardware_flops_counted / capacity;
  }
  return u;
}

Plan evaluate(const PlanRequest& r, const Hardware& hw, double iteration_time, double peak_flops) {
  Plan p;
  p.request = r;
  p.memory = plan_memory(r);
  p.flops = plan_flops(r);
  p.time = plan_time(r, hw);
  const double peak = peak_flops > 0 ? peak_flops : hw.peak_flops(r.bf16_compute());
  const bool measured = iteration_time > 0;
  p.use = utilisation(p.flops, r.gpus, measured ? iteration_time : p.time.iteration_s, peak);
  p.use.measured = measured;
  return p;
}

}  // namespace lattice::plan
