#pragma once
// KeptBytesProbe: what a training forward kept for backward, read from the tracking allocator
// around each forward by the code that runs it (the trainer's loop, the pipeline executor) — the
// model's math never counts. Per transformer layer, outside the layers (embedding and head), and
// per "layer/op" tag of the first layer and the outside parts.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lattice {

class KeptBytesProbe {
 public:
  explicit KeptBytesProbe(int layers);
  // Around the forward of layers [l0, l1) of one micro-batch (with the embedding when l0 == 0 and
  // the head when l1 == layers); other micro-batches may be in flight, so it counts the change.
  void before_forward(int l0, int l1);
  void after_forward(int l0, int l1);

  const std::vector<int64_t>& per_layer() const { return per_layer_; }
  int64_t outside() const { return embedding_ + head_; }
  const std::map<std::string, int64_t>& by_op() const { return by_op_; }
  // What each layer's last forward kept, by op ("fc1_input" ...): sizes that depend on the data,
  // such as an MoE layer's routed tokens, are read back from them.
  const std::vector<std::map<std::string, int64_t>>& layer_ops() const { return layer_ops_; }

 private:
  int layers_;
  std::vector<int64_t> per_layer_, before_;  // before_: layers, then embedding, head
  int64_t embedding_ = 0, head_ = 0;
  std::map<std::string, int64_t> by_op_, ops_before_;
  std::vector<std::map<std::string, int64_t>> layer_ops_;
};

}  // namespace lattice
