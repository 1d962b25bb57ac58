#include "cli/model_source.hpp"

#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "analysis/formulas.hpp"
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
  const double workspace = analysis::forward_workspace_bytes(config.seq_len, double(rows), config.hidden,
                                                            config.heads, config.padded_vocab());
  require_fits_memory(4.0 * double(config.num_params()) + workspace, "the model and one micro-batch",
                      "lower --micro-batch");
  LayoutConfig layout;
  layout.activation_dtype = activation_dtype;
  auto model = std::make_unique<GPT>(config, layout, 0);
  checkpoint::load_weights(checkpoint, *model);
  return model;
}

}  // namespace lattice::cli
