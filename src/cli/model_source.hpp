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
// The tokenizer a checkpoint of a model of `vocab` ids was trained with: its directory's records (a
// directory recording none: bytes); a bare weights file records none (data::unrecorded_tokenizer).
data::Tokenizer checkpoint_tokenizer(const std::string& checkpoint, int vocab);
// A checkpoint directory gives the model (a model flag of `app` given too must agree with it, or is
// refused naming both values) and its weights' precision (16-bit runs: the weights rounded as the
// run computed with them); a weights file takes the flags' `flags_config`. `rows`: sequences per
// forward, for the check that the model and its workspaces fit in memory.
std::unique_ptr<GPT> load_model_for_inference(const std::string& checkpoint, const CLI::App& app,
                                              ModelConfig flags_config, DType activation_dtype, int64_t rows);
}  // namespace lattice::cli
