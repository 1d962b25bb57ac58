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
  int layer = -1;              // transformer layer, -1 for the embeddings and the final LayerNorm
  int full_index = 0;          // position in the whole model's table (keys its init stream)
  // Under sequence parallelism each TP rank sees only its sequence shard's share of this gradient
  // (replicated tensors fed by shards: LayerNorms, position embedding), so it is summed over TP.
  // Not the row-parallel biases: they are added after the reduce and see the whole sequence.
  bool sequence_partial = false;
  bool expert = false;  // an MoE expert's tensor: held by one rank of the expert-parallel group
};

// The parameters one pipeline stage holds: its layers, the input embeddings on the first stage,
// the tied output embedding and the final LayerNorm on the last.
// Under expert parallelism also the experts this rank holds: [expert0, expert0 + experts).
struct StageParams {
  std::vector<bool> layers;  // empty = every layer
  bool embedding = true, head = true;
  int expert0 = 0, experts = -1;  // -1 = every expert
  bool has_layer(int l) const { return layers.empty() || layers[size_t(l)]; }
  bool has_expert(int e) const { return experts < 0 || (e >= expert0 && e < expert0 + experts); }
};

// Flat offsets [begin, end) of a contiguous piece of a rank's parameter buffer (a ZeRO shard is a
// list of them).
struct FlatPiece {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Pointers into a flat buffer (parameters or gradients) for one transformer layer.
// An MoE layer has no fc1/fc2 (null) but a router (and noisy top-k's noise weights); its experts
// are ExpertTensors in a range of their own.
template <class T>
struct LayerTensors {
  T *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
  T *router_w = nullptr, *router_noise_w = nullptr;
};
template <class T>
struct ExpertTensors {
  T *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};

class ParamTable {
 public:
  static constexpr size_t kTensorsPerExpert = 4;
  // The shard of tensor-parallel rank tp_rank of tp_size (the whole model when tp_size is 1), of
  // the tensors pipeline stage `stage` holds (all by default).
  explicit ParamTable(const ModelConfig& config, int tp_size = 1, int tp_rank = 0, const StageParams& stage = {});
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  // Index in the full tensor of element `local` of this rank's shard of p.
  int64_t global_index(const ParamInfo& p, int64_t local) const;

  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range

  // Offsets of the named outside tensors (-1 where this stage does not hold them).
  int64_t wte() const { return wte_; }  // [padded vocab / t, h]
  int64_t wpe() const { return wpe_; }  // [s, h]
  int64_t lnf_w() const { return lnf_w_; }
  int64_t lnf_b() const { return lnf_b_; }
  bool has_layer(int l) const { return layer_first_[size_t(l)] >= 0; }
  // The flat offsets [begin, end) of layer l's own tensors (contiguous; an MoE layer's without its experts).
  std::pair<int64_t, int64_t> layer_range(int l) const { return range_of(layer_first_[size_t(l)], layer_count_[size_t(l)]); }
  // An MoE layer's experts held here, right after the layer's tensors (empty otherwise).
  std::pair<int64_t, int64_t> experts_range(int l) const { return range_of(expert_first_[size_t(l)], expert_count_[size_t(l)]); }
  int held_experts(int l) const { return int(expert_count_[size_t(l)] / kTensorsPerExpert); }
  int expert0() const { return expert0_; }
  int layer_of(size_t tensor) const { return params_[tensor].layer; }
  template <class T>
  LayerTensors<T> layer(T* base, int l) const {
    return layer_at(base + layer_range(l).first, l);
  }
  // The same from a buffer holding just layer l's tensors (a ZeRO bucket).
  template <class T>
  LayerTensors<T> layer_at(T* bucket, int l) const {
    const ParamInfo* p = &params_[size_t(layer_first_[size_t(l)])];
    auto at = [&](int k) { return bucket + (p[k].offset - p[0].offset); };
    if (layer_count_[size_t(l)] == 12) return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11)};
    LayerTensors<T> t{at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), nullptr, nullptr, nullptr, nullptr};
    t.router_w = at(8);
    if (layer_count_[size_t(l)] > 9) t.router_noise_w = at(9);
    return t;
  }
  // Held expert j (0-based among those held) of layer l, from a buffer holding the layer's experts.
  template <class T>
  ExpertTensors<T> expert_at(T* bucket, int l, int j) const {
    const ParamInfo* first = &params_[size_t(expert_first_[size_t(l)])];
    const ParamInfo* p = first + size_t(j) * kTensorsPerExpert;
    auto at = [&](int k) { return bucket + (p[k].offset - first->offset); };
    return {at(0), at(1), at(2), at(3)};
  }

 private:
  std::vector<ParamInfo> params_;
  int64_t total_ = 0;
  int tp_size_ = 1, tp_rank_ = 0;
  int64_t wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1;
  std::pair<int64_t, int64_t> range_of(int first, int count) const {
    if (first < 0 || count == 0) return {0, 0};
    const ParamInfo& last = params_[size_t(first + count - 1)];
    return {params_[size_t(first)].offset, last.offset + last.numel};
  }
  std::vector<int> layer_first_, layer_count_;    // each layer's first tensor (-1 if not held), count
  std::vector<int> expert_first_, expert_count_;  // its held experts' tensors
  int expert0_ = 0;
};

// GPT-2 initialisation: normal(0, 0.02), residual projections 0.02/√(2L), LayerNorm 1/0,
// biases 0. Each element is a pure function of (seed, tensor index, global element index), so a
// shard of a tensor initialises the same as the whole.
// `range` (default: all) limits it to flat offsets [begin, end), written to out[offset - begin]:
// a ZeRO-3 shard initialises its pieces without the whole model ever existing on one rank.
void init_params(const ParamTable& table, float* out, uint64_t seed, int real_vocab, FlatPiece range = {0, -1});

}  // namespace lattice
