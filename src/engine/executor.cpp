#include "engine/executor.hpp"

#include "core/trace.hpp"

namespace lattice::parallel::pipeline {

namespace {
constexpr int kActivationTag = 1, kGradientTag = 2;
}

Executor::Executor(GPT& model, comm::Communicator& pp, ScheduleKind kind, int n_mb, const StagePartition& partition,
                   int rows, KeptBytesProbe& kept)
    : model_(model),
      pp_(pp),
      kept_(kept),
      actions_(build_schedule(kind, pp.size(), n_mb, partition.stages() / pp.size())[size_t(pp.rank())]),
      last_action_(size_t(n_mb), 0),
      partition_(partition),
      n_mb_(n_mb),
      rows_(rows) {
  // A weight pass reads no tokens: a micro-batch's rows are freed after its last other action.
  for (size_t i = 0; i < actions_.size(); ++i)
    if (actions_[i].pass != Pass::backward_weight) last_action_[size_t(actions_[i].micro_batch)] = i;
}

float* Executor::free_send_buffer(size_t bytes) {
  for (size_t k = 0; k < sends_.size(); ++k) {
    SendSlot& slot = sends_[(size_t(next_send_) + 1 + k) % sends_.size()];  // oldest first
    if (slot.pending.test() && slot.message.bytes() == bytes) {
      next_send_ = int((size_t(next_send_) + 1 + k) % sends_.size());
      return static_cast<float*>(slot.message.data());
    }
  }
  sends_.push_back({TrackedBuffer(bytes, kNoLayer, "send", MemoryTracker::of(MemoryCategory::pipeline)), {}});
  next_send_ = int(sends_.size()) - 1;
  return static_cast<float*>(sends_.back().message.data());
}

std::pair<int, int> Executor::layers_of(int stage) const {
  return {partition_.begin(stage), partition_.end(stage)};
}

bool Executor::owns_layer(int layer) const {
  for (const Action& a : actions_) {
    const auto [l0, l1] = layers_of(a.stage);
    if (layer >= l0 && layer < l1) return true;
  }
  return false;
}

double Executor::run(uint64_t step, float loss_scale, const MicroBatchSource& source) noexcept {
  const ModelConfig& c = model_.config();
  const int64_t s = c.seq_len, tokens = int64_t(rows_) * s;
  const int64_t act = int64_t(rows_) * model_.s_local(s) * c.hidden;
  struct Rows {
    tracked_vector<int32_t, MemoryCategory::data> inputs, targets;
    int64_t first_row = -1;
  };
  std::vector<Rows> batches(static_cast<size_t>(n_mb_));
  float* in = received_.ensure(act);
  double loss = 0.0;
  for (size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    for (SendSlot& slot : sends_) slot.pending.test();  // progress, and completion, of the sends in flight
    const auto [l0, l1] = layers_of(a.stage);
    if (a.pass == Pass::backward_weight) {  // no tokens, no messages: the pending parameter gradients
      TraceSpan span(Trace::Kind::backward_weight, a.micro_batch, a.chunk, int64_t(step));
      model_.backward_weight_chunk(a.micro_batch, l0, l1);
      continue;
    }
    Rows& r = batches[size_t(a.micro_batch)];
    if (r.first_row < 0) {
      r.inputs.resize(size_t(tokens)), r.targets.resize(size_t(tokens));
      r.first_row = source(a.micro_batch, r.inputs.data(), r.targets.data());
    }
    const MicroBatch mb{r.inputs.data(), r.targets.data(), rows_, r.first_row};
    const bool forward = a.pass == Pass::forward;
    const int tag = forward ? kActivationTag : kGradientTag;
    if (a.recv_from != kNoPeer) {
      TraceSpan span(Trace::Kind::receive, a.micro_batch, a.chunk, int64_t(step));
      pp_.recv({in, size_t(act)}, a.recv_from, tag);
    }
    float* out = a.send_to != kNoPeer ? free_send_buffer(size_t(act) * sizeof(float)) : nullptr;
    {
      const Trace::Kind kind = forward                            ? Trace::Kind::forward
                               : a.pass == Pass::backward_input    ? Trace::Kind::backward_input
                                                                  : Trace::Kind::backward;
      TraceSpan span(kind, a.micro_batch, a.chunk, int64_t(step));
      if (forward) {
        kept_.before_forward(l0, l1);
        loss += model_.forward_chunk(mb, a.micro_batch, step, true, s, l0, l1, in, out);
        kept_.after_forward(l0, l1);
      } else if (a.pass == Pass::backward_input) {
        model_.backward_input_chunk(mb, a.micro_batch, step, loss_scale, s, l0, l1, in, out);
      } else {
        model_.backward_chunk(mb, a.micro_batch, step, loss_scale, s, l0, l1, in, out);
      }
    }
    if (out) sends_[size_t(next_send_)].pending = pp_.send_async({out, size_t(act)}, a.send_to, tag);
    if (i == last_action_[size_t(a.micro_batch)]) r = Rows{};  // its tokens are not read again here
  }
  TraceSpan span(Trace::Kind::send, -1, -1, int64_t(step));
  for (SendSlot& slot : sends_) slot.pending.wait();
  return loss;
}

}  // namespace lattice::parallel::pipeline
