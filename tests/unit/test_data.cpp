// Data pipeline: byte tokenizer, llm.c token files, corpus preparation, the stateless batch loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "test_util.hpp"
#include "data/loader.hpp"
#include "data/prepare.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace lattice::data;

namespace {

// A fresh, empty directory per test.
std::string scratch_dir() { return lattice::testing_util::scratch_dir("data"); }
using lattice::testing_util::expect_input_error;

void write_raw(const std::string& path, const std::vector<int32_t>& header,
               const std::vector<uint16_t>& tokens) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size() * 4));
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

std::vector<int32_t> header_for(size_t count, int32_t magic = 20240520, int32_t version = 1) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic;
  h[1] = version;
  h[2] = static_cast<int32_t>(count);
  return h;
}

// A token file whose token i is i (n <= 256), so a token's value tells its position.
TokenFile ramp_file(const std::string& dir, size_t n) {
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i);
  const std::string path = dir + "/ramp.bin";
  write_token_file(path, tokens);
  return TokenFile::load(path, 256);
}

}  // namespace

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string text;
  for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  const Tokenizer tok;
  EXPECT_EQ(tok.vocab(), 256);
  EXPECT_EQ(tok.fingerprint(), "bytes");
  const std::vector<uint16_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(tok.decode(std::vector<int>(ids.begin(), ids.end())), text);
  EXPECT_EQ(tok.encode("A\n")[0], 65);
}

TEST(ByteTokenizer, DecodeRejectsNonBytes) {
  const Tokenizer tok;
  expect_input_error([&] { tok.decode({65, 256}); }, "token 256 at index 1");
  expect_input_error([&] { tok.decode({-1}); }, "token -1 at index 0");
}

TEST(TokenFile, WritesLlmcFormatAndRoundTrips) {
  const std::string dir = scratch_dir();
  const std::vector<uint16_t> tokens = {0, 1, 255, 7, 42};
  const std::string path = dir + "/t.bin";
  write_token_file(path, tokens);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ASSERT_EQ(fs::file_size(path), 1024u + 2 * tokens.size());

  std::ifstream in(path, std::ios::binary);
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);

  const TokenFile file = TokenFile::load(path, 256);
  EXPECT_EQ(file.size(), 5u);
  EXPECT_TRUE(std::ranges::equal(file.tokens(), tokens));
  EXPECT_EQ(file.path(), path);
}

TEST(TokenFile, RejectsBadFiles) {
  const std::string dir = scratch_dir();
  expect_input_error([&] { TokenFile::load(dir + "/missing.bin", 256); },
                     dir + "/missing.bin does not exist");

  const std::string short_path = dir + "/short.bin";
  write_raw(short_path, std::vector<int32_t>(10, 0), {});
  expect_input_error([&] { TokenFile::load(short_path, 256); }, "is too short: 40 bytes");

  const std::string magic_path = dir + "/magic.bin";
  write_raw(magic_path, header_for(2, 12345), {1, 2});
  expect_input_error([&] { TokenFile::load(magic_path, 256); }, "bad magic 12345");

  const std::string version_path = dir + "/version.bin";
  write_raw(version_path, header_for(2, 20240520, 2), {1, 2});
  expect_input_error([&] { TokenFile::load(version_path, 256); }, "has version 2");

  const std::string size_path = dir + "/size.bin";
  write_raw(size_path, header_for(10), {1, 2, 3});
  expect_input_error([&] { TokenFile::load(size_path, 256); },
                     "header says 10 tokens (1044 bytes), file has 1030 bytes");
}

TEST(TokenFile, RejectsTokenAtOrAboveVocab) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/big.bin";
  std::vector<uint16_t> tokens(20, 3);
  tokens[17] = 300;
  write_token_file(path, tokens);
  expect_input_error([&] { TokenFile::load(path, 256); }, "token 300 at index 17 >= vocab 256");
  EXPECT_EQ(TokenFile::load(path, 301).size(), 20u);  // fine for a larger vocab
  tokens[17] = 256;
  write_token_file(path, tokens);
  expect_input_error([&] { TokenFile::load(path, 256); }, "token 256 at index 17 >= vocab 256");
}

TEST(DataPrepare, SplitsNinetyTen) {
  const std::string dir = scratch_dir();
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  text[999] = '\xff';  // a high byte must survive as token 255
  std::ofstream(dir + "/in.txt", std::ios::binary) << text;

  const PrepareStats stats = prepare_corpus(dir + "/in.txt", dir + "/out/nested");
  EXPECT_EQ(stats.train_tokens, 900u);
  EXPECT_EQ(stats.val_tokens, 100u);
  const TokenFile train = TokenFile::load(dir + "/out/nested/train.bin", 256);
  const TokenFile val = TokenFile::load(dir + "/out/nested/val.bin", 256);
  ASSERT_EQ(train.size(), 900u);
  ASSERT_EQ(val.size(), 100u);
  EXPECT_EQ(train.tokens()[0], 'a');
  EXPECT_EQ(train.tokens()[899], 'a' + 899 % 26);
  EXPECT_EQ(val.tokens()[0], 'a' + 900 % 26);
  EXPECT_EQ(val.tokens()[99], 255);
}

