#pragma once
// Import of llm.c's gpt2_124M.bin (version 3: fp32 weights, padded vocabulary) into a GPT.
// The file: a header of 256 int32 (magic 20240326, version 3, maxT, V, L, NH, C, Vp, the rest
// unused), then every parameter as fp32 in llm.c's order and its Linear [out, in] layout:
// wte [Vp, C], wpe [maxT, C], ln1w/ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C],
// attprojb [L, C], ln2w/ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C], fcprojw [L, C, 4C],
// fcprojb [L, C], lnfw/lnfb [C]; all little-endian, nothing after the last tensor.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lattice {
class GPT;
}  // namespace lattice

namespace lattice::checkpoint {

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersion = 3;  // fp32 weights
inline constexpr size_t kLlmcHeaderInts = 256;
inline constexpr size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);
inline constexpr size_t kLlmcTensors = 16;

// The header's model shape, in llm.c's names.
struct LlmcShape {
  int64_t max_seq_len = 0;   // maxT
  int64_t vocab = 0;         // V
  int64_t layers = 0;        // L
  int64_t heads = 0;         // NH
  int64_t hidden = 0;        // C
  int64_t padded_vocab = 0;  // Vp >= V
};

// A validated llm.c checkpoint held in memory (fp32, aligned).
class LlmcCheckpoint {
 public:
  // Throws InputError naming the file and the defect: missing, shorter than the header, bad magic
  // or version, a header field that is not positive, Vp < V, NH not dividing C, or a file size
  // other than the header's parameter count implies (checked before anything is allocated).
  static LlmcCheckpoint load(const std::string& path);

  const LlmcShape& shape() const { return shape_; }
  const std::string& path() const { return path_; }
  // The parameter of Hugging Face GPT-2 name `name` ("wte.weight", "h.3.attn.c_attn.weight", ...)
  // in Hugging Face's layout: Conv1D [in, out] weights, wte without its padding rows [V, C], wpe
  // [maxT, C]. Throws InputError for a name this checkpoint does not hold.
  std::vector<float> tensor(const std::string& name) const;

 private:
  LlmcCheckpoint() = default;

  std::string path_;
  LlmcShape shape_;
  std::array<int64_t, kLlmcTensors + 1> offsets_{};  // tensor k is params_[offsets_[k], offsets_[k+1])
  std::vector<float> params_;
};

// Loads `path` into `model` (this rank's shard: any tensor- or pipeline-parallel part of the
// model). Throws InputError for a defective file or one whose shape differs from the model's.
void import_llmc_weights(const std::string& path, GPT& model);

}  // namespace lattice::checkpoint
