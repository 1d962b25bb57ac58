#pragma once
// The tokenizer a directory carries — a data directory made by `lattice prepare`, or a checkpoint —
// as tokenizer.json ({"kind", "vocab", "fingerprint"}) and, for SentencePiece, tokenizer.model. A
// directory without tokenizer.json holds byte tokens. data.json records each token file's tokens and
// the bytes of text they encode, for bits per byte (docs/design.md §15).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/atomic_dir.hpp"
#include "data/tokenizer.hpp"

namespace lattice::data {

inline constexpr const char* kTokenizerJson = "tokenizer.json";
inline constexpr const char* kTokenizerModel = "tokenizer.model";
inline constexpr const char* kDataJson = "data.json";

// The files that record `tokenizer` in a directory: {name, contents}.
struct NamedFile {
  std::string name, contents;
};
std::vector<NamedFile> tokenizer_files(const Tokenizer& tokenizer);
// The tokenizer of `dir` (bytes when it has no tokenizer.json); InputError naming the file and the
// defect (a model that is not one, or whose fingerprint or size is not the one recorded).
Tokenizer load_tokenizer(const std::string& dir);
// Whether `dir` records a tokenizer (tokenizer.json).
bool has_tokenizer(const std::string& dir);
// The tokenizer of token ids nothing records, read by a model of `vocab` ids: bytes when `vocab` is the
// byte one's, else ids of a tokenizer not known (llm.c's token files: read as bytes before 2026-11-30,
// so eval gave bits per byte of them and sample printed their ids as bytes).
Tokenizer unrecorded_tokenizer(int vocab);
// The tokenizer of the token files in `dir` read by a model of `vocab` ids: the one it records, else
// unrecorded_tokenizer(vocab).
Tokenizer tokens_tokenizer(const std::string& dir, int vocab);
// Whether token ids of `a` may be read as `b`'s: the same tokenizer, or either not known (not held).
bool same_tokens(const Tokenizer& a, const Tokenizer& b);
// load_tokenizer(dir) held to `recorded`, the fingerprint a checkpoint's trainer.json names ("": none
// recorded, load_tokenizer as it is). A tokenizer.json missing, or not a regular file, was read as the
// byte tokenizer: a BPE model's tokens then decoded as bytes. InputError naming `what` and the file.
Tokenizer load_recorded_tokenizer(const std::string& dir, const std::string& recorded, const std::string& what);

// Tokens and the bytes of text they encode, of one token file.
struct SplitSize {
  int64_t tokens = 0, bytes = 0;
};
struct DataSizes {
  SplitSize train, val;
  bool recorded = false;  // data.json present (else byte tokens: bytes = tokens)
};
DataSizes read_data_sizes(const std::string& dir);
std::string data_sizes_json(const DataSizes& sizes);
// A loss in nats per token as bits per byte of the text, over a file of `size`: loss·tokens/(bytes·ln 2);
// with nothing recorded, loss/ln 2 (byte tokens).
double bits_per_byte(double loss, const SplitSize& size);

}  // namespace lattice::data
