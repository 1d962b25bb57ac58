#pragma once
// Optimizers over the pieces of the flat parameter buffer this rank updates (the whole buffer, or
// its ZeRO shard: one piece per bucket). Each optimizer keeps
//  - element states (Adam's moments, SM3's momentum): one value per owned element, laid out over
//    the owned pieces in order, so a ZeRO shard keeps 1/N_d of them;
//  - tensor states (Adafactor's row and column factors, SM3's cover accumulators): small vectors in
//    whole-tensor coordinates, identical on every rank that holds the tensor (their partial sums
//    are reduced over the TP group and the ZeRO shard group).
// Weight decay is decoupled and applies only to matrices and embeddings (ParamInfo::decay).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "model/params.hpp"
#include "optim/offloaded_states.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

struct OptimizerConfig {
  std::string kind = "adamw";  // adamw | adafactor | sm3
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  // Adafactor (Shazeer & Stern 2018, no momentum): β2_t = 1 − t^decay_rate, update clipped to RMS d.
  double adafactor_decay_rate = -0.8, adafactor_eps1 = 1e-30, adafactor_clip = 1.0;
  std::string offload_dir;  // --offload-optimizer: AdamW's moments kept on disk there (optim/offloaded_states.hpp)
  // --offload-params (ZeRO-3, fp32): the weights' shard is a third state of the same file, ahead of
  // the moments; ModelStates reads each bucket's piece from it before the bucket's gather.
  bool offload_params = false;
};

// Where one owned piece's values (fp32 master weights) and summed gradient are in memory.
struct PieceData {
  float* master;
  const float* grad;
  uint16_t* bf16 = nullptr;  // the bf16 GEMM copy of master's values, if the update may write it
  float grad_scale = 1.0f;   // the update reads grad · grad_scale (clipping's factor)
};

// Groups whose ranks hold different parts of the same tensors: the tensor-parallel group (split
// tensors) and the group the optimizer state is sharded over (ZeRO's DP group). Null = none.
struct OptimizerGroups {
  comm::Communicator* tp = nullptr;
  comm::Communicator* shard = nullptr;
};

class Optimizer {
 public:
  struct ElementState {
    std::string prefix;  // checkpoint name prefix, e.g. "exp_avg."
    float* values;       // owned_size() values, over the owned pieces in order
  };
  struct TensorState {
    std::string name;             // checkpoint name, e.g. "exp_avg_sq_row.h.0.mlp.c_fc.weight"
    std::vector<int64_t> shape;   // whole-tensor coordinates
    float* values;
  };

  Optimizer(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
            OptimizerGroups groups);
  virtual ~Optimizer() = default;
  virtual const char* name() const = 0;
  // One update: pieces[i] holds owned()[i]'s master values and gradient. `step` counts from 1.
  virtual void update(std::span<const PieceData> pieces, double lr, int64_t step) = 0;
  virtual std::vector<ElementState> element_states() = 0;
  virtual std::vector<TensorState> tensor_states() { return {}; }
  // Bytes this optimizer's states occupy (the allocator's "optimizer" tag counts the same).
  virtual int64_t state_bytes() const = 0;
  // The file the states are offloaded to (null: in memory); with offload_params its state 0 holds
  // the fp32 weights of the owned pieces, which the update then reads and writes there.
  virtual OffloadedStates* offloaded() { return nullptr; }
  // Whether update() reads PieceData::bf16 and grad_scale: writes the bf16 copies as it updates the
  // masters and scales the gradient as it reads it (else the caller narrows and scales apart).
  virtual bool fuses_passes() const { return false; }

  const std::vector<FlatPiece>& owned() const { return owned_; }
  int64_t owned_size() const { return owned_size_; }
  const ParamTable& table() const { return table_; }

 protected:
  // A run of owned elements that belongs to one tensor: its table index, the flat range, and the
  // position of its first element in the element-state layout.
  struct Segment {
    size_t piece;
    const ParamInfo* param;
    int64_t begin, end;   // flat offsets
    int64_t state_index;  // index of `begin` in element states
  };
  const std::vector<Segment>& segments() const { return segments_; }
  // Calls fn(segment) for every segment, tensors spread over threads; the segments of one tensor
  // run in order on one thread, so per-tensor statistics are race-free and do not depend on the
  // thread count.
  template <class Fn>
  void for_each_segment_parallel(Fn&& fn) const {
    const int64_t n = int64_t(segments_by_tensor_.size());
#pragma omp parallel for schedule(dynamic)
    for (int64_t t = 0; t < n; ++t)
      for (size_t i : segments_by_tensor_[size_t(t)]) fn(segments_[i]);
  }
  const ParamTable& table_;
  OptimizerConfig config_;
  OptimizerGroups groups_;

 private:
  std::vector<FlatPiece> owned_;
  int64_t owned_size_ = 0;
  std::vector<Segment> segments_;
  std::vector<std::vector<size_t>> segments_by_tensor_;  // tensors with owned elements
};

// AdamW: two element states (exp_avg, exp_avg_sq), 8 bytes per owned parameter.
class AdamW final : public Optimizer {
 public:
  AdamW(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
        OptimizerGroups groups = {});
  const char* name() const override { return "adamw"; }
  void update(std::span<const PieceData> pieces, double lr, int64_t step) override;
  std::vector<ElementState> element_states() override;
  int64_t state_bytes() const override { return 4 * (m_.size() + v_.size()); }  // resident: 0 when offloaded
  OffloadedStates* offloaded() override { return offload_.get(); }
  bool fuses_passes() const override { return !offload_; }

 private:
  TrackedArray<float> m_, v_;
  // --offload-optimizer: m and v on disk instead, moved in units of kOffloadUnit owned elements
  // (core/offload_layout.hpp), whatever the pieces' sizes.
  std::unique_ptr<OffloadedStates> offload_;
};

// The optimizer `config.kind` names over `owned` (the whole buffer when empty).
std::unique_ptr<Optimizer> make_optimizer(const ParamTable& table, const OptimizerConfig& config,
                                          std::vector<FlatPiece> owned, OptimizerGroups groups = {});

// Global L2 norm of a gradient array (double accumulation, deterministic order).
double grad_norm(const float* grads, int64_t n);  // of the run's device's buffer

}  // namespace lattice
