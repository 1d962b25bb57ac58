#pragma once
// Bytes each rank sends, per group kind and collective, counted the way docs/design.md §5 counts them
// (ring algorithm) next to the raw payload n. Pure bookkeeping, no MPI: every Communicator
// backend records into the process's ledger, and `--comm-report` / the JSON summary read it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace lattice::comm {

// dp also counts the DP-with-CP group (gradient reductions); cp is the context-parallel group's
// all-to-alls around attention.
enum class GroupKind { tp, dp, pp, embedding, model, world, ep, expert_dp, cp };
inline constexpr int kGroupKinds = 9;
const char* to_string(GroupKind k);  // "tp", "dp", "pp", "embedding", "model", "world", "ep", "expert_dp", "cp"

enum class CollectiveOp { all_reduce, reduce_scatter, all_gather, broadcast, all_to_all, send, recv };
inline constexpr int kCollectiveOps = 7;
const char* to_string(CollectiveOp op);   // "all_reduce", ...
const char* ring_formula(CollectiveOp op);  // "2(t-1)/t·n", "(t-1)/t·n", "n", ... for reports

// Bytes this rank sends for one call moving a full tensor of `payload` bytes (n) in a group of
// `size` ranks (t), where `rank` is this rank's rank in the group and `root` the broadcast root:
//   all_reduce      2(t-1)/t·n   (ring: reduce-scatter then all-gather)
//   reduce_scatter  (t-1)/t·n    (n = the full input, each rank keeps n/t)
//   all_gather      (t-1)/t·n    (n = the full output)
//   all_to_all      (t-1)/t·n    (the chunk a rank keeps for itself is not sent)
//   broadcast       n on every rank of the pipelined ring but the last, 0 on that one
//   send n, recv 0
double ring_bytes_sent(CollectiveOp op, double payload, int size, int rank = 0, int root = 0);

// An uneven all-to-all has no ring estimate: its bytes are exact, every chunk but the one `rank`
// keeps for itself, send_counts[r] elements of `element_bytes` each.
double all_to_all_v_bytes_sent(std::span<const int> send_counts, int rank, size_t element_bytes);

struct TrafficEntry {
  int64_t calls = 0;
  double sent_bytes = 0;      // ring accounting above
  int64_t payload_bytes = 0;  // sum of n
};

// Counters for one process. Not thread-safe: collectives are issued from one thread
// (MPI_THREAD_FUNNELED). Copy it to take a snapshot; `since` gives the traffic in between.
class TrafficLedger {
 public:
  void record(GroupKind kind, CollectiveOp op, double sent_bytes, int64_t payload_bytes);
  void reset() { entries_ = {}; }  // e.g. at the start of every step

  const TrafficEntry& entry(GroupKind kind, CollectiveOp op) const {
    return entries_[size_t(kind)][size_t(op)];
  }
  TrafficEntry total(GroupKind kind) const;  // summed over the ops of one group kind
  TrafficLedger since(const TrafficLedger& earlier) const;

 private:
  std::array<std::array<TrafficEntry, kCollectiveOps>, kGroupKinds> entries_{};
};

}  // namespace lattice::comm
