#pragma once
// `lattice prepare`: a text corpus becomes train.bin (first 90% of its tokens) and val.bin (the last
// 10%), with the tokenizer that made them (tokenizer.json, and tokenizer.model for SentencePiece) and
// each file's tokens and text bytes (data.json).
#include <cstddef>
#include <string>

#include "data/tokenizer.hpp"

namespace lattice::data {

struct PrepareStats {
  size_t train_tokens, val_tokens;
  size_t bytes;  // of text
  int vocab;
};

// Tokenizes the text (bytes, or a SentencePiece model of `kind` with `vocab` pieces trained on it)
// and writes the files into out_dir (creating it). Throws InputError for a missing or empty input,
// one too small to leave 2 tokens in val.bin, or a tokenizer that cannot be trained or does not
// reproduce the text; on error no output file is replaced.
PrepareStats prepare_corpus(const std::string& input_text_path, const std::string& out_dir,
                            TokenizerKind kind = TokenizerKind::bytes, int vocab = Tokenizer::kByteVocab);
// The same with a given tokenizer (another directory's: fine-tuning keeps a checkpoint's tokens).
PrepareStats prepare_corpus(const std::string& input_text_path, const std::string& out_dir,
                            const Tokenizer& tokenizer);

}  // namespace lattice::data
