#include "cli/model_source.hpp"

#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "core/memory_limit.hpp"

namespace lattice::cli {

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
  const double s = config.seq_len, h = config.hidden, b = double(rows);
  const double workspace = 4.0 * (s * b * (12 * h + 2 * config.padded_vocab()) + 3 * config.heads * s * s * b);
  require_fits_memory(4.0 * double(config.num_params()) + workspace, "the model and one micro-batch",
                      "lower --micro-batch");
  LayoutConfig layout;
  layout.activation_dtype = activation_dtype;
  auto model = std::make_unique<GPT>(config, layout, 0);
  checkpoint::load_weights(checkpoint, *model);
  return model;
}

}  // namespace lattice::cli
