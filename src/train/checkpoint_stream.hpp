#pragma once
// Streaming a model-shaped array (weights, or one optimizer element state) from the ranks that hold
// its pieces into one safetensors file written by world rank 0, one tensor at a time: the writer
// holds one whole tensor and one message beyond its own states, the others nothing beyond theirs
// (docs/design.md §14, "Checkpoints stream").
#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"
#include "comm/distributed.hpp"
#include "engine/model_states.hpp"
#include "model/params.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

// Where the writer's whole tensors go, in file order: a file being written (WriterSink), or a host
// copy a background thread writes later (train/background_save.hpp).
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  virtual void append(const std::string& name, const float* values, size_t bytes) = 0;
};
class WriterSink final : public TensorSink {
 public:
  explicit WriterSink(checkpoint::SafetensorsWriter& out) : out_(out) {}
  void append(const std::string& name, const float* values, size_t bytes) override { out_.append(name, values, bytes); }

 private:
  checkpoint::SafetensorsWriter& out_;
};

class CheckpointStream {
 public:
  // `local`: this rank's parameter table (its TP shard of its stage's tensors); `dist` null: one process.
  CheckpointStream(const ModelConfig& config, const ParamTable& local, comm::Distributed* dist);
  // Collective over the world. `pieces`: what this rank contributes (ModelStates::save_pieces);
  // `out`: the file on world rank 0 (null on the others), whose next tensors are the model's under
  // `prefix`, in table order.
  void write(const std::string& prefix, const std::vector<parallel::ModelStates::SavePiece>& pieces, TensorSink* out);
  void write(const std::string& prefix, const std::vector<parallel::ModelStates::SavePiece>& pieces,
             checkpoint::SafetensorsWriter* out) {
    if (!out) return write(prefix, pieces, static_cast<TensorSink*>(nullptr));
    WriterSink sink(*out);
    write(prefix, pieces, &sink);
  }

 private:
  struct Span {
    int64_t begin = 0, end = 0;  // elements of the local shard of one whole tensor
  };
  // For each tensor of the whole model: which of its local elements this rank sends.
  std::vector<Span> spans_of(const std::vector<parallel::ModelStates::SavePiece>& pieces) const;

  ModelConfig config_;
  const ParamTable& local_;
  comm::Distributed* dist_;
  ParamTable whole_;
  std::vector<int> local_index_;  // [whole tensor] → index in local_ (-1: not held here)
  std::vector<ParamTable> tp_tables_;  // [tp rank]: every tensor's shard on that TP rank
  ScratchArray<float> tensor_{MemoryCategory::checkpoint_io, "checkpoint/tensor"};
  ScratchArray<float> message_{MemoryCategory::checkpoint_io, "checkpoint/message"};
  // A device whose memory the host cannot address: each run of local values comes to the host here
  // before it is sent or placed (one message's worth at a time).
  ScratchArray<float> from_device_{MemoryCategory::checkpoint_io, "checkpoint/from_device"};
  const float* on_host(const float* values, int64_t n);
};

}  // namespace lattice
