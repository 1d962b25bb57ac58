#include "comm/communicator.hpp"
#include "comm/device_staging.hpp"

#include <stdexcept>
#include <string>

namespace lattice::comm {

bool Communicator::stages() const { return moves_data() && staging_active(); }

Trace::Kind trace_kind(GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return Trace::Kind::comm_tp;
    case GroupKind::dp:
    case GroupKind::expert_dp: return Trace::Kind::comm_dp;
    case GroupKind::pp: return Trace::Kind::comm_pp;
    case GroupKind::embedding: return Trace::Kind::comm_embedding;
    case GroupKind::ep: return Trace::Kind::comm_ep;
    case GroupKind::cp: return Trace::Kind::comm_cp;
    case GroupKind::model:
    case GroupKind::world: return Trace::Kind::comm_other;
  }
  return Trace::Kind::comm_other;
}

void Communicator::count(CollectiveOp op, size_t floats, int root) {
  const double payload = double(floats) * sizeof(float);
  record(op, ring_bytes_sent(op, payload, size(), rank(), root), int64_t(floats * sizeof(float)));
}

void Communicator::record(CollectiveOp op, double sent_bytes, int64_t payload_bytes) {
  if (ledger_) ledger_->record(kind_, op, sent_bytes, payload_bytes);
}

// Misuse is a programming error in the caller, not bad user input: std::logic_error.
void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size())
    throw std::logic_error(std::string(what) + ": rank " + std::to_string(peer) + " is outside the " +
                           to_string(kind_) + " group of " + std::to_string(size()));
}

size_t Communicator::chunk_of(size_t whole, size_t part, const char* what) const {
  if (whole != part * size_t(size()))
    throw std::logic_error(std::string(what) + ": " + std::to_string(whole) + " floats are not " +
                           std::to_string(size()) + " chunks of " + std::to_string(part));
  return part;
}

