#pragma once
// Import of llm.c's gpt2_124M.bin (version 3: fp32 weights, padded vocabulary) into a GPT.
#include <string>

#include "model/gpt.hpp"

namespace lattice::checkpoint {
void import_llmc_weights(const std::string& path, GPT& model);
}  // namespace lattice::checkpoint