TEST(DataPrepare, RejectsBadCorpora) {
  const std::string dir = scratch_dir();
  expect_input_error([&] { prepare_corpus(dir + "/nope.txt", dir + "/out"); },
                     dir + "/nope.txt does not exist");
  std::ofstream(dir + "/empty.txt").close();
  expect_input_error([&] { prepare_corpus(dir + "/empty.txt", dir + "/out"); }, dir + "/empty.txt is empty");
  std::ofstream(dir + "/tiny.txt") << "0123456789";  // 10 bytes: 9 train, 1 val
  expect_input_error([&] { prepare_corpus(dir + "/tiny.txt", dir + "/out"); },
                     "10 tokens leave 1 for val.bin (need at least 2)");
  EXPECT_FALSE(fs::exists(dir + "/out"));  // nothing written for a rejected corpus
}

TEST(Loader, RejectsTooShortData) {
  const std::string dir = scratch_dir();
  const TokenFile file = ramp_file(dir, 8);
  expect_input_error([&] { BatchLoader(file, 8, 4, 1, false); },
                     "seq-len 8 needs at least 9 tokens; " + dir + "/ramp.bin has 8");
  EXPECT_NO_THROW(BatchLoader(file, 7, 4, 1, true));
  expect_input_error([&] { BatchLoader(file, 0, 4, 1, false); }, "seq-len must be positive");
}

TEST(Loader, UnshuffledReadsLlmcOrderAndWraps) {
  const std::string dir = scratch_dir();
  const TokenFile file = ramp_file(dir, 50);  // W = (50 - 1) / 8 = 6 windows
  const BatchLoader loader(file, 8, 4, 123, false);
  EXPECT_EQ(loader.window_start(0, 0), 0);
  EXPECT_EQ(loader.window_start(0, 3), 24);
  EXPECT_EQ(loader.window_start(1, 0), 32);  // w = 4
  EXPECT_EQ(loader.window_start(1, 1), 40);  // w = 5: tokens 40..48, the last full window
  EXPECT_EQ(loader.window_start(1, 2), 0);   // w = 6 wraps
  EXPECT_EQ(loader.window_start(2, 3), 40);  // w = 11 -> 5

  std::vector<int32_t> in(4 * 8), out(4 * 8);
  loader.fill(1, 0, 4, in.data(), out.data());
  for (int r = 0; r < 4; ++r) {
    const int start = (4 + r) % 6 * 8;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(in[r * 8 + i], start + i) << "row " << r;
      EXPECT_EQ(out[r * 8 + i], start + i + 1) << "row " << r;
    }
  }
}

TEST(Loader, RowsArePureFunctionOfSeedStepAndRow) {
  const std::string dir = scratch_dir();
  const TokenFile file = ramp_file(dir, 200);
  for (bool shuffle : {false, true}) {
    const BatchLoader whole(file, 16, 8, 7, shuffle);
    const BatchLoader other(file, 16, 8, 7, shuffle);  // a second rank's own loader
    for (int64_t step : {0, 5}) {
      std::vector<int32_t> in8(8 * 16), out8(8 * 16), in2(2 * 16), out2(2 * 16);
      whole.fill(step, 0, 8, in8.data(), out8.data());
      other.fill(step, 2, 2, in2.data(), out2.data());
      for (int i = 0; i < 2 * 16; ++i) {
        EXPECT_EQ(in2[i], in8[2 * 16 + i]) << "shuffle " << shuffle << " step " << step;
        EXPECT_EQ(out2[i], out8[2 * 16 + i]) << "shuffle " << shuffle << " step " << step;
      }
      for (int i = 0; i < 8 * 16; ++i) {
        if (i % 16 != 15) {
          EXPECT_EQ(out8[i], in8[i + 1]);  // targets are inputs shifted by one
        }
      }
    }
  }
}

TEST(Loader, ShuffleIsSeededInRangeAndSpread) {
  const std::string dir = scratch_dir();
  const TokenFile file = ramp_file(dir, 256);
  const BatchLoader a(file, 32, 4, 1, true), b(file, 32, 4, 1, true), c(file, 32, 4, 2, true);
  int64_t lo = 1 << 30, hi = -1, differ = 0;
  std::vector<int> hits(256 - 32, 0);
  for (int64_t step = 0; step < 500; ++step) {
    for (int64_t row = 0; row < 4; ++row) {
      const int64_t s = a.window_start(step, row);
      ASSERT_GE(s, 0);
      ASSERT_LE(s, 256 - 32 - 1);  // the window's seq_len + 1 tokens fit
      EXPECT_EQ(s, b.window_start(step, row));
      differ += s != c.window_start(step, row);
      lo = std::min(lo, s);
      hi = std::max(hi, s);
      ++hits[s];
    }
  }
  EXPECT_LT(lo, 5);
  EXPECT_GT(hi, 256 - 32 - 6);
  EXPECT_GT(differ, 1900);  // another seed gives another order
  int used = 0;
  for (int h : hits) used += h > 0;
  EXPECT_GT(used, 200);  // 2000 draws over 224 starts leave almost none unused
}

TEST(Loader, FillRejectsRowsOutsideTheBatch) {
  const std::string dir = scratch_dir();
  const BatchLoader loader(ramp_file(dir, 100), 8, 4, 1, true);
  std::vector<int32_t> in(5 * 8), out(5 * 8);
  expect_input_error([&] { loader.fill(0, 2, 3, in.data(), out.data()); }, "outside the global batch of 4");
  expect_input_error([&] { loader.fill(-1, 0, 1, in.data(), out.data()); }, "outside the global batch");
}
