#include "cli/model_source.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "cli/model_flags.hpp"
#include "analysis/formulas.hpp"
#include "analysis/memory_categories.hpp"
#include "core/error.hpp"
#include "core/memory_limit.hpp"
#include "core/input_file.hpp"
#include "core/pinned_path.hpp"
#include "data/tokenizer_files.hpp"
#include "tensor/half.hpp"

namespace lattice::cli {


namespace {
// The weights as a run with `dtype` weights computes with them: rounded to 16 bits and widened back.
void round_to_params_dtype(float* weights, int64_t n, ParamsDType dtype) {
  if (dtype == ParamsDType::fp32) return;
  const HalfFormat format{dtype == ParamsDType::fp16};
  constexpr int64_t kChunk = int64_t(1) << 20;
  std::vector<uint16_t> half(size_t(std::min(n, kChunk)));
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t count = std::min(kChunk, n - at);
    format.narrow(weights + at, half.data(), count);
    format.widen(half.data(), weights + at, count);
  }
}
}  // namespace

data::Tokenizer checkpoint_tokenizer(const std::string& checkpoint, int vocab) {
  std::error_code ec;
  if (!std::filesystem::is_directory(pinned_path(checkpoint), ec)) return data::unrecorded_tokenizer(vocab);
  // A run of more ids on recorded byte tokens (a padded head) keeps "bytes": sample draws its 256.
  // One on token files without a tokenizer before 2026-11-30 recorded "bytes" too; it reads so still.
  return data::load_recorded_tokenizer(checkpoint, checkpoint::read_tokenizer_fingerprint(checkpoint),
                                       "checkpoint " + checkpoint);
}

namespace {
std::unique_ptr<GPT> load_once(const std::string& checkpoint, const CLI::App& app, ModelConfig config,
                               DType activation_dtype, int64_t rows) {
  std::error_code ec;  // through the pin (core/pinned_path.hpp); a path that cannot be looked up is named below
  require(std::filesystem::exists(pinned_path(checkpoint), ec) || ec, "checkpoint " + checkpoint + why_absent(checkpoint));
  ParamsDType params_dtype = ParamsDType::fp32;
  if (std::filesystem::is_directory(pinned_path(checkpoint), ec)) {
    // The checkpoint gives the model: a model flag given too must say the same, or it would be ignored.
    const ModelConfig saved = checkpoint::read_model_config(checkpoint);
    const auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    for (const ModelFlag& f : model_flag_table()) {
      const char* spelled = model_flag_spelling(app, f);  // as the user typed it
      if (!spelled) continue;
      const nlohmann::json mine = f.value(config), theirs = f.value(saved);
      const bool main_given = spelled == f.flag;  // the alias is a flag: no value to show
      require(mine == theirs, "--" + std::string(spelled) + (main_given ? " " + text(mine) : std::string()) +
                                  " disagrees with checkpoint " + checkpoint +
                                  ", which holds " + f.flag + " " + text(theirs) +
                                  (saved.moe.enabled() ? "" : " (a dense model)") +
                                  ": leave the model flags out, the checkpoint gives them");
    }
    config = saved;
    params_dtype = checkpoint::read_params_dtype(checkpoint);
  }
  config.dropout = 0.0;
  config.validate();
  config.require_token_vocab();
  LayoutConfig layout;
  layout.activation_dtype = activation_dtype;
  // As train's check (train/validate.cpp): the weights, the layer workspace, one layer's kept tensors
  // (an inference forward releases each layer's as it goes) and the head's. A lower bound in double
  // first, so an absurd shape is refused before the exact sizes could overflow.
  const double s = config.seq_len, b = double(rows), h = config.hidden, a = config.heads, v = config.padded_vocab();
  const double weights = 4.0 * double(config.num_params());
  const char* what = "the model and one micro-batch (weights, workspace, one layer's activations, logits)";
  require_fits_memory(weights + analysis::forward_workspace_bytes(s, b, h, a, v), what, "lower --micro-batch");
  // Past the check above, the exact sizes are far below int64's range.
  const analysis::ActivationShape shape{config.seq_len, rows, config.hidden, config.heads, config.padded_vocab(), 1,
                                        false, bytes_of(activation_dtype), false, layout.fused_attention(),
                                        layout.pack_masks, layout.fp8_kept};
  const double forward = double(analysis::layer_workspace(rows, config.seq_len, config.hidden, config.heads,
                                                          config.padded_vocab(), !layout.fused_attention(),
                                                          layout.pack_masks).bytes()) +
                         analysis::kept_activation_bound(shape, 1, false, false, true);
  require_fits_memory(weights + forward, what, "lower --micro-batch");
  auto model = std::make_unique<GPT>(config, layout, 0);
  checkpoint::load_weights(checkpoint, *model);
  // The run computed with its 16-bit weights (its own evaluation too), not with the fp32 masters the
  // checkpoint stores: round them as it did, so eval reproduces the run's final eval loss exactly.
  round_to_params_dtype(model->params(), model->num_params(), params_dtype);
  model->refresh_compute_weights();
  return model;
}
}  // namespace

std::unique_ptr<GPT> load_model_for_inference(const std::string& checkpoint, const CLI::App& app, ModelConfig config,
                                              DType activation_dtype, int64_t rows) {
  require(!checkpoint.empty(), "--checkpoint is required");
  // A run saving into the checkpoint may replace it while it is read (every step, with --save-every 1):
  // it is pinned (core/pinned_path.hpp), so the read is of one version; one that cannot be pinned is
  // read again, whole, until one version was read throughout, a few times at most.
  constexpr int kAttempts = checkpoint::kCheckpointReadAttempts;
  for (int attempt = 1;; ++attempt) {
    const PinnedPath pinned(checkpoint);
    const auto identity = checkpoint::directory_identity(checkpoint);
    try {
      auto model = load_once(checkpoint, app, config, activation_dtype, rows);
      if (attempt == kAttempts || checkpoint::directory_identity(checkpoint) == identity) return model;
    } catch (const checkpoint::CheckpointReplaced&) {
      if (attempt == kAttempts) throw;
    }
  }
}

}  // namespace lattice::cli
