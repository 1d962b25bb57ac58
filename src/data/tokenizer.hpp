#pragma once
// Tokenizers: bytes (every byte its own token, vocabulary 256, any text round-trips) and SentencePiece
// models (BPE or unigram, trained by `lattice prepare` with Debian's libsentencepiece on the corpus,
// with byte fallback and no normalisation, so they round-trip any text too). A data directory and a
// checkpoint carry the one they were made with (docs/design.md §15). `none`: token ids whose tokenizer
// lattice does not have (llm.c's token files of more than 256 ids), trained on and scored, never
// turned into text.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace lattice::data {

enum class TokenizerKind { bytes, bpe, unigram, none };
const char* to_string(TokenizerKind kind);
// "bytes" | "bpe" | "unigram" (what prepare makes); InputError otherwise.
TokenizerKind parse_tokenizer_kind(const std::string& name);

class Tokenizer {
 public:
  static constexpr int kByteVocab = 256;

  Tokenizer();  // bytes
  // Ids of a tokenizer lattice does not have, `vocab` of them: no text in or out (encode and decode
  // throw InputError saying so); its fingerprint is "none", which holds no other to its ids.
  static Tokenizer ids_only(int vocab);
  // Trains a SentencePiece model of `kind` (bpe or unigram) with at most `vocab` pieces on `text`
  // (fewer when the text holds fewer); InputError when the library refuses, naming its reason.
  static Tokenizer train(std::string_view text, TokenizerKind kind, int vocab);
  // A serialized SentencePiece model of `kind` (as model_bytes() gives it); InputError naming `source`
  // when it is not one.
  static Tokenizer from_model(const std::string& serialized, TokenizerKind kind, const std::string& source);

  TokenizerKind kind() const { return kind_; }
  int vocab() const { return vocab_; }
  const std::string& model_bytes() const { return model_; }  // empty for bytes
  // Identifies the tokenizer: "bytes", "none", or the kind and an FNV-1a hash of the model's bytes.
  std::string fingerprint() const;

  std::vector<uint16_t> encode(std::string_view text) const;
  // Throws InputError for an id outside [0, vocab()): a model with a padded vocabulary must never emit one.
  std::string decode(const std::vector<int>& ids) const;

 private:
  TokenizerKind kind_ = TokenizerKind::bytes;
  int vocab_ = kByteVocab;
  std::string model_;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace lattice::data
