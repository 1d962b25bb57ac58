// Hostile input to the file parsers, one test per bug the fuzzers (tests/fuzz/) found or the
// review of them did: each must end in an InputError naming the cause, never a crash. The inputs
// the fuzzers replay are in tests/fuzz/regressions/.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/llmc_import.hpp"
#include "checkpoint/safetensors.hpp"
#include "model/gpt.hpp"
#include "test_util.hpp"

using namespace lattice;
using namespace lattice::checkpoint;
using lattice::testing_util::expect_input_error;

namespace {

std::string scratch_dir() { return lattice::testing_util::scratch_dir("hostile"); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// llm.c's header fields (maxT, V, L, NH, C, Vp).
struct LlmcFields {
  int32_t max_seq_len, vocab, layers, heads, hidden, padded_vocab;
};

int64_t llmc_param_count(const LlmcFields& f) {
  const int64_t C = f.hidden, L = f.layers;
  return int64_t(f.padded_vocab) * C + int64_t(f.max_seq_len) * C + L * (13 * C + 12 * C * C) + 2 * C;
}

// An llm.c version 3 file: the header, then `floats` parameters valued 0, 1, 2, ... (default: as
// many as the header says).
void write_llmc(const std::string& path, const LlmcFields& f, int64_t floats = -1, int32_t magic = kLlmcMagic,
                int32_t version = kLlmcVersion) {
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  const int32_t fields[] = {magic, version, f.max_seq_len, f.vocab, f.layers, f.heads, f.hidden, f.padded_vocab};
  std::copy(std::begin(fields), std::end(fields), header.begin());
  if (floats < 0) floats = llmc_param_count(f);
  std::vector<float> params(static_cast<size_t>(floats));
  for (size_t i = 0; i < params.size(); ++i) params[i] = float(i);
  std::string bytes(reinterpret_cast<const char*>(header.data()), kLlmcHeaderBytes);
  bytes.append(reinterpret_cast<const char*>(params.data()), params.size() * sizeof(float));
  write_bytes(path, bytes);
}

ModelConfig model_config(int vocab, int layers, int heads, int hidden, int seq_len) {
  ModelConfig c;
  c.vocab = vocab, c.layers = layers, c.heads = heads, c.hidden = hidden, c.seq_len = seq_len, c.dropout = 0.0;
  return c;
}

}  // namespace

// The known crash: Vp (padded vocabulary) was never compared with V, so Vp = 0 or 1 with
// --vocab 65536 read V·C floats out of a Vp·C buffer.
TEST(HostileLlmc, PaddedVocabularySmallerThanVocabulary) {
  const std::string dir = scratch_dir();
  GPT model(model_config(65536, 1, 1, 1, 1), LayoutConfig{}, 0);
  write_llmc(dir + "/vp1.bin", {1, 65536, 1, 1, 1, 1});
  expect_input_error([&] { import_llmc_weights(dir + "/vp1.bin", model); },
                     "Vp (padded vocabulary) = 1 is smaller than V (vocabulary) = 65536");
  write_llmc(dir + "/vp0.bin", {1, 65536, 1, 1, 1, 0});
  expect_input_error([&] { import_llmc_weights(dir + "/vp0.bin", model); },
                     "Vp (padded vocabulary) = 0 is not positive");
}

// Every header field is checked before anything is allocated from it.
TEST(HostileLlmc, EveryHeaderFieldIsValidated) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/gpt2.bin";
  const LlmcFields good{4, 5, 2, 2, 4, 8};
  auto expect = [&](const LlmcFields& f, const std::string& fragment, int64_t floats = -1) {
    write_llmc(path, f, floats);
    expect_input_error([&] { LlmcCheckpoint::load(path); }, fragment);
  };
  expect({0, 5, 2, 2, 4, 8}, "maxT (max sequence length) = 0 is not positive", 100);
  expect({4, -5, 2, 2, 4, 8}, "V (vocabulary) = -5 is not positive", 100);
  expect({4, 5, 0, 2, 4, 8}, "L (layers) = 0 is not positive", 100);
  expect({4, 5, 2, -1, 4, 8}, "NH (heads) = -1 is not positive", 100);
  expect({4, 5, 2, 2, 0, 8}, "C (hidden) = 0 is not positive", 100);
  expect({4, 5, 2, 2, 4, -8}, "Vp (padded vocabulary) = -8 is not positive", 100);
  expect({4, 5, 2, 3, 4, 8}, "NH (heads) = 3 does not divide C (hidden) = 4");
  // Sizes that no file has: checked against the file before any allocation.
  expect({INT32_MAX, 5, 2, 2, 4, 8}, "has the wrong size", 100);
  expect({4, 5, INT32_MAX, 1, INT32_MAX, INT32_MAX}, "describes more parameters than any file can hold", 100);
  expect(good, "has the wrong size", llmc_param_count(good) - 1);
  expect(good, "has the wrong size", llmc_param_count(good) + 1);

