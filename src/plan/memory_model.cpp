#include "plan/memory_model.hpp"

namespace lattice::plan {

MemoryPlan plan_memory(const PlanRequest& r) {
  const analysis::ActivationShape x = activation_shape(r);
  const LayoutConfig& l = r.layout;
  MemoryPlan m;
  m.activation_bytes_per_layer = analysis::layer_activation_bytes(
      x, analysis::layer_fully_recomputed(l, 0, r.model.layers), l.recompute == Recompute::selective);
  m.first_stage_layer_bytes = analysis::first_stage_layer_bytes(x, l, r.model.layers);
  // p micro-batches are in flight on the first stage under 1F1B (eq. 5 note).
  m.extra_activation_bytes = analysis::extra_activation_bytes(x, l.pp, l.pp);
  m.first_stage_activation_bytes = m.first_stage_layer_bytes + double(m.extra_activation_bytes);
  m.shard_parameters = analysis::shard_parameters(r.model, l.tp, l.pp);
  m.model_state = analysis::model_state_bytes(m.shard_parameters, l.dp, l.zero, r.mixed_precision());
  m.total_bytes = double(m.model_state.total()) + m.first_stage_activation_bytes;
  m.capacity_bytes = r.gpu_memory;
  return m;
}

}  // namespace lattice::plan
