#pragma once
// The parameter table: every weight's name (Hugging Face GPT-2 names), shape (Conv1D [in, out]
// layout for linears) and offset in ONE flat fp32 buffer. Gradients use the same offsets, so a
// shard of the model is a range of offsets.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"

namespace lattice {

// How a tensor is split across the tensor-parallel group (Megatron-LM): the vocabulary-parallel
// embedding and row-parallel weights by rows, column-parallel weights and biases by columns; the
// fused QKV weight by columns within each of its Q, K and V blocks (heads split across ranks).
enum class Split { replicated, rows, columns, qkv_columns };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;       // this rank's shard
  std::vector<int64_t> full_shape;  // the whole tensor (Hugging Face layout, padded vocabulary)
  Split split = Split::replicated;
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
  static constexpr size_t kTensorsPerLayer = 12;
  // The shard of tensor-parallel rank tp_rank of tp_size (the whole model when tp_size is 1).
  explicit ParamTable(const ModelConfig& config, int tp_size = 1, int tp_rank = 0);
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  // Index in the full tensor of element `local` of this rank's shard of p.
  int64_t global_index(const ParamInfo& p, int64_t local) const;

  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range

  int64_t wte() const { return params_[0].offset; }  // [padded vocab, h]
  int64_t wpe() const { return params_[1].offset; }  // [s, h]
  int64_t lnf_w() const { return params_[params_.size() - 2].offset; }
  int64_t lnf_b() const { return params_[params_.size() - 1].offset; }
  // The flat offsets [begin, end) of layer l's twelve tensors (contiguous), and the layer a
  // tensor of the table belongs to (-1 for the embeddings and the final LayerNorm).
  std::pair<int64_t, int64_t> layer_range(int l) const {
    const ParamInfo& first = params_[2 + size_t(l) * kTensorsPerLayer];
    const ParamInfo& last = params_[2 + size_t(l) * kTensorsPerLayer + kTensorsPerLayer - 1];
    return {first.offset, last.offset + last.numel};
  }
  int layer_of(size_t tensor) const {
    if (tensor < 2 || tensor >= params_.size() - 2) return -1;
    return int((tensor - 2) / kTensorsPerLayer);
  }
  template <class T>
  LayerTensors<T> layer(T* base, int l) const {
    const ParamInfo* p = &params_[2 + size_t(l) * kTensorsPerLayer];
    return {base + p[0].offset, base + p[1].offset, base + p[2].offset,  base + p[3].offset,
            base + p[4].offset, base + p[5].offset, base + p[6].offset,  base + p[7].offset,
            base + p[8].offset, base + p[9].offset, base + p[10].offset, base + p[11].offset};
  }

 private:
  std::vector<ParamInfo> params_;
  int64_t total_ = 0;
  int tp_size_ = 1, tp_rank_ = 0;
};

// GPT-2 initialisation: normal(0, 0.02), residual projections 0.02/√(2L), LayerNorm 1/0,
// biases 0. Each element is a pure function of (seed, tensor index, global element index), so a
// shard of a tensor initialises the same as the whole.
void init_params(const ParamTable& table, float* params, uint64_t seed, int real_vocab);

}  // namespace lattice