  write_llmc(path, good, -1, 20240520);  // a token file's magic
  expect_input_error([&] { LlmcCheckpoint::load(path); }, "is not an llm.c GPT-2 checkpoint (bad magic 20240520");
  write_llmc(path, good, -1, kLlmcMagic, 5);  // llm.c's bf16 version
  expect_input_error([&] { LlmcCheckpoint::load(path); }, "has version 5: only llm.c version 3 (fp32)");
  write_bytes(path, std::string(100, '\0'));
  expect_input_error([&] { LlmcCheckpoint::load(path); }, "is too short for an llm.c header: 100 bytes");
  expect_input_error([&] { LlmcCheckpoint::load(dir + "/missing.bin"); }, "does not exist");
  expect_input_error([&] { LlmcCheckpoint::load(dir); }, "is not a regular file");
}

TEST(HostileLlmc, ShapeMustMatchTheModel) {
  const std::string dir = scratch_dir();
  write_llmc(dir + "/gpt2.bin", {4, 5, 2, 2, 4, 8});
  GPT model(model_config(5, 2, 2, 4, 8), LayoutConfig{}, 0);  // seq-len 8 > maxT 4
  expect_input_error([&] { import_llmc_weights(dir + "/gpt2.bin", model); },
                     "holds a model of vocab 5, 2 layers, 2 heads, hidden 4, seq-len 4: the flags ask for vocab 5, "
                     "2 layers, 2 heads, hidden 4, seq-len 8");
}

// The values land where Hugging Face's layout puts them: wte without its padding rows, wpe's first
// seq-len rows, Linear [out, in] transposed into Conv1D [in, out]; the model's padding rows are 0.
TEST(HostileLlmc, ImportPlacesEveryTensor) {
  const std::string dir = scratch_dir();
  const LlmcFields f{8, 5, 2, 2, 4, 8};  // maxT 8 > seq-len 4; V 5 < Vp 8 < the model's 128
  write_llmc(dir + "/gpt2.bin", f);
  GPT model(model_config(5, 2, 2, 4, 4), LayoutConfig{}, 0);
  import_llmc_weights(dir + "/gpt2.bin", model);
  const ParamTable& table = model.table();
  const float* p = model.params();
  const int64_t C = 4, L = 2, Vp = 8, T = 8;
  // Offsets of llm.c's tensors: value at llm.c index i is float(i).
  const int64_t wpe = Vp * C, ln1w = wpe + T * C, ln1b = ln1w + L * C, qkvw = ln1b + L * C;
  const int64_t qkvb = qkvw + L * 3 * C * C, attprojw = qkvb + L * 3 * C, attprojb = attprojw + L * C * C;
  const int64_t ln2w = attprojb + L * C, ln2b = ln2w + L * C, fcw = ln2b + L * C, fcb = fcw + L * 4 * C * C;
  const int64_t fcprojw = fcb + L * 4 * C, fcprojb = fcprojw + L * C * 4 * C, lnfw = fcprojb + L * C, lnfb = lnfw + C;
  for (int64_t i = 0; i < 5 * C; ++i) EXPECT_EQ(p[table.wte() + i], float(i));
  for (int64_t i = 5 * C; i < 128 * C; ++i) ASSERT_EQ(p[table.wte() + i], 0.0f) << "padding row element " << i;
  for (int64_t i = 0; i < 4 * C; ++i) EXPECT_EQ(p[table.wpe() + i], float(wpe + i));
  for (int l = 0; l < L; ++l) {
    const auto w = table.layer(p, l);
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(w.ln1_w[c], float(ln1w + l * C + c));
      EXPECT_EQ(w.ln1_b[c], float(ln1b + l * C + c));
      EXPECT_EQ(w.proj_b[c], float(attprojb + l * C + c));
      EXPECT_EQ(w.ln2_w[c], float(ln2w + l * C + c));
      EXPECT_EQ(w.ln2_b[c], float(ln2b + l * C + c));
      EXPECT_EQ(w.fc2_b[c], float(fcprojb + l * C + c));
    }
    for (int64_t o = 0; o < 3 * C; ++o) EXPECT_EQ(w.qkv_b[o], float(qkvb + l * 3 * C + o));
    for (int64_t o = 0; o < 4 * C; ++o) EXPECT_EQ(w.fc1_b[o], float(fcb + l * 4 * C + o));
    // Conv1D [in, out][i][o] = Linear [out, in][o][i].
    for (int64_t i = 0; i < C; ++i) {
      for (int64_t o = 0; o < 3 * C; ++o) EXPECT_EQ(w.qkv_w[i * 3 * C + o], float(qkvw + l * 3 * C * C + o * C + i));
      for (int64_t o = 0; o < C; ++o) EXPECT_EQ(w.proj_w[i * C + o], float(attprojw + l * C * C + o * C + i));
      for (int64_t o = 0; o < 4 * C; ++o) EXPECT_EQ(w.fc1_w[i * 4 * C + o], float(fcw + l * 4 * C * C + o * C + i));
    }
    for (int64_t i = 0; i < 4 * C; ++i)
      for (int64_t o = 0; o < C; ++o) EXPECT_EQ(w.fc2_w[i * C + o], float(fcprojw + l * C * 4 * C + o * 4 * C + i));
  }
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_EQ(p[table.lnf_w() + c], float(lnfw + c));
    EXPECT_EQ(p[table.lnf_b() + c], float(lnfb + c));
  }
}

