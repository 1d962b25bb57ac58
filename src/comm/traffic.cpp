#include "comm/traffic.hpp"

namespace lattice::comm {

const char* to_string(GroupKind k) {
  switch (k) {
    case GroupKind::tp: return "tp";
    case GroupKind::dp: return "dp";
    case GroupKind::pp: return "pp";
    case GroupKind::embedding: return "embedding";
    case GroupKind::model: return "model";
    case GroupKind::world: return "world";
    case GroupKind::ep: return "ep";
    case GroupKind::expert_dp: return "expert_dp";
    case GroupKind::cp: return "cp";
  }
  return "?";
}

const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::all_to_all: return "all_to_all";
    case CollectiveOp::send: return "send";
    case CollectiveOp::recv: return "recv";
  }
  return "?";
}

const char* ring_formula(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "2(t-1)/t·n";
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_gather:
    case CollectiveOp::all_to_all: return "(t-1)/t·n";
    case CollectiveOp::broadcast: return "n (0 on the ring's last rank)";
    case CollectiveOp::send: return "n";
    case CollectiveOp::recv: return "0";
  }
  return "?";
}

double ring_bytes_sent(CollectiveOp op, double payload, int size, int rank, int root) {
  if (size <= 1 && op != CollectiveOp::send) return 0;
  const double t = size;
  switch (op) {
    case CollectiveOp::all_reduce: return 2.0 * (t - 1) * payload / t;
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_gather:
    case CollectiveOp::all_to_all: return (t - 1) * payload / t;
    case CollectiveOp::broadcast: {
      const int position = ((rank - root) % size + size) % size;  // 0 = root, size-1 = last hop
      return position == size - 1 ? 0 : payload;
    }
    case CollectiveOp::send: return payload;
    case CollectiveOp::recv: return 0;
  }
  return 0;
}

double all_to_all_v_bytes_sent(std::span<const int> send_counts, int rank, size_t element_bytes) {
  double elements = 0;
  for (size_t r = 0; r < send_counts.size(); ++r)
    if (int(r) != rank) elements += send_counts[r];
  return elements * double(element_bytes);
}

void TrafficLedger::record(GroupKind kind, CollectiveOp op, double sent_bytes, int64_t payload_bytes) {
  TrafficEntry& e = entries_[size_t(kind)][size_t(op)];
  e.calls += 1;
  e.sent_bytes += sent_bytes;
  e.payload_bytes += payload_bytes;
}

TrafficEntry TrafficLedger::total(GroupKind kind) const {
  TrafficEntry sum;
  for (const TrafficEntry& e : entries_[size_t(kind)]) {
    sum.calls += e.calls;
    sum.sent_bytes += e.sent_bytes;
    sum.payload_bytes += e.payload_bytes;
  }
  return sum;
}

TrafficLedger TrafficLedger::since(const TrafficLedger& earlier) const {
  TrafficLedger out = *this;
  for (size_t k = 0; k < entries_.size(); ++k)
    for (size_t o = 0; o < entries_[k].size(); ++o) {
      TrafficEntry& e = out.entries_[k][o];
      const TrafficEntry& before = earlier.entries_[k][o];
      e.calls -= before.calls;
      e.sent_bytes -= before.sent_bytes;
      e.payload_bytes -= before.payload_bytes;
    }
  return out;
}

}  // namespace lattice::comm
