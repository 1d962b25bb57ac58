#pragma once
// Runs a pipeline schedule (schedule.hpp) on this rank's stage of the model: the action list is
// the program. Receives are blocking and posted in list order, sends are non-blocking; activations
// travel under one tag and gradients under another, and between any two ranks each kind is sent in
// the order the receiver consumes it (checked by the schedule's tests), so nothing can deadlock.
//
// What a stage holds for the pipeline (docs/design.md §6, tracked as MemoryCategory::pipeline): one
// receive buffer and a pool of send buffers, each outgoing message written by the model straight
// into a free one and freed for reuse as soon as its send completes (tested before every action), so
// the pool holds what the schedule keeps in flight, not a message per micro-batch; and each
// micro-batch's tokens (MemoryCategory::data) only from its first action on this stage to its backward.
#include <functional>
#include <map>
#include <vector>

#include "comm/communicator.hpp"
#include "core/stage_partition.hpp"
#include "model/gpt.hpp"
#include "engine/model_states.hpp"
#include "engine/schedule.hpp"
#include "tensor/kept_bytes.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel::pipeline {

// Fills micro-batch k's rows (inputs, targets: rows × seq_len) and returns its first global row.
using MicroBatchSource = std::function<int64_t(int k, int32_t* inputs, int32_t* targets)>;

class Executor {
 public:
  // `kept` observes what each forward keeps for backward.
  // `partition` gives each virtual stage's layers (its stages() = p·m).
  // `versions` (PipeDream-2BW; null otherwise): the weight and gradient versions, switched to each
  // action's global batch before it runs.
  Executor(GPT& model, comm::Communicator& pp, ScheduleKind kind, int n_mb, const StagePartition& partition,
           int rows_per_micro_batch, KeptBytesProbe& kept, ModelStates* versions = nullptr);

  // One optimizer step's forwards and backwards in `phase` (build_step_schedule); gradients
  // accumulate in the model. Returns the loss sum of the micro-batches whose last stage ran here
  // (0 on other stages). A phase that leaves backwards to the next step keeps what they need (the
  // model's kept tensors, the micro-batches' tokens) and does not wait for its sends: the last
  // gradient it sends is received in the neighbour's next step, and waiting for it here while the
  // neighbour waits in the trainer's step-end collectives would deadlock under MPI's rendezvous
  // protocol. noexcept: a failure mid-schedule terminates, and the terminate handler aborts every
  // rank at once instead of unwinding through sends that peers may never receive.
  double run(uint64_t step, float loss_scale, const MicroBatchSource& source, Phase phase = Phase::whole) noexcept;

  // Validation's forward of one micro-batch (GPT::forward_loss split into this layout's stages): the
  // virtual stages run one after another, stage k on rank k mod p, each waiting for the previous
  // one's activations, so no schedule is needed. No dropout, nothing kept. Returns the loss sum on
  // the rank of the last stage, 0 on the others. noexcept as run().
  double forward_loss(const MicroBatch& mb) noexcept;

  // The layers [l0, l1) of global virtual stage `stage`.
  std::pair<int, int> layers_of(int stage) const;
  bool owns_layer(int layer) const;
  int send_buffers() const { return int(sends_.size()); }  // the pool's size: the most sends in flight
  // This rank's list of actions in `phase` (built at its first use).
  const RankActions& actions(Phase phase);

 private:
  struct SendSlot {
    TrackedBuffer message;
    comm::Handle pending;
  };
  struct Rows {
    tracked_vector<int32_t, MemoryCategory::data> inputs, targets;
    int64_t first_row = -1;
    int backwards_left = 0;  // the chunks of this rank still to run its backward
  };
  float* free_send_buffer(size_t bytes);  // a slot whose send completed, or a new one

  GPT& model_;
  comm::Communicator& pp_;
  KeptBytesProbe& kept_;
  ScheduleKind kind_;
  std::map<Phase, RankActions> actions_;  // this rank's list of each phase run so far
  StagePartition partition_;
  int n_mb_, rows_;
  ModelStates* versions_;
  std::map<int64_t, Rows> rows_held_;  // by micro-batch over the run: tokens from its first action to its backward
  ScratchArray<float> received_{MemoryCategory::pipeline, "receive"};
  std::vector<SendSlot> sends_;
  int next_send_ = 0;  // the slot the last message went out from
};

}  // namespace lattice::parallel::pipeline