void Communicator::all_reduce(std::span<float> data, ReduceOp op) {
  count(CollectiveOp::all_reduce, data.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_reduce", to_string(kind_));
  if (!stages()) return do_all_reduce(data, op);
  Staged d(data, true, true);
  do_all_reduce(d.host(), op);
  d.done();
}

void Communicator::reduce_scatter(std::span<const float> input, std::span<float> output) {
  chunk_of(input.size(), output.size(), "reduce_scatter");
  count(CollectiveOp::reduce_scatter, input.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("reduce_scatter", to_string(kind_));
  if (!stages()) return do_reduce_scatter(input, output);
  Staged in(input, true, false), out(output, false, true);
  do_reduce_scatter(in.host_const(), out.host());
  out.done();
}

void Communicator::all_gather(std::span<const float> input, std::span<float> output) {
  chunk_of(output.size(), input.size(), "all_gather");
  count(CollectiveOp::all_gather, output.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_gather", to_string(kind_));
  if (!stages()) return do_all_gather(input, output);
  Staged in(input, true, false), out(output, false, true);
  do_all_gather(in.host_const(), out.host());
  out.done();
}

void Communicator::broadcast(std::span<float> data, int root) {
  check_peer(root, "broadcast");
  count(CollectiveOp::broadcast, data.size(), root);
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("broadcast", to_string(kind_));
  if (!stages()) return do_broadcast(data, root);
  Staged d(data, rank() == root, true);
  do_broadcast(d.host(), root);
  d.done();
}

void Communicator::all_to_all(std::span<const float> input, std::span<float> output) {
  if (input.size() != output.size() || input.size() % size_t(size()) != 0)
    throw std::logic_error("all_to_all: input and output must be " + std::to_string(size()) + " equal chunks");
  count(CollectiveOp::all_to_all, input.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_to_all", to_string(kind_));
  if (!stages()) return do_all_to_all(input, output);
  Staged in(input, true, false), out(output, false, true);
  do_all_to_all(in.host_const(), out.host());
  out.done();
}

// One count per group rank, none negative, their sum within the buffer; returns the sum.
size_t Communicator::check_v_counts(size_t buffer, std::span<const int> counts, const char* which) const {
  if (counts.size() != size_t(size()))
    throw std::logic_error(std::string("all_to_all_v: ") + std::to_string(counts.size()) + " " + which +
                           " for a group of " + std::to_string(size()));
  size_t sum = 0;
  for (int c : counts) {
    if (c < 0) throw std::logic_error(std::string("all_to_all_v: negative ") + which);
    sum += size_t(c);
  }
  if (sum > buffer)
    throw std::logic_error(std::string("all_to_all_v: ") + which + " sum to " + std::to_string(sum) +
                           " floats but the buffer holds " + std::to_string(buffer));
  return sum;
}

void Communicator::all_to_all_v(std::span<const float> input, std::span<const int> send_counts,
                                std::span<float> output, std::span<const int> recv_counts) {
  const size_t sent = check_v_counts(input.size(), send_counts, "send_counts");
  check_v_counts(output.size(), recv_counts, "recv_counts");
  // The one pair of counts a rank can check alone: the chunk it keeps for itself.
  if (send_counts[size_t(rank())] != recv_counts[size_t(rank())])
    throw std::logic_error("all_to_all_v: this rank sends itself " + std::to_string(send_counts[size_t(rank())]) +
                           " floats but expects " + std::to_string(recv_counts[size_t(rank())]));
  record(CollectiveOp::all_to_all, all_to_all_v_bytes_sent(send_counts, rank(), sizeof(float)),
         int64_t(sent * sizeof(float)));
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_to_all_v", to_string(kind_));
  if (!stages()) return do_all_to_all_v(input, send_counts, output, recv_counts);
  Staged in(input, true, false), out(output, true, true);  // (parts of output no chunk lands in stay as they were)
  do_all_to_all_v(in.host_const(), send_counts, out.host(), recv_counts);
  out.done();
}

void Communicator::all_to_all_counts(std::span<const int> send, std::span<int> recv) {
  if (send.size() != size_t(size()) || recv.size() != size_t(size()))
    throw std::logic_error("all_to_all_counts: send and recv must hold one count per rank of the " +
                           std::to_string(size()) + " in the group");
  record(CollectiveOp::all_to_all, double(size() - 1) * sizeof(int), int64_t(send.size() * sizeof(int)));
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_to_all_counts", to_string(kind_));
  do_all_to_all_counts(send, recv);
}

void Communicator::send(std::span<const float> data, int dest, int tag) {
  check_peer(dest, "send");
  count(CollectiveOp::send, data.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("send", to_string(kind_));
  if (!stages()) return do_send(data, dest, tag);
  Staged d(data, true, false);
  do_send(d.host_const(), dest, tag);
}

void Communicator::recv(std::span<float> data, int source, int tag) {
  check_peer(source, "recv");
  count(CollectiveOp::recv, data.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("recv", to_string(kind_));
  if (!stages()) return do_recv(data, source, tag);
  Staged d(data, false, true);
  do_recv(d.host(), source, tag);
  d.done();
}

void Communicator::probe(int source, int tag) {
  check_peer(source, "probe");
  const WaitScope wait("probe", to_string(kind_));
  do_probe(source, tag);
}

void Communicator::barrier() {
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("barrier", to_string(kind_));
  do_barrier();
}

Handle Communicator::all_reduce_async(std::span<float> data, ReduceOp op) {
  count(CollectiveOp::all_reduce, data.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_reduce", to_string(kind_));  // a backend may run it at issue (mpi_communicator.hpp)
  if (!stages()) return Handle(do_all_reduce_async(data, op), "all_reduce", to_string(kind_), trace_kind(kind_));
  Staged d(data, true, true);
  auto inner = do_all_reduce_async(d.host(), op);
  return Handle(std::make_unique<StagedPending>(std::move(inner), std::move(d), Staged({}, false, false)), "all_reduce",
                to_string(kind_), trace_kind(kind_));
}

void Communicator::check_counts(size_t whole, size_t mine, std::span<const int> counts, const char* what) const {
  size_t sum = 0;
  for (int c : counts) sum += size_t(c);
  if (counts.size() != size_t(size()) || sum != whole || size_t(counts[size_t(rank())]) != mine)
    throw std::logic_error(std::string(what) + ": chunk counts do not match the buffers");
}

Handle Communicator::reduce_scatter_v_async(std::span<const float> input, std::span<float> output,
                                            std::span<const int> counts) {
  check_counts(input.size(), output.size(), counts, "reduce_scatter_v");
  count(CollectiveOp::reduce_scatter, input.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("reduce_scatter_v", to_string(kind_));  // a backend may run it at issue (mpi_communicator.hpp)
  if (!stages())
    return Handle(do_reduce_scatter_v_async(input, output, counts), "reduce_scatter_v", to_string(kind_),
                  trace_kind(kind_));
  Staged in(input, true, false), out(output, false, true);
  auto inner = do_reduce_scatter_v_async(in.host_const(), out.host(), counts);
  return Handle(std::make_unique<StagedPending>(std::move(inner), std::move(in), std::move(out)), "reduce_scatter_v",
                to_string(kind_), trace_kind(kind_));
}

Handle Communicator::all_gather_v_async(std::span<const float> input, std::span<float> output,
                                        std::span<const int> counts) {
  check_counts(output.size(), input.size(), counts, "all_gather_v");
  count(CollectiveOp::all_gather, output.size());
  const TraceSpan span(trace_kind(kind_));
  const WaitScope wait("all_gather_v", to_string(kind_));  // a backend may run it at issue (mpi_communicator.hpp)
  if (!stages())
    return Handle(do_all_gather_v_async(input, output, counts), "all_gather_v", to_string(kind_), trace_kind(kind_));
  // In place (input at this rank's chunk of output) stays in place: output staged whole, read and written.
  const bool in_place = input.data() >= output.data() && input.data() < output.data() + output.size();
  Staged out(output, in_place, true);
  Staged in(in_place ? std::span<const float>{} : input, true, false);
  const std::span<const float> host_in =
      in_place ? std::span<const float>(out.host().data() + (input.data() - output.data()), input.size()) : in.host_const();
  auto inner = do_all_gather_v_async(host_in, out.host(), counts);
  return Handle(std::make_unique<StagedPending>(std::move(inner), std::move(in), std::move(out)), "all_gather_v",
                to_string(kind_), trace_kind(kind_));
}

Handle Communicator::send_async(std::span<const float> data, int dest, int tag) {
  check_peer(dest, "send_async");
  count(CollectiveOp::send, data.size());
  if (!stages()) return Handle(do_send_async(data, dest, tag), "send", to_string(kind_), trace_kind(kind_));
  Staged d(data, true, false);
  auto inner = do_send_async(d.host_const(), dest, tag);
  return Handle(std::make_unique<StagedPending>(std::move(inner), std::move(d), Staged({}, false, false)), "send",
                to_string(kind_), trace_kind(kind_));
}

Handle Communicator::recv_async(std::span<float> data, int source, int tag) {
  check_peer(source, "recv_async");
  count(CollectiveOp::recv, data.size());
  if (!stages()) return Handle(do_recv_async(data, source, tag), "recv", to_string(kind_), trace_kind(kind_));
  Staged d(data, false, true);
  auto inner = do_recv_async(d.host(), source, tag);
  return Handle(std::make_unique<StagedPending>(std::move(inner), std::move(d), Staged({}, false, false)), "recv",
                to_string(kind_), trace_kind(kind_));
}

}  // namespace lattice::comm
