#pragma once
// Loading a model for inference: its configuration comes from the checkpoint's trainer.json when
// the path is a checkpoint directory, from the shape flags otherwise.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizer.hpp"
#include "model/gpt.hpp"

namespace lattice::cli {
// Whether the model flags (add_model_flags) give a shape; --dropout is refused: inference runs
// without it.
bool inference_shape_flags(const CLI::App& app);
// `rows`: sequences per forward, for the check that the model and its workspaces fit in memory.
// The tokenizer a checkpoint was trained with: its directory's records; a bare weights file (or a
// directory recording none) holds byte tokens.
data::Tokenizer checkpoint_tokenizer(const std::string& checkpoint);
std::unique_ptr<GPT> load_model_for_inference(const std::string& checkpoint, ModelConfig flags_config,
                                              bool shape_flags_given, DType activation_dtype, int64_t rows);
}  // namespace lattice::cli
