#include "checkpoint/llmc_import.hpp"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace lattice::checkpoint {

void import_llmc_weights(const std::string& path, GPT& model) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open " + path);
  int32_t header[256];
  if (!in.read(reinterpret_cast<char*>(header), sizeof(header))) fail(path + " is too short for an llm.c header");
  if (header[0] != 20240326) fail(path + " is not an llm.c GPT-2 checkpoint (bad magic)");
  if (header[1] != 3) fail(path + ": only llm.c version 3 (fp32) checkpoints can be imported");
  const ModelConfig& c = model.config();
  const int64_t maxT = header[2], V = header[3], L = header[4], NH = header[5], C = header[6], Vp = header[7];
  if (V != c.vocab || L != c.layers || NH != c.heads || C != c.hidden || maxT < c.seq_len)
    fail(path + " holds a model of vocab " + std::to_string(V) + ", " + std::to_string(L) + " layers, " +
         std::to_string(NH) + " heads, hidden " + std::to_string(C) + ", seq-len " + std::to_string(maxT) +
         ": the flags ask for something else");
  // llm.c's order and its Linear [out, in] layout; lattice stores Conv1D [in, out].
  const int64_t sizes[16] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                             L * C,  L * C,    L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
  std::vector<std::vector<float>> t(16);
  for (int i = 0; i < 16; ++i) {
    t[size_t(i)].resize(size_t(sizes[i]));
    if (!in.read(reinterpret_cast<char*>(t[size_t(i)].data()), std::streamsize(sizes[i] * 4)))
      fail(path + " is truncated");
  }
  const ParamTable& table = model.table();
  float* p = model.params();
  std::memcpy(p + table.wte(), t[0].data(), size_t(V * C) * 4);
  std::memcpy(p + table.wpe(), t[1].data(), size_t(c.seq_len * C) * 4);
  auto transpose_into = [](float* dst, const float* src, int64_t out, int64_t in_dim) {
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in_dim; ++i) dst[i * out + o] = src[o * in_dim + i];
  };
  for (int l = 0; l < c.layers; ++l) {
    const auto w = table.layer(p, l);
    std::memcpy(w.ln1_w, t[2].data() + l * C, size_t(C) * 4);
    std::memcpy(w.ln1_b, t[3].data() + l * C, size_t(C) * 4);
    transpose_into(w.qkv_w, t[4].data() + l * 3 * C * C, 3 * C, C);
    std::memcpy(w.qkv_b, t[5].data() + l * 3 * C, size_t(3 * C) * 4);
    transpose_into(w.proj_w, t[6].data() + l * C * C, C, C);
    std::memcpy(w.proj_b, t[7].data() + l * C, size_t(C) * 4);
    std::memcpy(w.ln2_w, t[8].data() + l * C, size_t(C) * 4);
    std::memcpy(w.ln2_b, t[9].data() + l * C, size_t(C) * 4);
    transpose_into(w.fc1_w, t[10].data() + l * 4 * C * C, 4 * C, C);
    std::memcpy(w.fc1_b, t[11].data() + l * 4 * C, size_t(4 * C) * 4);
    transpose_into(w.fc2_w, t[12].data() + l * C * 4 * C, C, 4 * C);
    std::memcpy(w.fc2_b, t[13].data() + l * C, size_t(C) * 4);
  }
  std::memcpy(p + table.lnf_w(), t[14].data(), size_t(C) * 4);
  std::memcpy(p + table.lnf_b(), t[15].data(), size_t(C) * 4);
}

}  // namespace lattice::checkpoint
