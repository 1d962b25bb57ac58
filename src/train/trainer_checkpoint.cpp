// Trainer::stage_save: the whole model in one rank's layout, streamed tensor by tensor from the TP
// shards, pipeline stages and ZeRO pieces that hold it to world rank 0, which writes it
// (train/checkpoint_stream.hpp, checkpoint/checkpoint.hpp); and its promotion past the loss-spike guard.
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "comm/gather_int64.hpp"
#include "core/stage_partition.hpp"
#include "core/version.hpp"
#include "train/checkpoint_stream.hpp"
#include "train/trainer.hpp"

namespace lattice {

void Trainer::stage_save(const std::string& dir) {
  nlohmann::json state = {{"lattice_version", version::kFull},  // what wrote it; read by no one
                          {"step", step_},
                          {"seed", config_.seed},
                          {"model", checkpoint::model_config_json(model_config_)},
                          {"data_position", {{"step", step_}, {"shuffle", config_.shuffle}}},
                          {"generator", {{"kind", "philox4x32-10"}, {"seed", config_.seed}, {"step", step_}}},
                          {"train", {{"micro_batch", config_.micro_batch}, {"global_batch", config_.global_batch},
                                     {"lr", config_.lr}, {"lr_schedule", config_.lr_schedule}}},
                          {"layout", {{"tp", layout_.tp}, {"pp", layout_.pp}, {"dp", layout_.dp}, {"ep", layout_.ep},
                                      {"params_dtype", to_string(layout_.params_dtype)},
                                      {"sequence_parallel", layout_.sequence_parallel},
                                      // recorded, not checked: weights are stored by name, so any partition resumes
                                      {"pipeline_layers",
                                       layer_counts_text(StagePartition::of(layout_, model_config_.layers).counts())}}},
                          {"updates_applied", step_ - loss_scaler_.skipped},
                          {"schedule", config_.schedule},
                          {"tokenizer", tokenizer_.fingerprint()},
                          {"weight_versions", states_->versions()},
                          {"recent_losses", spike_guard_.history()}};
  if (loss_scaler_.active)
    state["loss_scale"] = {{"scale", loss_scaler_.scale}, {"clean_steps", loss_scaler_.clean_steps}};
  // Tensor states are whole-tensor vectors, the same on every TP and DP rank; stages hold different
  // ones. Small (a few per tensor), so gathered; the model-shaped arrays stream.
  std::vector<comm::NamedVector> tensor_states;
  for (const auto& t : optimizer_->tensor_states())
    tensor_states.push_back({t.name, std::vector<float>(t.values, t.values + t.shape[0])});
  if (pipeline_) tensor_states = comm::all_gather_named(dist_->pp(), tensor_states);
  staged_.reset();  // an earlier one never promoted
  std::unique_ptr<checkpoint::StagedCheckpoint> staged;
  if (is_logging_rank()) staged = std::make_unique<checkpoint::StagedCheckpoint>(dir);
  CheckpointStream stream(model_config_, model_->table(), dist_);
  stream.write("", states_->save_pieces(nullptr), staged ? &staged->model_file(model_config_) : nullptr);
  if (states_->versions() == 2) {  // the version the next batch reads (docs/design.md §6.3)
    const parallel::ModelStates::PreviousPieces previous = states_->previous_save_pieces();
    stream.write("", previous.pieces, staged ? &staged->previous_model_file(model_config_) : nullptr);
  }
  std::vector<std::string> prefixes;
  std::vector<checkpoint::TensorSpec> tensor_specs;
  for (const auto& e : optimizer_->element_states()) prefixes.push_back(e.prefix);
  for (const auto& [name, values] : tensor_states) tensor_specs.push_back({name, "F32", {int64_t(values.size())}});
  checkpoint::SafetensorsWriter* optimizer_file =
      staged ? &staged->optimizer_file(model_config_, optimizer_->name(), prefixes, tensor_specs) : nullptr;
  for (const auto& e : optimizer_->element_states())
    stream.write(e.prefix, states_->save_pieces(e.values), optimizer_file);
  if (staged) {
    for (const auto& [name, values] : tensor_states) optimizer_file->append(name, values.data(), values.size() * 4);
    for (const data::NamedFile& f : data::tokenizer_files(tokenizer_)) staged->add_file(f.name, f.contents);
    if (!model_config_.moe.enabled())  // Hugging Face's GPT-2 has no experts
      staged->add_file(checkpoint::kHuggingFaceConfig, checkpoint::hf_gpt2_config(model_config_));
    staged->finish(state);
  }
  staged_ = std::move(staged);
  staged_step_ = step_;
  if (dist_) dist_->world().barrier();
}

std::string Trainer::promote_if_sound(double loss) {
  if (staged_step_ < 0) return "";
  const LossSpikeGuard::Verdict verdict = spike_guard_.judge(loss);
  if (!verdict.outlier) {
    promote_save();
    return "";
  }
  const int64_t refused_step = staged_step_;
  staged_.reset();  // removes the staged directory: the checkpoint on disk stays as it was
  staged_step_ = -1;
  if (run_log_) {
    const LossSpikeGuard::WindowStats& w = verdict.window;
    run_log_->record({{"event", "promotion_refused"},
                      {"step", refused_step},
                      {"loss", loss},
                      {"rule", LossSpikeGuard::name(verdict.rule)},
                      {"limit", verdict.threshold},
                      {"window", {{"losses", w.losses}, {"mean", w.mean}, {"std", w.std}, {"median", w.median}}},
                      {"save", config_.save},
                      {"kept_step", saved_step_ >= 0 ? nlohmann::json(saved_step_) : nlohmann::json(nullptr)}});
  }
  std::error_code ec;
  const std::string kept = saved_step_ >= 0 ? "kept the checkpoint of step " + std::to_string(saved_step_) + " in " + config_.save
                           : std::filesystem::exists(config_.save, ec) ? "left " + config_.save + " as it was"
                                                                        : "wrote nothing to " + config_.save;
  return "the checkpoint of step " + std::to_string(refused_step) + " was not promoted: " +
         LossSpikeGuard::describe(loss, verdict) + "; " + kept;
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
