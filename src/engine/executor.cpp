#include "engine/executor.hpp"

#include <deque>

#include "core/trace.hpp"

namespace lattice::parallel::pipeline {

namespace {
constexpr int kActivationTag = 1, kGradientTag = 2;
}

Executor::Executor(GPT& model, comm::Communicator& pp, ScheduleKind kind, int n_mb, int m, int rows,
                   KeptBytesProbe& kept)
    : model_(model), pp_(pp), kept_(kept), actions_(build_schedule(kind, pp.size(), n_mb, m)[size_t(pp.rank())]),
      n_mb_(n_mb), m_(m), rows_(rows) {}

std::pair<int, int> Executor::layers_of(int stage) const {
  const int per_stage = model_.config().layers / (pp_.size() * m_);
  return {stage * per_stage, (stage + 1) * per_stage};
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
    std::vector<int32_t> inputs, targets;
    int64_t first_row = -1;
  };
  std::vector<Rows> batches(static_cast<size_t>(n_mb_));
  std::vector<float> in(static_cast<size_t>(act)), out(static_cast<size_t>(act));
  std::deque<std::vector<float>> outgoing;  // kept alive until their sends complete
  std::vector<comm::Handle> sends;
  double loss = 0.0;
  for (const Action& a : actions_) {
    Rows& r = batches[size_t(a.micro_batch)];
    if (r.first_row < 0) {
      r.inputs.resize(size_t(tokens)), r.targets.resize(size_t(tokens));
      r.first_row = source(a.micro_batch, r.inputs.data(), r.targets.data());
    }
    const MicroBatch mb{r.inputs.data(), r.targets.data(), rows_, r.first_row};
    const auto [l0, l1] = layers_of(a.stage);
    const bool forward = a.pass == Pass::forward;
    const int tag = forward ? kActivationTag : kGradientTag;
    if (a.recv_from != kNoPeer) {
      TraceSpan span(Trace::Kind::receive, a.micro_batch, a.chunk, int64_t(step));
      pp_.recv({in.data(), in.size()}, a.recv_from, tag);
    }
    {
      TraceSpan span(forward ? Trace::Kind::forward : Trace::Kind::backward, a.micro_batch, a.chunk, int64_t(step));
      if (forward) {
        kept_.before_forward(l0, l1);
        loss += model_.forward_chunk(mb, a.micro_batch, step, true, s, l0, l1, in.data(), out.data());
        kept_.after_forward(l0, l1);
      } else {
        model_.backward_chunk(mb, a.micro_batch, step, loss_scale, s, l0, l1, in.data(), out.data());
      }
    }
    if (a.send_to != kNoPeer) {
      outgoing.push_back(out);
      sends.push_back(pp_.send_async({outgoing.back().data(), outgoing.back().size()}, a.send_to, tag));
    }
  }
  TraceSpan span(Trace::Kind::send, -1, -1, int64_t(step));
  for (auto& h : sends) h.wait();
  return loss;
}

}  // namespace lattice::parallel::pipeline
