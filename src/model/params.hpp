#pragma once
// The parameter table: every weight's name (Hugging Face GPT-2 names), shape (Conv1D [in, out]
// layout for linears) and offset in ONE flat fp32 buffer. Gradients use the same offsets, so a
// shard of the model is a range of offsets.
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace lattice {

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = false;          // AdamW weight decay applies (matrices and embeddings only)
  float init_std = 0.0f;       // 0 = constant init
  float init_value = 0.0f;     // for constant init (LayerNorm weight 1, biases 0)
};

// Pointers into a flat buffer (parameters or gradients) for one transformer layer.
template <class T>
struct LayerTensors {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};

class ParamTable {
 public:
  explicit ParamTable(const ModelConfig& config);

  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range

  int64_t wte() const { return params_[0].offset; }  // [padded vocab, h]
  int64_t wpe() const { return params_[1].offset; }  // [s, h]
  int64_t lnf_w() const { return params_[params_.size() - 2].offset; }
  int64_t lnf_b() const { return params_[params_.size() - 1].offset; }
  template <class T>
  LayerTensors<T> layer(T* base, int l) const {
    const ParamInfo* p = &params_[2 + size_t(l) * 12];
    return {base + p[0].offset, base + p[1].offset, base + p[2].offset,  base + p[3].offset,
            base + p[4].offset, base + p[5].offset, base + p[6].offset,  base + p[7].offset,
            base + p[8].offset, base + p[9].offset, base + p[10].offset, base + p[11].offset};
  }

 private:
  std::vector<ParamInfo> params_;
  int64_t total_ = 0;
};

// GPT-2 initialisation: normal(0, 0.02), residual projections 0.02/√(2L), LayerNorm 1/0,
// biases 0. Each element is a pure function of (seed, tensor index, element index), so a shard
// of a tensor initialises the same as the whole.
void init_params(const ParamTable& table, float* params, uint64_t seed, int real_vocab);

}  // namespace lattice