// A pipeline stage holds only some tensors (here: no embeddings, only layer 1): the import used to
// write every tensor through offsets such a table does not have (wte() == -1).
TEST(HostileLlmc, ImportIntoAPipelineStage) {
  const std::string dir = scratch_dir();
  write_llmc(dir + "/gpt2.bin", {8, 5, 2, 2, 4, 8});
  const ModelConfig config = model_config(5, 2, 2, 4, 4);
  GPT whole(config, LayoutConfig{}, 0);
  import_llmc_weights(dir + "/gpt2.bin", whole);
  StageParams stage;
  stage.layers = {false, true};
  stage.embedding = false;
  stage.head = true;
  GPT last(config, LayoutConfig{}, 0, {}, stage);
  import_llmc_weights(dir + "/gpt2.bin", last);
  ASSERT_EQ(last.table().wpe(), -1);
  for (const ParamInfo& p : last.table().params()) {
    const ParamInfo& w = whole.table().find(p.name);
    ASSERT_EQ(p.numel, w.numel) << p.name;
    for (int64_t i = 0; i < p.numel; ++i)
      ASSERT_EQ(last.params()[p.offset + i], whole.params()[w.offset + i]) << p.name << " element " << i;
  }
}

// The fuzzer's first find: a number past double's range in the JSON header escaped as
// nlohmann::json::out_of_range instead of an InputError.
TEST(HostileSafetensors, NumberOutOfRangeInTheHeader) {
  const std::string dir = scratch_dir();
  const std::string header = R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  write_bytes(dir + "/big.safetensors", bytes + header + std::string(4, '\0'));
  expect_input_error([&] { SafetensorsFile::load(dir + "/big.safetensors"); },
                     "has a malformed JSON header (a number out of range)");
}

// The format allows any offsets: an F32 tensor 3 bytes into the data is read into aligned memory,
// so static_cast<const float*>(data) is valid.
TEST(HostileSafetensors, UnalignedTensorsAreReadAligned) {
  const std::string dir = scratch_dir();
  const float f32[3] = {1.5f, -2.0f, 3.25f};
  const double f64 = 0.125;
  const std::string header =
      R"({"u8":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
      R"("f32":{"dtype":"F32","shape":[3],"data_offsets":[3,15]},)"
      R"("f64":{"dtype":"F64","shape":[],"data_offsets":[15,23]},)"
      R"("empty":{"dtype":"F64","shape":[0],"data_offsets":[23,23]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
  bytes += header + "xyz";
  bytes.append(reinterpret_cast<const char*>(f32), sizeof(f32));
  bytes.append(reinterpret_cast<const char*>(&f64), sizeof(f64));
  write_bytes(dir + "/unaligned.safetensors", bytes);
  const SafetensorsFile file = SafetensorsFile::load(dir + "/unaligned.safetensors");
  const TensorRef& t = file.get("f32", "F32", {3});
  ASSERT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignof(float), 0u);
  const auto* values = static_cast<const float*>(t.data);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_EQ(values[2], 3.25f);
  const TensorRef& d = file.get("f64", "F64", {});
  ASSERT_EQ(reinterpret_cast<uintptr_t>(d.data) % alignof(double), 0u);
  EXPECT_EQ(*static_cast<const double*>(d.data), 0.125);
  EXPECT_EQ(std::memcmp(file.get("u8").data, "xyz", 3), 0);
  EXPECT_EQ(file.get("empty").bytes, 0u);
  // A copy shares the (realigned) bytes.
  const SafetensorsFile copy = file;
  EXPECT_EQ(copy.get("f32").data, t.data);
}

// Found by the fuzzer: names from the file went into the message verbatim, so a tensor named
// "a\nb" made a two-line error. Control characters are escaped and long names cut.
TEST(HostileSafetensors, NamesInMessagesStayOnOneLine) {
  const std::string dir = scratch_dir();
  auto write_header = [&](const std::string& header) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint64_t(header.size()) >> (8 * i));
    write_bytes(dir + "/names.safetensors", bytes + header);
  };
  write_header(R"({"a\nb":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})");
  expect_input_error([&] { SafetensorsFile::load(dir + "/names.safetensors"); },
                     "tensor 'a\\x0ab' is F32 [1] = 4 bytes, but its data_offsets span 8 bytes");
  write_header(R"({"w":{"dtype":"F\r32","shape":[1],"data_offsets":[0,4]}})");
  expect_input_error([&] { SafetensorsFile::load(dir + "/names.safetensors"); }, "has unknown dtype 'F\\x0d32'");
  write_header(R"({")" + std::string(200, 'n') + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})");
  expect_input_error([&] { SafetensorsFile::load(dir + "/names.safetensors"); },
                     "tensor '" + std::string(80, 'n') + "...' is F32 [1]");
}
