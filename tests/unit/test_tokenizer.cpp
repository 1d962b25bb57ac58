// SentencePiece tokenizers (docs/design.md §15): trained by libsentencepiece with byte fallback and no
// normalisation, they reproduce any text — line breaks, tabs, runs of spaces, characters never seen
// in training — and the files a directory records them in are checked against what they hold.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/prepare.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer.hpp"
#include "data/tokenizer_files.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace lattice::data;
using lattice::testing_util::expect_input_error;

namespace {

std::string corpus() {
  // Words enough for a few hundred pieces: numbers spelt out in several forms.
  const char* words[] = {"light", "darkness", "waters", "firmament", "heaven", "earth", "evening", "morning",
                         "seed", "fruit", "herb", "beast", "fowl", "creeping", "image", "dominion",
                         "cattle", "whales", "seasons", "stars", "greater", "lesser", "grass", "tree"};
  std::string text;
  for (int i = 0; i < 600; ++i)
    text += "And God said, Let the " + std::string(words[i % 24]) + " bring forth the " + words[(i * 7) % 24] +
            " after his kind, " + std::to_string(i * 37) + " times in the " + words[(i * 5) % 24] + "s.\n";
  return text;
}

const Tokenizer& trained(TokenizerKind kind) {
  static const Tokenizer bpe = Tokenizer::train(corpus(), TokenizerKind::bpe, 400);
  static const Tokenizer unigram = Tokenizer::train(corpus(), TokenizerKind::unigram, 400);
  return kind == TokenizerKind::bpe ? bpe : unigram;
}

std::string write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

TEST(SentencePiece, RoundTripsAnyTextAndCompresses) {
  const std::string odd = "  two spaces,\ta tab, \n\nempty lines, caf\xC3\xA9, \xE4\xB8\xAD, \x01\x7F and \xF0\x9F\x98\x80\n";
  for (TokenizerKind kind : {TokenizerKind::bpe, TokenizerKind::unigram}) {
    SCOPED_TRACE(to_string(kind));
    const Tokenizer& t = trained(kind);
    EXPECT_EQ(t.kind(), kind);
    EXPECT_LE(t.vocab(), 400);  // at most: unigram stops where its pieces stop paying
    EXPECT_GT(t.vocab(), 300);
    for (const std::string& text : {corpus(), odd, std::string("\n"), std::string("x")}) {
      const std::vector<uint16_t> ids = t.encode(text);
      for (uint16_t id : ids) ASSERT_LT(id, t.vocab());
      EXPECT_EQ(t.decode(std::vector<int>(ids.begin(), ids.end())), text);
    }
    // The text it was trained on takes fewer tokens than bytes.
    EXPECT_LT(double(t.encode(corpus()).size()), 0.75 * double(corpus().size()));
    expect_input_error([&] { t.decode({1, 400}); }, "token 400 at index 1");
  }
  EXPECT_NE(trained(TokenizerKind::bpe).fingerprint(), trained(TokenizerKind::unigram).fingerprint());
  EXPECT_EQ(trained(TokenizerKind::bpe).fingerprint().rfind("bpe-" + std::to_string(trained(TokenizerKind::bpe).vocab()) + "-", 0), 0u);
}

TEST(SentencePiece, RefusesWhatItCannotBe) {
  // A vocabulary larger than the text holds is a limit, not a demand: fewer pieces.
  const Tokenizer small = Tokenizer::train("in the beginning\n", TokenizerKind::bpe, 1000);
  EXPECT_GT(small.vocab(), 256);
  EXPECT_LT(small.vocab(), 1000);
  const std::vector<uint16_t> ids = small.encode("in the beginning");
  EXPECT_EQ(small.decode(std::vector<int>(ids.begin(), ids.end())), "in the beginning");
  expect_input_error([] { Tokenizer::from_model("not a model", TokenizerKind::bpe, "m.model"); },
                     "m.model is not a SentencePiece model");
  expect_input_error([] { parse_tokenizer_kind("wordpiece"); }, "unknown tokenizer 'wordpiece'");
}

// A directory records its tokenizer; a swapped or missing model file is named, not used.
TEST(TokenizerFiles, RoundTripAndDetectTampering) {
  const std::string dir = lattice::testing_util::scratch_dir("tokenizer_files");
  EXPECT_FALSE(has_tokenizer(dir));
  EXPECT_EQ(load_tokenizer(dir).fingerprint(), "bytes");  // no record: byte tokens
  for (const NamedFile& f : tokenizer_files(trained(TokenizerKind::bpe))) write(dir + "/" + f.name, f.contents);
  EXPECT_TRUE(has_tokenizer(dir));
  EXPECT_EQ(load_tokenizer(dir).fingerprint(), trained(TokenizerKind::bpe).fingerprint());
  write(dir + "/" + kTokenizerModel, trained(TokenizerKind::unigram).model_bytes());
  expect_input_error([&] { load_tokenizer(dir); }, "but the directory holds");
  fs::remove(dir + "/" + kTokenizerModel);
  expect_input_error([&] { load_tokenizer(dir); }, "is missing");
  write(dir + "/" + kTokenizerJson, "{\"kind\": \"bpe\"");
  expect_input_error([&] { load_tokenizer(dir); }, "is not valid JSON");
}

// Token files with no tokenizer beside them hold bytes at vocabulary 256 and ids of a tokenizer not
// known above it (llm.c's): no text in or out, recorded as such, and held to no other tokenizer.
TEST(TokenizerFiles, IdsWithoutATokenizer) {
  const std::string dir = lattice::testing_util::scratch_dir("tokenizer_ids");
  EXPECT_EQ(tokens_tokenizer(dir, 256).kind(), TokenizerKind::bytes);
  const Tokenizer ids = tokens_tokenizer(dir, 4096);
  EXPECT_EQ(ids.kind(), TokenizerKind::none);
  EXPECT_EQ(ids.vocab(), 4096);
  EXPECT_EQ(ids.fingerprint(), "none");
  expect_input_error([&] { ids.encode("hi"); }, "cannot turn text into its ids");
  expect_input_error([&] { ids.decode({1, 2}); }, "cannot turn text into its ids");
  // Recorded as "none", read back as the same; a bpe directory's tokenizer is its own.
  for (const NamedFile& f : tokenizer_files(ids)) write(dir + "/" + f.name, f.contents);
  EXPECT_FALSE(fs::exists(dir + "/" + kTokenizerModel));
  EXPECT_EQ(load_tokenizer(dir).kind(), TokenizerKind::none);
  EXPECT_EQ(load_tokenizer(dir).vocab(), 4096);
  EXPECT_EQ(tokens_tokenizer(dir, 4096).fingerprint(), "none");
  write(dir + "/" + kTokenizerJson, "{\"kind\": \"none\", \"vocab\": 100, \"fingerprint\": \"none\"}");
  expect_input_error([&] { load_tokenizer(dir); }, "must be between 257 and 65536");
  // Held to no other (unknown), while two known ones must agree.
  const Tokenizer bpe = trained(TokenizerKind::bpe), bytes;
  EXPECT_TRUE(same_tokens(ids, bpe));
  EXPECT_TRUE(same_tokens(bytes, ids));
  EXPECT_FALSE(same_tokens(bytes, bpe));
  EXPECT_TRUE(same_tokens(bpe, bpe));
  expect_input_error([] { parse_tokenizer_kind("none"); }, "choose bytes, bpe or unigram");  // prepare makes none
}

// prepare with a trained tokenizer: the token files decode to the text, split 90/10 by tokens, and
// data.json's byte counts add up to the text, so bits per byte are exact.
TEST(TokenizerFiles, PrepareRecordsTokensAndBytes) {
  const std::string dir = lattice::testing_util::scratch_dir("prepare_bpe");
  const std::string text = corpus();
  const std::string input = write(dir + "/corpus.txt", text);
  const PrepareStats stats = prepare_corpus(input, dir + "/out", TokenizerKind::bpe, 400);
  EXPECT_EQ(stats.vocab, trained(TokenizerKind::bpe).vocab());
  // Text that is not UTF-8 cannot be reproduced by SentencePiece: refused before any file is written.
  const std::string latin1 = write(dir + "/latin1.txt", text + "caf\xE9\n");
  expect_input_error([&] { prepare_corpus(latin1, dir + "/never", TokenizerKind::bpe, 400); }, "does not reproduce");
  EXPECT_FALSE(fs::exists(dir + "/never"));
  const Tokenizer t = load_tokenizer(dir + "/out");
  const TokenFile train = TokenFile::load(dir + "/out/train.bin", t.vocab());
  const TokenFile val = TokenFile::load(dir + "/out/val.bin", t.vocab());
  EXPECT_EQ(train.size(), stats.train_tokens);
  EXPECT_EQ(train.size(), (train.size() + val.size()) * 9 / 10);
  std::vector<int> all(train.tokens().begin(), train.tokens().end());
  all.insert(all.end(), val.tokens().begin(), val.tokens().end());
  EXPECT_EQ(t.decode(all), text);
  const DataSizes sizes = read_data_sizes(dir + "/out");
  ASSERT_TRUE(sizes.recorded);
  EXPECT_EQ(sizes.train.tokens, int64_t(train.size()));
  EXPECT_EQ(sizes.val.tokens, int64_t(val.size()));
  EXPECT_EQ(sizes.train.bytes + sizes.val.bytes, int64_t(text.size()));
  EXPECT_EQ(sizes.train.bytes,
            int64_t(t.decode(std::vector<int>(train.tokens().begin(), train.tokens().end())).size()));
  // A loss of ln 2 nats a token over a file of 2 bytes a token is half a bit a byte.
  EXPECT_DOUBLE_EQ(bits_per_byte(std::log(2.0), {100, 200}), 0.5);
  EXPECT_DOUBLE_EQ(bits_per_byte(std::log(2.0), {}), 1.0);
  // Prepared again with bytes, the directory forgets the model.
  prepare_corpus(input, dir + "/out");
  EXPECT_EQ(load_tokenizer(dir + "/out").fingerprint(), "bytes");
  EXPECT_FALSE(fs::exists(dir + "/out/" + std::string(kTokenizerModel)));
}
