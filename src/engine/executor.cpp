#include "engine/executor.hpp"

#include "core/trace.hpp"

namespace lattice::parallel::pipeline {

namespace {
constexpr int kActivationTag = 1, kGradientTag = 2;
}

Executor::Executor(GPT& model, comm::Communicator& pp, ScheduleKind kind, int n_mb, const StagePartition& partition,
                   int rows, KeptBytesProbe& kept, ModelStates* versions)
    : model_(model),
      pp_(pp),
      kept_(kept),
      kind_(kind),
      partition_(partition),
      n_mb_(n_mb),
      rows_(rows),
      versions_(versions) {
  actions(Phase::whole);  // validates the schedule
}

const RankActions& Executor::actions(Phase phase) {
  auto it = actions_.find(phase);
  if (it == actions_.end())
    it = actions_.emplace(phase, build_step_schedule(kind_, pp_.size(), n_mb_, partition_.stages() / pp_.size(),
                                                     phase)[size_t(pp_.rank())]).first;
  return it->second;
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
  for (const Action& a : actions_.at(Phase::whole)) {
    const auto [l0, l1] = layers_of(a.stage);
    if (layer >= l0 && layer < l1) return true;
  }
  return false;
}

double Executor::run(uint64_t step, float loss_scale, const MicroBatchSource& source, Phase phase) noexcept {
  const ModelConfig& c = model_.config();
  const int64_t s = c.seq_len, tokens = int64_t(rows_) * s;
  const int64_t act = int64_t(rows_) * model_.s_local(s) * c.hidden;
  float* in = received_.ensure(act);
  double loss = 0.0;
  for (const Action& a : actions(phase)) {
    for (SendSlot& slot : sends_) slot.pending.test();  // progress, and completion, of the sends in flight
    const auto [l0, l1] = layers_of(a.stage);
    // The micro-batch over the run: it names the model's kept state and the tokens, and its batch
    // (the step it was forwarded in) keys its randomness and picks the weight version.
    const uint64_t batch = step + uint64_t(int64_t(a.batch));
    const int64_t id = int64_t(batch) * n_mb_ + a.micro_batch;
    if (versions_) versions_->use_version(batch);
    if (a.pass == Pass::backward_weight) {  // no tokens, no messages: the pending parameter gradients
      TraceSpan span(Trace::Kind::backward_weight, a.micro_batch, a.chunk, int64_t(step));
      model_.backward_weight_chunk(id, l0, l1);
      continue;
    }
    Rows& r = rows_held_[id];
    if (r.first_row < 0) {  // only this step's micro-batches start here
      r.backwards_left = partition_.stages() / pp_.size();  // one a chunk
      r.inputs.resize(size_t(tokens)), r.targets.resize(size_t(tokens));
      r.first_row = source(a.micro_batch, r.inputs.data(), r.targets.data());
    }
    const MicroBatch mb{r.inputs.data(), r.targets.data(), rows_, r.first_row};
    const bool forward = a.pass == Pass::forward;
    const int tag = forward ? kActivationTag : kGradientTag;
    if (a.recv_from != kNoPeer) {
      TraceSpan span(Trace::Kind::receive, a.micro_batch, a.chunk, int64_t(step));
      {  // waiting for the peer to send (the bubble), apart from the copy (comm_pp, in recv)
        TraceSpan wait(Trace::Kind::receive_wait, a.micro_batch, a.chunk, int64_t(step));
        pp_.probe(a.recv_from, tag);
      }
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
        loss += model_.forward_chunk(mb, id, batch, true, s, l0, l1, in, out);
        kept_.after_forward(l0, l1);
      } else if (a.pass == Pass::backward_input) {
        model_.backward_input_chunk(mb, id, batch, loss_scale, s, l0, l1, in, out);
      } else {
        model_.backward_chunk(mb, id, batch, loss_scale, s, l0, l1, in, out);
      }
    }
    if (out) sends_[size_t(next_send_)].pending = pp_.send_async({out, size_t(act)}, a.send_to, tag);
    // Its last backward is a micro-batch's last action that reads tokens (a weight pass reads none).
    if (!forward && --r.backwards_left == 0) rows_held_.erase(id);
  }
  if (phase == Phase::first || phase == Phase::steady) return loss;  // the stream goes on: see run()'s comment
  TraceSpan span(Trace::Kind::send, -1, -1, int64_t(step));
  for (SendSlot& slot : sends_) slot.pending.wait();
  return loss;
}

double Executor::forward_loss(const MicroBatch& mb) noexcept {
  const int p = pp_.size(), me = pp_.rank(), stages = partition_.stages();
  const int64_t act = int64_t(mb.rows) * model_.s_local(model_.config().seq_len) * model_.config().hidden;
  float* in = received_.ensure(act);
  double loss = 0.0;
  for (int stage = me; stage < stages; stage += p) {
    const auto [l0, l1] = layers_of(stage);
    if (stage > 0) pp_.recv({in, size_t(act)}, (stage - 1) % p, kActivationTag);
    float* out = stage + 1 < stages ? free_send_buffer(size_t(act) * sizeof(float)) : nullptr;
    loss += model_.forward_loss_chunk(mb, l0, l1, stage > 0 ? in : nullptr, out);
    // Waited at once: the next stage's rank is blocked on this receive, and the slot is free again.
    if (out) pp_.send_async({out, size_t(act)}, (stage + 1) % p, kActivationTag).wait();
  }
  return loss;
}

}  // namespace lattice::parallel::pipeline
