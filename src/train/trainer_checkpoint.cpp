// Trainer::save: the whole model in one rank's layout, gathered from every TP shard, pipeline stage
// and ZeRO piece, written by world rank 0 (checkpoint/checkpoint.hpp).
#include "checkpoint/checkpoint.hpp"
#include "comm/gather_int64.hpp"
#include "model/gather_shards.hpp"
#include "train/trainer.hpp"

namespace lattice {

void Trainer::stage_save(const std::string& dir) {
  nlohmann::json state = {{"step", step_},
                          {"seed", config_.seed},
                          {"model", checkpoint::model_config_json(model_config_)},
                          {"data_position", {{"step", step_}, {"shuffle", config_.shuffle}}},
                          {"generator", {{"kind", "philox4x32-10"}, {"seed", config_.seed}, {"step", step_}}},
                          {"train", {{"micro_batch", config_.micro_batch}, {"global_batch", config_.global_batch},
                                     {"lr", config_.lr}, {"lr_schedule", config_.lr_schedule}}},
                          {"layout", {{"tp", layout_.tp}, {"pp", layout_.pp}, {"dp", layout_.dp}, {"ep", layout_.ep},
                                      {"sequence_parallel", layout_.sequence_parallel}}},
                          {"updates_applied", step_ - loss_scaler_.skipped}};
  if (loss_scaler_.active)
    state["loss_scale"] = {{"scale", loss_scaler_.scale}, {"clean_steps", loss_scaler_.clean_steps}};
  // Pipeline stages contribute what they hold, tensor-parallel shards are gathered into one
  // rank's layout; world rank 0 writes.
  comm::Communicator* tp = dist_ ? &dist_->tp() : nullptr;
  // The fp32 weights (ZeRO shards or 16-bit runs' masters gathered), laid out as the whole model.
  const auto params_local = owned_by_stage(states_->full_weights().data());
  const auto params = parallel::gather_full(tp, model_config_, params_local.data());
  // Element states (a ZeRO shard is first gathered over DP into this rank's full TP-shard layout).
  checkpoint::FullState full{params.data(), optimizer_->name(), {}, {}};
  std::vector<tracked_vector<float, MemoryCategory::checkpoint_io>> element_values;
  for (const auto& e : optimizer_->element_states()) {
    const auto local = owned_by_stage(states_->gather_full(e.values).data());
    element_values.push_back(parallel::gather_full(tp, model_config_, local.data()));
    full.element_states.push_back({e.prefix, element_values.back().data()});
  }
  // Tensor states are whole-tensor vectors, the same on every TP and DP rank; stages hold different ones.
  for (const auto& t : optimizer_->tensor_states())
    full.tensor_states.push_back({t.name, std::vector<float>(t.values, t.values + t.shape[0])});
  if (pipeline_) full.tensor_states = comm::all_gather_named(dist_->pp(), full.tensor_states);
  staged_.reset();  // an earlier one never promoted
  if (is_logging_rank()) staged_ = std::make_unique<checkpoint::StagedCheckpoint>(dir, model_config_, full, state);
  staged_step_ = step_;
  if (dist_) dist_->world().barrier();
}

tracked_vector<float, MemoryCategory::checkpoint_io> Trainer::owned_by_stage(const float* values) const {
  if (!pipeline_ && layout_.ep == 1) return tracked_vector<float, MemoryCategory::checkpoint_io>(values, values + model_->num_params());
  // Each stage (and expert-parallel rank) places the tensors it holds into the whole model's layout
  // (this TP rank's shard of it) and the parts are summed; the tied embedding is taken from the
  // first stage only, dense tensors (the same on every EP rank) from EP rank 0 only.
  const ParamTable whole(model_config_, layout_.tp, dist_->coords().tp_rank);
  tracked_vector<float, MemoryCategory::checkpoint_io> out(static_cast<size_t>(whole.total()), 0.0f);
  const bool first = dist_->coords().pp_rank == 0, ep_first = dist_->coords().ep_rank == 0;
  for (const ParamInfo& p : model_->table().params()) {
    if (p.offset == model_->table().wte() && !first) continue;
    if (!p.expert && !ep_first) continue;
    const ParamInfo& w = whole.params()[size_t(p.full_index)];
    std::copy(values + p.offset, values + p.offset + p.numel, out.begin() + w.offset);
  }
  if (pipeline_) dist_->pp().all_reduce({out.data(), out.size()});
  if (layout_.ep > 1) dist_->ep().all_reduce({out.data(), out.size()});
  return out;
}

void Trainer::promote_save() {
  if (staged_step_ < 0) return;
  if (staged_) staged_->commit();
  staged_.reset();
  saved_step_ = staged_step_;
  staged_step_ = -1;
}

std::string Trainer::saved_note() const {
  if (config_.save.empty()) return "";
  if (saved_step_ < 0) return "; no checkpoint was written to " + config_.save;
  return "; the checkpoint in " + config_.save + " holds step " + std::to_string(saved_step_);
}

}  // namespace lattice
