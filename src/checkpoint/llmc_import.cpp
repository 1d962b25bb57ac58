#include "checkpoint/llmc_import.hpp"

#include <charconv>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/pinned_path.hpp"
#include "model/gpt.hpp"

namespace lattice::checkpoint {
namespace {

// llm.c's parameter tensors, in file order.
enum Tensor { wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb };
// A layer tensor has kFactor[k] * C elements per layer, times C again where kSquare[k] (a weight).
constexpr int64_t kFactor[kLlmcTensors] = {0, 0, 1, 1, 3, 3, 1, 1, 1, 1, 4, 4, 4, 1, 1, 1};
constexpr bool kSquare[kLlmcTensors] = {false, false, false, false, true, false, true, false,
                                        false, false, true,  false, true, false, false, false};

int64_t checked_mul(int64_t a, int64_t b, bool& overflow) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow = true;
  return r;
}

// Hugging Face's name suffix of a layer tensor, its llm.c tensor and, for a weight, its Linear
// [out, in] shape in multiples of C (llm.c stores [out, in]; Hugging Face's Conv1D [in, out]).
struct LayerTensor {
  const char* suffix;
  int tensor;
  int out_c, in_c;  // 0 = a vector, copied as is
};
constexpr LayerTensor kLayerTensors[] = {
    {"ln_1.weight", ln1w, 0, 0},       {"ln_1.bias", ln1b, 0, 0},
    {"attn.c_attn.weight", qkvw, 3, 1}, {"attn.c_attn.bias", qkvb, 0, 0},
    {"attn.c_proj.weight", attprojw, 1, 1}, {"attn.c_proj.bias", attprojb, 0, 0},
    {"ln_2.weight", ln2w, 0, 0},       {"ln_2.bias", ln2b, 0, 0},
    {"mlp.c_fc.weight", fcw, 4, 1},    {"mlp.c_fc.bias", fcb, 0, 0},
    {"mlp.c_proj.weight", fcprojw, 1, 4}, {"mlp.c_proj.bias", fcprojb, 0, 0},
};

}  // namespace

LlmcCheckpoint LlmcCheckpoint::load(const std::string& path) {
  const std::string who = "llm.c checkpoint " + path;
  std::error_code ec;
  require_regular_file(path, "llm.c checkpoint");
  const uint64_t file_bytes = std::filesystem::file_size(pinned_path(path), ec);  // core/pinned_path.hpp
  require(!ec, "cannot read " + who + ": " + ec.message());
  require(file_bytes >= kLlmcHeaderBytes, who + " is too short for an llm.c header: " +
                                              std::to_string(file_bytes) + " bytes, less than " +
                                              std::to_string(kLlmcHeaderBytes));
  std::ifstream in(pinned_path(path), std::ios::binary);
  require(in.good(), "cannot open " + who);
  int32_t header[kLlmcHeaderInts];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  require(in.good(), "cannot read the header of " + who);
  require(header[0] == kLlmcMagic, who + " is not an llm.c GPT-2 checkpoint (bad magic " +
                                       std::to_string(header[0]) + ", expected " + std::to_string(kLlmcMagic) + ")");
  require(header[1] == kLlmcVersion, who + " has version " + std::to_string(header[1]) +
                                         ": only llm.c version 3 (fp32) checkpoints can be imported");

  LlmcCheckpoint ck;
  ck.path_ = path;
  LlmcShape& s = ck.shape_;
  s = {header[2], header[3], header[4], header[5], header[6], header[7]};
  const std::pair<const char*, int64_t> fields[] = {{"maxT (max sequence length)", s.max_seq_len},
                                                    {"V (vocabulary)", s.vocab},
                                                    {"L (layers)", s.layers},
                                                    {"NH (heads)", s.heads},
                                                    {"C (hidden)", s.hidden},
                                                    {"Vp (padded vocabulary)", s.padded_vocab}};
  for (const auto& [name, value] : fields)
    require(value >= 1, who + ": header field " + name + " = " + std::to_string(value) + " is not positive");
  require(s.padded_vocab >= s.vocab, who + ": header field Vp (padded vocabulary) = " +
                                         std::to_string(s.padded_vocab) + " is smaller than V (vocabulary) = " +
                                         std::to_string(s.vocab));
  require(s.hidden % s.heads == 0, who + ": header field NH (heads) = " + std::to_string(s.heads) +
                                       " does not divide C (hidden) = " + std::to_string(s.hidden));

  // Offsets of the 16 tensors; any overflow means a size no file can have.
  bool overflow = false;
  const int64_t C = s.hidden;
  int64_t offset = 0;
  for (size_t k = 0; k < kLlmcTensors; ++k) {
    ck.offsets_[k] = offset;
    int64_t n = 0;
    if (k == wte) n = checked_mul(s.padded_vocab, C, overflow);
    else if (k == wpe) n = checked_mul(s.max_seq_len, C, overflow);
    else if (k == lnfw || k == lnfb) n = C;
    else n = checked_mul(s.layers, checked_mul(kFactor[k], kSquare[k] ? checked_mul(C, C, overflow) : C, overflow), overflow);
    if (__builtin_add_overflow(offset, n, &offset)) overflow = true;
  }
  ck.offsets_[kLlmcTensors] = offset;
  const std::string shape_text = "maxT " + std::to_string(s.max_seq_len) + ", V " + std::to_string(s.vocab) +
                                 ", L " + std::to_string(s.layers) + ", NH " + std::to_string(s.heads) + ", C " +
                                 std::to_string(C) + ", Vp " + std::to_string(s.padded_vocab);
  uint64_t expected_bytes = 0;
  if (!overflow && __builtin_mul_overflow(uint64_t(offset), uint64_t(sizeof(float)), &expected_bytes)) overflow = true;
  if (!overflow && __builtin_add_overflow(expected_bytes, uint64_t(kLlmcHeaderBytes), &expected_bytes)) overflow = true;
  require(!overflow, who + ": header (" + shape_text + ") describes more parameters than any file can hold");
  require(file_bytes == expected_bytes, who + " has the wrong size: its header (" + shape_text + ") means " +
                                            std::to_string(expected_bytes) + " bytes, the file has " +
                                            std::to_string(file_bytes));

  ck.params_.resize(size_t(offset));  // bounded by the file's size
  in.read(reinterpret_cast<char*>(ck.params_.data()), std::streamsize(ck.params_.size() * sizeof(float)));
  require(in.good(), "cannot read the parameters of " + who);
  return ck;
}

