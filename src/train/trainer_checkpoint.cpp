// Trainer::stage_save: the whole model in one rank's layout, streamed tensor by tensor from the TP
// shards, pipeline stages and ZeRO pieces that hold it to world rank 0, which writes it
// (train/checkpoint_stream.hpp, checkpoint/checkpoint.hpp); and its promotion past the loss-spike guard.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "comm/gather_int64.hpp"
#include "core/atomic_dir.hpp"
#include "core/error.hpp"
#include "core/output_path.hpp"
#include "core/stage_partition.hpp"
#include "core/version.hpp"
#include "report/step_report.hpp"
#include "train/checkpoint_stream.hpp"
#include "train/resume_settings.hpp"
#include "train/trainer.hpp"

namespace lattice {

void Trainer::stage_save(const std::string& dir, bool background) {
  nlohmann::json state = {{"lattice_version", version::kFull},  // what wrote it; read by no one
                          {"step", step_},
                          {"seed", config_.seed},
                          {"model", checkpoint::model_config_json(model_config_)},
                          {"data_position", {{"step", step_}, {"shuffle", config_.shuffle}, {"train_bin", train_bin_fingerprint_}}},
                          {"generator", {{"kind", "philox4x32-10"}, {"seed", config_.seed}, {"step", step_}}},
                          {"train", training_settings_json(config_)},
                          {"layout", {{"tp", layout_.tp}, {"pp", layout_.pp}, {"dp", layout_.dp}, {"ep", layout_.ep}, {"cp", layout_.cp},
                                      {"params_dtype", to_string(layout_.params_dtype)},
                                      {"activation_dtype", to_string(layout_.activation_dtype)},
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
  drop_unjudged_save();  // an earlier one never promoted
  std::unique_ptr<checkpoint::StagedCheckpoint> staged;
  std::unique_ptr<SaveImage> image;  // --async-save: what the background thread writes
  if (is_logging_rank() && background) {
    image = std::make_unique<SaveImage>();
    image->dir = dir, image->config = model_config_;
  } else if (is_logging_rank()) {
    staged = std::make_unique<checkpoint::StagedCheckpoint>(dir);
  }
  std::vector<std::unique_ptr<TensorSink>> files;  // the synchronous save's open files
  auto to_file = [&](checkpoint::SafetensorsWriter& w) -> TensorSink* {
    files.push_back(std::make_unique<WriterSink>(w));
    return files.back().get();
  };
  CheckpointStream stream(model_config_, model_->table(), dist_);
  stream.write("", states_->save_pieces(nullptr),
               staged ? to_file(staged->model_file(model_config_)) : image ? &image->model : nullptr);
  if (states_->versions() == 2) {  // the version the next batch reads (docs/design.md §6.3)
    const parallel::ModelStates::PreviousPieces previous = states_->previous_save_pieces();
    if (image) image->has_previous = true;
    stream.write("", previous.pieces,
                 staged ? to_file(staged->previous_model_file(model_config_)) : image ? &image->previous : nullptr);
  }
  std::vector<std::string> prefixes;
  std::vector<checkpoint::TensorSpec> tensor_specs;
  for (const auto& e : optimizer_->element_states()) prefixes.push_back(e.prefix);
  for (const auto& [name, values] : tensor_states) tensor_specs.push_back({name, "F32", {int64_t(values.size())}});
  TensorSink* optimizer_file =
      staged ? to_file(staged->optimizer_file(model_config_, optimizer_->name(), prefixes, tensor_specs))
      : image ? &image->optimizer
              : nullptr;
  for (const auto& e : optimizer_->element_states())
    stream.write(e.prefix, states_->save_pieces(e.values), optimizer_file);
  if (optimizer_file) {
    for (const auto& [name, values] : tensor_states) optimizer_file->append(name, values.data(), values.size() * 4);
    std::vector<std::pair<std::string, std::string>> small;
    for (const data::NamedFile& f : data::tokenizer_files(tokenizer_)) small.emplace_back(f.name, f.contents);
    if (!model_config_.moe.enabled())  // Hugging Face's GPT-2 has no experts
      small.emplace_back(checkpoint::kHuggingFaceConfig, checkpoint::hf_gpt2_config(model_config_));
    if (staged) {
      for (const auto& [name, contents] : small) staged->add_file(name, contents);
      staged->finish(state);
    } else {
      image->optimizer_name = optimizer_->name(), image->element_prefixes = prefixes;
      image->tensor_specs = tensor_specs, image->files = std::move(small), image->trainer_state = state;
    }
  }
  staged_ = std::move(staged);
  if (image) background_ = std::make_unique<BackgroundSave>(std::move(image));
  staged_async_ = background, staged_sound_ = false;
  staged_step_ = step_;
  if (dist_) dist_->world().barrier();
}

std::string Trainer::promote_if_sound(double loss) {
  if (staged_step_ < 0) return "";
  if (staged_sound_) {  // judged already, still being written in the background: promoted when done
    settle_background_save(false);
    return "";
  }
  const LossSpikeGuard::Verdict verdict = spike_guard_.judge(loss);
  if (!verdict.outlier) {
    promote_save();
    return "";
  }
  const int64_t refused_step = staged_step_;
  drop_unjudged_save();  // removes the staged directory: the checkpoint on disk stays as it was
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
  if (staged_async_) {  // promoted once written: now, if the background thread is done
    staged_sound_ = true;
    settle_background_save(false);
    return;
  }
  if (staged_) staged_->commit();
  staged_.reset();
  saved_step_ = staged_step_;
  staged_step_ = -1;
}

double Trainer::settle_background_save(bool wait) {
  if (!staged_async_ || staged_step_ < 0) return 0;
  double waited = 0;
  if (wait && background_) waited = background_->wait();
  // Rank 0 alone writes; the others learn here, at the same step, whether it is done (the thread
  // never communicates: MPI is funneled through this one).
  float busy = background_ && !background_->done() ? 1.0f : 0.0f;
  if (dist_) dist_->world().all_reduce({&busy, 1}, comm::ReduceOp::max);
  if (busy != 0.0f) return waited;
  if (background_) background_->wait();  // done: its error (a full disk), if any, is thrown here
  if (!staged_sound_) return waited;     // written; the guard judges it at the next step
  const int64_t step = staged_step_;
  double write_s = 0;
  if (background_) {
    background_->commit();
    write_s = background_->write_seconds();
  }
  background_.reset();
  staged_async_ = staged_sound_ = false;
  saved_step_ = step;
  staged_step_ = -1;
  if (run_log_) run_log_->record({{"event", "save_promoted"}, {"step", step}, {"mode", "async"}, {"write_s", write_s}});
  return waited;
}

void Trainer::drop_unjudged_save() {
  if (staged_async_ && staged_sound_) {  // judged sound, still being written: it goes in first
    settle_background_save(true);
    return;
  }
  staged_.reset();
  background_.reset();  // waits for its thread, then removes what it wrote
  staged_async_ = staged_sound_ = false;
  staged_step_ = -1;
}

bool Trainer::save_due(int64_t step) const {
  if (config_.save_every_auto && auto_every_ == 0) return step == auto_first_save_;
  const int64_t every = config_.save_every_auto ? auto_every_ : config_.save_every;
  return every > 0 && step % every == 0;
}

void Trainer::choose_save_interval(double save_cost_s, double step_s) {
  // Every rank takes the same inputs (the largest), so every rank saves at the same steps.
  if (dist_) {
    float inputs[2] = {float(save_cost_s), float(step_s)};
    dist_->world().all_reduce({inputs, 2}, comm::ReduceOp::max);
    save_cost_s = inputs[0], step_s = inputs[1];
  }
  const double cost = save_cost_s, step = std::max(step_s, 1e-9), mtbf = config_.mtbf;
  const double interval_s = std::sqrt(2.0 * cost * mtbf);  // Young (1974), Daly (2006): first order
  const double steps = interval_s / step;
  auto_every_ = std::clamp<int64_t>(std::llround(steps), 1, int64_t(1) << 40);
  if (run_log_)
    run_log_->record({{"event", "save_interval"},
                      {"step", step_},
                      {"formula", "save_every = round(sqrt(2 * save_cost_s * mtbf_s) / step_s), at least 1"},
                      {"save_cost_s", cost},
                      {"mtbf_s", mtbf},
                      {"step_s", step},
                      {"interval_s", interval_s},
                      {"save_every", auto_every_}});
  if (is_logging_rank() && !config_.json)
    std::fprintf(stderr,
                 "lattice train: --save-every auto: a save every %lld steps (Young/Daly: sqrt(2 x save cost %.4g s x "
                 "MTBF %.6g s) = %.4g s, over a step of %.4g s = %.4g steps; the save cost is the training time the "
                 "save of step %lld stalled)\n",
                 (long long)auto_every_, cost, mtbf, interval_s, step, steps, (long long)step_);
}

void Trainer::report_save(int64_t step, double stall_s, double waited_s, int64_t waited_for) {
  // Under the flags that make a save's cost matter (a synchronous run's stream is as it was).
  if (run_log_ && (config_.async_save || config_.save_every_auto)) {
    nlohmann::json event = {{"event", "save"}, {"step", step}, {"mode", config_.async_save ? "async" : "sync"},
                            {"stall_s", stall_s}, {"waited_s", waited_s}};
    if (waited_for >= 0) event["waited_for"] = waited_for;
    run_log_->record(event);
  }
  if (waited_for >= 0 && waited_s >= 1e-3 && is_logging_rank() && !config_.json)
    std::fprintf(stderr, "  save of step %lld waited %.3f s for the background save of step %lld (one is written at a "
                 "time)\n", (long long)step, waited_s, (long long)waited_for);
}

void Trainer::check_save_room(int64_t start_step, bool two_versions, bool held) {
  // A save is written beside the checkpoint it replaces: with one there (a resume, --overwrite) the
  // run needs one checkpoint's size free; into a new directory, one for the first save and, when the
  // run saves again, a second while the first still stands. Said now, not after the training before
  // the save that would not fit.
  int64_t tensor_values = 0;
  for (const auto& t : optimizer_->tensor_states()) tensor_values += t.shape[0];
  const int64_t one = checkpoint::checkpoint_tensor_bytes(model_config_, int(optimizer_->element_states().size()),
                                                          tensor_values * layout_.pp, two_versions);
  const bool saves_again = config_.save_every_auto || (config_.save_every > 0 && config_.steps - start_step > config_.save_every);
  const int copies = held || !saves_again ? 1 : 2;
  constexpr int64_t kFilesPerCopy = 10;  // a checkpoint's files, its directory and their temporaries
  remove_dead_saves_beside(directory_path(config_.save));  // the first save would: their space is free
  const FreeSpace free = free_space_at(config_.save);
  const std::string why = copies == 2 ? " (the second save is written beside the first)"
                                      : " (a save is written beside the one it replaces)";
  require(free.bytes < 0 || free.bytes >= copies * one,
          "--save " + config_.save + ": its file system has " + human_bytes(double(free.bytes)) +
              " free, and this run needs " + human_bytes(double(copies * one)) + why + ": free space or save elsewhere");
  require(free.files < 0 || free.files >= copies * kFilesPerCopy,
          "--save " + config_.save + ": its file system has room for " + std::to_string(free.files) +
              " more files, and this run's saves need " + std::to_string(copies * kFilesPerCopy) +
              ": free some or save elsewhere");
}

std::string Trainer::saved_note() const {
  if (config_.save.empty()) return "";
  if (saved_step_ < 0) return "; no checkpoint was written to " + config_.save;
  return "; the checkpoint in " + config_.save + " holds step " + std::to_string(saved_step_);
}

}  // namespace lattice
