#include "data/tokenizer.hpp"

#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "core/error.hpp"
#include "core/fnv1a.hpp"

namespace lattice::data {

namespace {

// Lines of a text, for the trainer (SentencePiece trains on sentences; a line is one here).
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : text_(text) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    if (pos_ > text_.size()) {
      done_ = true;
      return;
    }
    // A line longer than SentencePiece takes (its max_sentence_length, 4192 bytes) is handed over in
    // pieces of kLongest bytes, cut before a UTF-8 character's first byte: whole, it would be skipped
    // (a text of one long line trained on nothing, then failed an internal check).
    // The line's end is found once (not again for each piece of a long line), and a cut backs off at
    // most 3 bytes to a character's first byte (invalid UTF-8 is cut where it falls).
    if (line_end_ < pos_ || line_end_ == kUnknown) line_end_ = std::min(text_.find('\n', pos_), text_.size());
    size_t end = line_end_;
    if (end - pos_ > kLongest) {
      end = pos_ + kLongest;
      for (int back = 0; back < 3 && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80; ++back) --end;
      if ((static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) end = pos_ + kLongest;
    }
    line_.assign(text_.substr(pos_, end - pos_));
    if (end == line_end_) {
      pos_ = end + 1;
      line_end_ = kUnknown;
    } else {
      pos_ = end;
    }
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  static constexpr size_t kLongest = 4096, kUnknown = size_t(-1);
  size_t line_end_ = kUnknown;  // the current line's end, while it is handed over in pieces
  std::string_view text_;
  size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};

constexpr const char* kNewlinePiece = "<0x0A>";  // byte fallback's piece for '\n'

}  // namespace

const char* to_string(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::bytes: return "bytes";
    case TokenizerKind::bpe: return "bpe";
    case TokenizerKind::unigram: return "unigram";
    case TokenizerKind::none: return "none";
  }
  return "?";
}

TokenizerKind parse_tokenizer_kind(const std::string& name) {
  if (name == "bytes") return TokenizerKind::bytes;
  if (name == "bpe") return TokenizerKind::bpe;
  if (name == "unigram") return TokenizerKind::unigram;
  fail("unknown tokenizer '" + name + "' (choose bytes, bpe or unigram)");
}

Tokenizer::Tokenizer() = default;

Tokenizer Tokenizer::ids_only(int vocab) {
  Tokenizer t;
  t.kind_ = TokenizerKind::none;
  t.vocab_ = vocab;
  return t;
}

namespace {
const char* const kNoText =
    "the tokens' tokenizer is not known (token files without a tokenizer.json, as llm.c's): lattice cannot turn "
    "text into its ids or its ids into text";
}  // namespace

Tokenizer Tokenizer::train(std::string_view text, TokenizerKind kind, int vocab) {
  require(kind != TokenizerKind::bytes, "Tokenizer::train: the byte tokenizer is not trained");
  // Byte fallback and no normalisation: every text round-trips; spaces stay as written.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", to_string(kind)},
      {"vocab_size", std::to_string(vocab)},
      {"hard_vocab_limit", "false"},  // at most `vocab`: a small text may hold fewer pieces
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"unk_id", "0"},
      {"num_threads", "2"},
      {"minloglevel", "2"},
  };
  LineIterator lines(text);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok()) {
    // Its words made plain: what a too small vocabulary means here, and no source file and line.
    const std::string why = status.message();
    const std::string head = "SentencePiece could not train a " + std::string(to_string(kind)) + " tokenizer of " +
                             std::to_string(vocab) + " pieces on this text: ";
    if (const size_t at = why.find("required_chars"); at != std::string::npos) {
      // Every distinct character is a piece of its own beside <unk> and the 256 byte-fallback pieces;
      // SentencePiece's message counts them all ("300 vs 328").
      const size_t vs = why.find(" vs ", at);
      const long needed = vs == std::string::npos ? 0 : std::strtol(why.c_str() + vs + 4, nullptr, 10);
      fail(head + "each of its distinct characters is a piece, beside <unk> and the 256 byte pieces" +
           (needed > 0 ? " (" + std::to_string(needed) + " in all)" : std::string()) + ", and " +
           std::to_string(vocab) + " pieces leave no room for them; raise --vocab-size" +
           (needed > 0 ? " above " + std::to_string(needed) : std::string()) + ", or prepare it with --tokenizer bytes");
    }
    const size_t cc = why.find(".cc(");
    fail(head + (cc == std::string::npos ? why : "an internal check failed (" + why.substr(why.find(')', cc) + 1) + ")"));
  }
  return from_model(model, kind, "the trained model");
}