std::vector<float> LlmcCheckpoint::tensor(const std::string& name) const {
  const int64_t C = shape_.hidden;
  auto block = [&](int k, int64_t begin, int64_t count) {
    const float* p = params_.data() + offsets_[size_t(k)] + begin;
    return std::vector<float>(p, p + count);
  };
  if (name == "wte.weight") return block(wte, 0, shape_.vocab * C);  // the padding rows Vp - V stay behind
  if (name == "wpe.weight") return block(wpe, 0, shape_.max_seq_len * C);
  if (name == "ln_f.weight") return block(lnfw, 0, C);
  if (name == "ln_f.bias") return block(lnfb, 0, C);
  // "h.<layer>.<suffix>"
  const std::string unknown = "llm.c checkpoint " + path_ + " has no tensor '" + name + "'";
  require(name.size() > 2 && name.compare(0, 2, "h.") == 0, unknown);
  const char* first = name.data() + 2;
  const char* last = name.data() + name.size();
  int64_t layer = -1;
  const auto [dot, err] = std::from_chars(first, last, layer);
  require(err == std::errc() && dot != first && dot < last && *dot == '.' && layer >= 0 && layer < shape_.layers,
          unknown);
  const std::string suffix(dot + 1, last);
  for (const LayerTensor& t : kLayerTensors) {
    if (suffix != t.suffix) continue;
    const int64_t per_layer = (offsets_[size_t(t.tensor) + 1] - offsets_[size_t(t.tensor)]) / shape_.layers;
    if (t.out_c == 0) return block(t.tensor, layer * per_layer, per_layer);
    // llm.c's [out, in] into Conv1D's [in, out].
    const int64_t out = t.out_c * C, in = t.in_c * C;
    const float* src = params_.data() + offsets_[size_t(t.tensor)] + layer * per_layer;
    std::vector<float> dst(size_t(out * in));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) dst[size_t(i * out + o)] = src[o * in + i];
    return dst;
  }
  fail(unknown);
}

void import_llmc_weights(const std::string& path, GPT& model) {
  const LlmcCheckpoint ck = LlmcCheckpoint::load(path);
  const LlmcShape& s = ck.shape();
  const ModelConfig& c = model.config();
  if (s.vocab != c.vocab || s.layers != c.layers || s.heads != c.heads || s.hidden != c.hidden ||
      s.max_seq_len < c.seq_len)
    fail(path + " holds a model of vocab " + std::to_string(s.vocab) + ", " + std::to_string(s.layers) +
         " layers, " + std::to_string(s.heads) + " heads, hidden " + std::to_string(s.hidden) + ", seq-len " +
         std::to_string(s.max_seq_len) + ": the flags ask for vocab " + std::to_string(c.vocab) + ", " +
         std::to_string(c.layers) + " layers, " + std::to_string(c.heads) + " heads, hidden " +
         std::to_string(c.hidden) + ", seq-len " + std::to_string(c.seq_len));
  // Each tensor this rank holds, element by element from the whole tensor (a tensor-parallel
  // shard, a pipeline stage's part); wte's padding rows are zero.
  const ParamTable& table = model.table();
  float* base = model.params();
  require(base != nullptr || table.total() == 0, "cannot import " + path + ": the model holds no weights");
  for (const ParamInfo& p : table.params()) {
    const std::vector<float> full = ck.tensor(p.name);
    const int64_t stored = int64_t(full.size());
    float* dst = base + p.offset;
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t g = table.global_index(p, i);
      dst[i] = g < stored ? full[size_t(g)] : 0.0f;
    }
  }
}

}  // namespace lattice::checkpoint
