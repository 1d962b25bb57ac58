#include "train/trainer.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "analysis/formulas.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "train/report.hpp"

namespace lattice {

namespace {

nlohmann::json model_json(const ModelConfig& c) {
  return {{"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
          {"seq_len", c.seq_len}, {"vocab", c.vocab}, {"dropout", c.dropout}};
}

void validate(const ModelConfig& m, const LayoutConfig& layout, const TrainConfig& t) {
  m.validate();
  require(t.micro_batch >= 1, "--micro-batch must be at least 1");
  require(t.global_batch % t.micro_batch == 0, "--global-batch (" + std::to_string(t.global_batch) +
                                                   ") must be a multiple of --micro-batch (" +
                                                   std::to_string(t.micro_batch) + ")");
  require(t.steps >= 0, "--steps must be >= 0");
  require(t.lr >= 0 && std::isfinite(t.lr), "--lr must be a finite non-negative number");
  require(t.lr_schedule == "constant" || t.lr_schedule == "cosine",
          "--lr-schedule must be constant or cosine (got '" + t.lr_schedule + "')");
  require(t.warmup >= 0, "--warmup must be >= 0");
  require(t.adamw.beta1 >= 0 && t.adamw.beta1 < 1, "--beta1 must be in [0, 1)");
  require(t.adamw.beta2 >= 0 && t.adamw.beta2 < 1, "--beta2 must be in [0, 1)");
  require(t.adamw.eps > 0, "--eps must be positive");
  require(t.adamw.weight_decay >= 0, "--weight-decay must be >= 0");
  require(t.clip_grad >= 0, "--clip-grad must be >= 0 (0 = off)");
  require(t.save_every >= 0, "--save-every must be >= 0");
  require(t.save_every == 0 || !t.save.empty(), "--save-every needs --save DIR");
  require(layout.recompute_layers < 0 || layout.recompute == Recompute::full,
          "--recompute-layers applies to --recompute full only");
  require(layout.recompute_layers <= m.layers, "--recompute-layers (" + std::to_string(layout.recompute_layers) +
                                                   ") is more than --layers (" + std::to_string(m.layers) + ")");
  require(layout.tp == 1 && layout.pp == 1 && layout.dp == 1,
          "this build runs one process: tensor/pipeline/data-parallel sizes other than 1 are not available yet");
  require(!layout.sequence_parallel, "--sequence-parallel needs tensor parallelism (not available in one process)");
  require(layout.zero == 0, "--zero needs data parallelism (not available in one process)");
}

double default_peak(DType dt) { return dt == DType::bf16 ? 700e9 : 300e9; }

}  // namespace

Trainer::Trainer(const ModelConfig& model, const LayoutConfig& layout, const TrainConfig& train)
    : model_config_(model), layout_(layout), config_(train) {
  if (config_.global_batch == 0) config_.global_batch = config_.micro_batch;
  validate(model_config_, layout_, config_);
  if (config_.threads > 0) omp_set_num_threads(config_.threads);

  const std::string train_path = config_.data_dir + "/train.bin", val_path = config_.data_dir + "/val.bin";
  require(!config_.data_dir.empty(), "--data DIR is required (make one with: lattice prepare --input TEXT --out DIR)");
  require(std::filesystem::exists(train_path), "no " + train_path + " (make it with: lattice prepare --input TEXT --out " +
                                                   config_.data_dir + ")");
  const auto train_file = data::TokenFile::load(train_path, model_config_.vocab);
  train_loader_ = std::make_unique<data::BatchLoader>(train_file, model_config_.seq_len, config_.global_batch,
                                                      config_.seed, config_.shuffle);
  if (std::filesystem::exists(val_path)) {
    const auto val_file = data::TokenFile::load(val_path, model_config_.vocab);
    if (val_file.size() > size_t(model_config_.seq_len))
      val_loader_ = std::make_unique<data::BatchLoader>(val_file, model_config_.seq_len, config_.micro_batch,
                                                        config_.seed, false);
  }

  nlohmann::json resume_state;
  if (!config_.resume.empty()) {
    resume_state = checkpoint::read_trainer_state(config_.resume);
    const ModelConfig saved = checkpoint::read_model_config(config_.resume);
    require(model_json(saved) == model_json(model_config_),
            "checkpoint " + config_.resume + " holds model " + model_json(saved).dump() +
                " but the flags ask for " + model_json(model_config_).dump());
    if (resume_state.contains("seed")) config_.seed = resume_state["seed"].get<uint64_t>();
  }
  model_ = std::make_unique<GPT>(model_config_, layout_, config_.seed);
  optimizer_ = std::make_unique<AdamW>(model_->table(), config_.adamw);
  if (!config_.resume.empty()) {
    checkpoint::load_weights(config_.resume, *model_);
    checkpoint::load_optimizer(config_.resume, *model_, *optimizer_);
    step_ = resume_state.value("step", int64_t(0));
    train_loader_ = std::make_unique<data::BatchLoader>(train_file, model_config_.seq_len, config_.global_batch,
                                                        config_.seed, config_.shuffle);
  } else if (!config_.init.empty()) {
    checkpoint::load_weights(config_.init, *model_);
  }
  schedule_ = LrSchedule{config_.lr_schedule, config_.lr, config_.min_lr, config_.warmup, config_.steps};
}

Trainer::~Trainer() = default;

StepResult Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t s = model_config_.seq_len, b = config_.micro_batch, B = config_.global_batch;
  const float loss_scale = 1.0f / float(B * s);
  std::vector<int32_t> inputs(size_t(b * s)), targets(size_t(b * s));
  model_->zero_grads();
  MemoryTracker::activations().reset_peak();
  double loss_sum = 0.0;
  for (int64_t first = 0; first < B; first += b) {
    train_loader_->fill(step_, first, int(b), inputs.data(), targets.data());
    loss_sum += model_->forward_backward({inputs.data(), targets.data(), b, first}, uint64_t(step_), loss_scale);
  }
  activation_peak_ = MemoryTracker::activations().peak_bytes();
  StepResult r;
  r.step = ++step_;
  r.loss = loss_sum / double(B * s);
  if (!std::isfinite(r.loss))
    throw TrainingError("loss is " + std::string(std::isnan(r.loss) ? "NaN" : "infinite") + " at step " +
                        std::to_string(r.step) + ": training stopped (lower --lr or check the data)");
  r.grad_norm = grad_norm(model_->grads(), model_->num_params());
  if (config_.clip_grad > 0 && r.grad_norm > config_.clip_grad)
    scale_grads(model_->grads(), model_->num_params(), float(config_.clip_grad / r.grad_norm));
  r.lr = schedule_.at(r.step);
  optimizer_->update(model_->params(), model_->grads(), r.lr, r.step);
  model_->refresh_compute_weights();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

double Trainer::evaluate(int64_t batches) {
  const data::BatchLoader& loader = val_loader_ ? *val_loader_ : *train_loader_;
  const int64_t s = model_config_.seq_len, b = config_.micro_batch;
  std::vector<int32_t> inputs(size_t(b * s)), targets(size_t(b * s));
  double sum = 0.0;
  for (int64_t k = 0; k < batches; ++k) {
    loader.fill(k, 0, int(b), inputs.data(), targets.data());
    sum += model_->forward_loss({inputs.data(), targets.data(), b, 0});
  }
  return sum / double(batches * b * s);
}

void Trainer::save(const std::string& dir) const {
  nlohmann::json state = {{"step", step_},
                          {"seed", config_.seed},
                          {"model", model_json(model_config_)},
                          {"data_position", {{"step", step_}, {"shuffle", config_.shuffle}}},
                          {"generator", {{"kind", "philox4x32-10"}, {"seed", config_.seed}, {"step", step_}}},
                          {"train", {{"micro_batch", config_.micro_batch}, {"global_batch", config_.global_batch},
                                     {"lr", config_.lr}, {"lr_schedule", config_.lr_schedule}}}};
  checkpoint::save_checkpoint(dir, *model_, optimizer_.get(), state);
}

int Trainer::run() {
  const double peak = config_.peak_flops > 0 ? config_.peak_flops : default_peak(layout_.activation_dtype);
  const analysis::FlopsShape flops_shape{double(config_.global_batch), double(model_config_.seq_len),
                                         double(model_config_.layers), double(model_config_.hidden),
                                         double(model_config_.padded_vocab())};
  const double step_flops = analysis::model_flops(flops_shape);
  const int64_t tokens = int64_t(config_.global_batch) * model_config_.seq_len;
  if (!config_.json)
    std::fprintf(stderr, "lattice: %lld parameters, %d layers, hidden %d, %d heads, seq %d, batch %d x %d, "
                 "recompute %s, activations %s, %d threads\n",
                 (long long)model_->num_params(), model_config_.layers, model_config_.hidden, model_config_.heads,
                 model_config_.seq_len, config_.micro_batch, config_.accumulation_steps(),
                 to_string(layout_.recompute), to_string(layout_.activation_dtype), omp_get_max_threads());
  double first_loss = NAN, last_loss = NAN, total_s = 0;
  int64_t timed_steps = 0;
  while (step_ < config_.steps) {
    const StepResult r = train_step();
    if (std::isnan(first_loss)) first_loss = r.loss;
    last_loss = r.loss;
    if (r.step > 1 || config_.steps == 1) total_s += r.seconds, ++timed_steps;  // step 1 warms caches
    print_step({r.step, config_.steps, r.loss, r.lr, r.grad_norm, r.seconds, double(tokens) / r.seconds,
                step_flops / r.seconds / peak, activation_peak_},
               config_.json);
    if (config_.save_every > 0 && r.step % config_.save_every == 0 && r.step < config_.steps) save(config_.save);
    if (config_.eval_every > 0 && r.step % config_.eval_every == 0 && !config_.json)
      std::fprintf(stderr, "  eval loss %.4f\n", evaluate(config_.eval_batches));
  }
  if (!config_.save.empty()) save(config_.save);

  // Summary: the memory the tracking allocator measured, the formula beside it.
  MemoryReport mem;
  mem.activation_bytes_per_layer = model_->kept_bytes_per_layer();
  analysis::ActivationShape shape{model_config_.seq_len, config_.micro_batch, model_config_.hidden,
                                  model_config_.heads, model_config_.padded_vocab(), 1, false,
                                  bytes_of(layout_.activation_dtype), model_config_.dropout > 0};
  for (int l = 0; l < model_config_.layers; ++l)
    mem.activation_bytes_per_layer_formula.push_back(analysis::layer_activation_bytes(
        shape, analysis::layer_fully_recomputed(layout_, l, model_config_.layers),
        layout_.recompute == Recompute::selective));
  mem.activation_bytes_outside_layers = model_->kept_bytes_outside_layers();
  mem.activation_bytes_outside_formula = analysis::extra_activation_bytes(shape, 1, 1);
  mem.activation_bytes_by_op = model_->kept_bytes_by_op();
  mem.activation_peak_bytes = activation_peak_;
  const auto& ms = MemoryTracker::model_states();
  mem.params = ms.live_bytes_of_op("params"), mem.grads = ms.live_bytes_of_op("grads");
  mem.optimizer = ms.live_bytes_of_op("optimizer"), mem.compute_weights = ms.live_bytes_of_op("bf16_weights");

  const double tokens_per_s = timed_steps ? double(tokens) * double(timed_steps) / total_s : 0.0;
  const double mfu = timed_steps ? step_flops * double(timed_steps) / total_s / peak : 0.0;
  if (config_.json) {
    nlohmann::json summary = {{"event", "summary"},
                              {"steps", step_},
                              {"first_loss", first_loss},
                              {"final_loss", last_loss},
                              {"tokens_per_s", tokens_per_s},
                              {"mfu", mfu},
                              {"parameters", model_->num_params()},
                              {"memory", {{"ranks", {memory_json(mem)}}}}};
    std::cout << summary.dump() << "\n" << std::flush;
  } else {
    std::fprintf(stderr, "done: %lld steps, loss %.4f -> %.4f, %.0f tokens/s, MFU %.1f%%\n", (long long)step_,
                 first_loss, last_loss, tokens_per_s, mfu * 100);
    print_memory_table(mem);
  }
  return 0;
}

}  // namespace lattice