Tokenizer Tokenizer::from_model(const std::string& serialized, TokenizerKind kind, const std::string& source) {
  require(kind != TokenizerKind::bytes, source + ": the byte tokenizer has no model");
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    // SentencePiece's words made plain: its source file and line (a protobuf that does not parse)
    // said as what they mean, a damaged file's raw bytes escaped.
    std::string why = status.message();
    if (why.find(".cc(") != std::string::npos) why = "it does not parse (a damaged file, or another kind of file)";
    std::string plain;
    for (const unsigned char c : why) {
      if (c >= 0x20 && c < 0x7f) {
        plain += char(c);
      } else {
        char code[8];
        std::snprintf(code, sizeof code, "\\x%02X", unsigned(c));
        plain += code;
      }
    }
    fail(source + " is not a SentencePiece model: " + plain);
  }
  require(sp->GetPieceSize() > 0 && sp->GetPieceSize() <= 65536,
          source + " has " + std::to_string(sp->GetPieceSize()) + " pieces (token files hold at most 65536)");
  require(sp->PieceToId(kNewlinePiece) != sp->unk_id(), source + " has no byte fallback (no piece " + kNewlinePiece +
                                                           "): it cannot encode every text");
  Tokenizer t;
  t.kind_ = kind;
  t.vocab_ = sp->GetPieceSize();
  t.model_ = serialized;
  t.sp_ = std::move(sp);
  return t;
}

std::string Tokenizer::fingerprint() const {
  if (kind_ == TokenizerKind::bytes) return "bytes";
  if (kind_ == TokenizerKind::none) return "none";
  return std::string(to_string(kind_)) + "-" + std::to_string(vocab_) + "-" + hex16(fnv1a(model_));
}

std::vector<uint16_t> Tokenizer::encode(std::string_view text) const {
  require(kind_ != TokenizerKind::none, kNoText);
  std::vector<uint16_t> ids;
  if (!sp_) {
    ids.reserve(text.size());
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  // Line by line, '\n' as its byte piece: SentencePiece encodes sentences, not line breaks.
  const auto newline = uint16_t(sp_->PieceToId(kNewlinePiece));
  std::vector<int> piece_ids;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    if (end > pos) {
      const auto status = sp_->Encode(text.substr(pos, end - pos), &piece_ids);
      require(status.ok(), "SentencePiece could not encode the text: " + status.ToString());
      for (int id : piece_ids) ids.push_back(uint16_t(id));
    }
    if (end < text.size()) ids.push_back(newline);
    pos = end + 1;
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  require(kind_ != TokenizerKind::none, kNoText);
  for (size_t i = 0; i < ids.size(); ++i)
    require(ids[i] >= 0 && ids[i] < vocab_, "token " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                                " is outside the tokenizer's vocabulary (" + std::to_string(vocab_) +
                                                ")");
  if (!sp_) {
    std::string text;
    text.reserve(ids.size());
    for (int id : ids) text.push_back(static_cast<char>(id));
    return text;
  }
  std::string text;
  const auto status = sp_->Decode(ids, &text);
  require(status.ok(), "SentencePiece could not decode: " + status.ToString());
  return text;
}

}  // namespace lattice::data
