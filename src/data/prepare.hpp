#pragma once
// `lattice prepare`: a text corpus becomes train.bin (first 90%) and val.bin (last 10%).
#include <cstddef>
#include <string>

namespace lattice::data {

struct PrepareStats {
  size_t train_tokens, val_tokens;
};

// Byte-tokenizes the text and writes out_dir/train.bin and out_dir/val.bin (creating out_dir).
// Throws InputError for a missing or empty input, or one too small to leave 2 tokens in val.bin;
// on error no output file is left behind.
PrepareStats prepare_corpus(const std::string& input_text_path, const std::string& out_dir);

}  // namespace lattice::data
