#include "cli/model_source.hpp"

#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "analysis/formulas.hpp"
#include "analysis/memory_categories.hpp"
#include "core/error.hpp"
#include "core/memory_limit.hpp"
#include "data/tokenizer_files.hpp"

namespace lattice::cli {

bool inference_shape_flags(const CLI::App& app) {
  require(app.count("--dropout") == 0, "--dropout does not apply here: inference runs without dropout");
  return app.count("--layers") || app.count("--hidden") || app.count("--heads") || app.count("--seq-len") ||
         app.count("--vocab");
}

data::Tokenizer checkpoint_tokenizer(const std::string& checkpoint) {
  return std::filesystem::is_directory(checkpoint) ? data::load_tokenizer(checkpoint) : data::Tokenizer();
}

std::unique_ptr<GPT> load_model_for_inference(const std::string& checkpoint, ModelConfig config,
                                              bool shape_flags_given, DType activation_dtype, int64_t rows) {
  require(!checkpoint.empty(), "--checkpoint is required");
  require(std::filesystem::exists(checkpoint), "checkpoint " + checkpoint + " does not exist");
  if (std::filesystem::is_directory(checkpoint)) {
    const ModelConfig saved = checkpoint::read_model_config(checkpoint);
    if (shape_flags_given)
      require(saved.layers == config.layers && saved.hidden == config.hidden && saved.heads == config.heads &&
                  saved.vocab == config.vocab && saved.seq_len == config.seq_len,
              "the shape flags disagree with checkpoint " + checkpoint + "/trainer.json");
    config = saved;
  }
  config.dropout = 0.0;
  config.validate();
  LayoutConfig layout;
  layout.activation_dtype = activation_dtype;
  // As train's check (train/validate.cpp): the weights, the layer workspace, one layer's kept tensors
  // (an inference forward releases each layer's as it goes) and the head's. A lower bound in double
  // first, so an absurd shape is refused before the exact sizes could overflow.
  const double s = config.seq_len, b = double(rows), h = config.hidden, a = config.heads, v = config.padded_vocab();
  const double weights = 4.0 * double(config.num_params());
  const char* what = "the model and one micro-batch (weights, workspace, one layer's activations, logits)";
  require_fits_memory(weights + analysis::forward_workspace_bytes(s, b, h, a, v), what, "lower --micro-batch");
  if (s * b * (4 * h + v) < 0x1p50 && a * s * s * b < 0x1p50) {
    const analysis::ActivationShape shape{config.seq_len, rows, config.hidden, config.heads, config.padded_vocab(), 1,
                                          false, bytes_of(activation_dtype), false, layout.fused_attention(),
                                          layout.pack_masks, layout.fp8_kept};
    const double forward = double(analysis::layer_workspace(rows, config.seq_len, config.hidden, config.heads,
                                                            config.padded_vocab(), !layout.fused_attention(),
                                                            layout.pack_masks).bytes()) +
                           double(analysis::layer_activation_bytes(shape, false, false)) +
                           double(analysis::extra_activation_bytes(shape, 1, 1));
    require_fits_memory(weights + forward, what, "lower --micro-batch");
  }
  auto model = std::make_unique<GPT>(config, layout, 0);
  checkpoint::load_weights(checkpoint, *model);
  return model;
}

}  // namespace lattice::cli
