#pragma once
// Loading a model for inference: its configuration comes from the checkpoint's trainer.json when
// the path is a checkpoint directory, from the shape flags otherwise.
#include <memory>
#include <string>

#include "model/gpt.hpp"

namespace lattice::cli {
std::unique_ptr<GPT> load_model_for_inference(const std::string& checkpoint, ModelConfig flags_config,
                                              bool shape_flags_given, DType activation_dtype);
}  // namespace lattice::cli
