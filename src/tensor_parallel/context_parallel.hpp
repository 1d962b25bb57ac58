#pragma once
// Context parallelism (docs/design.md §5.1): the group of c ranks that share one sequence, the
// load-balanced split of that sequence, and DeepSpeed-Ulysses' all-to-alls around attention.
//
// The split: a sequence of S positions is cut into 2c chunks of S/(2c); rank r holds chunks r and
// 2c−1−r, in that order, as its S/c local positions. Under a causal mask chunk k's queries see k + 1
// chunks of keys, so each rank's pair sees 2c + 1 chunks' worth: every rank does the same attention work.
//
// Ulysses (--cp-comm-type a2a): outside attention a rank holds its S/c positions of all its a heads;
// one all-to-all turns [b, a, S/c, dh] into [b, a/c, S, dh] (heads [r·a/c, (r+1)·a/c), every position
// in global order), so attention itself runs unchanged, causal mask and dropout indices global; a
// second all-to-all turns its output back. An all-to-all is a permutation, so each one's backward is
// the other applied to the gradient.
#include <algorithm>
#include <cstdint>

#include "comm/communicator.hpp"
#include "core/config.hpp"

namespace lattice::parallel {

// Which of the sequence's positions a CP rank holds. With c = 1 local position i is global position i.
struct SequenceSplit {
  int64_t S = 0;  // the whole sequence
  int c = 1, r = 0;
  int64_t chunk() const { return S / (2 * int64_t(c)); }
  int64_t local() const { return S / c; }
  int64_t global(int64_t i) const {
    if (c == 1) return i;
    const int64_t C = chunk(), k = i / C;
    return (k == 0 ? r : 2 * int64_t(c) - 1 - r) * C + i % C;
  }
  // The inverse: the local position of global position g, or −1 when another CP rank holds it.
  int64_t local_of(int64_t g) const {
    if (c == 1) return g;
    const int64_t C = chunk(), k = g / C;
    if (k != r && k != 2 * int64_t(c) - 1 - r) return -1;
    return (k == r ? 0 : C) + g % C;
  }
  // fn(local, global, n) for each run of consecutive global positions among local [first, first + n):
  // at most two, split where the rank's first chunk ends.
  template <class F>
  void runs(int64_t first, int64_t n, F&& fn) const {
    if (c == 1) return fn(first, first, n);
    const int64_t C = chunk(), end = first + n;
    for (int64_t i = first; i < end;) {
      const int64_t len = std::min(end, (i / C + 1) * C) - i;
      fn(i, global(i), len);
      i += len;
    }
  }
};

// The context-parallel group a model runs in; group == nullptr means one rank holds whole sequences.
// `comm`: how its ranks share attention, Ulysses' all-to-alls (a2a) or the ring (p2p, ring_attention.hpp).
struct ContextParallel {
  comm::Communicator* group = nullptr;
  CpComm comm = CpComm::a2a;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return group && group->size() > 1; }
  bool ulysses() const { return active() && comm == CpComm::a2a; }
  bool ring() const { return active() && comm == CpComm::p2p; }
  SequenceSplit split(int64_t S) const { return {S, size(), rank()}; }
};

// Per-head blocks around Ulysses' exchange: b rows, a heads on this rank before it (a/c after), S the
// whole sequence, dh the head size.
struct HeadBlocks {
  int64_t b = 0, a = 0, S = 0, dh = 0;
};
// [b, a, S/c, dh] at this rank's positions → [b, a/c, S, dh] of its heads at every position.
// `local` and `heads` must not overlap. Counted under the CP group's all_to_all.
void sequence_to_heads(const ContextParallel& cp, const float* local, float* heads, const HeadBlocks& x);
// The inverse: [b, a/c, S, dh] → [b, a, S/c, dh].
void heads_to_sequence(const ContextParallel& cp, const float* heads, float* local, const HeadBlocks& x);

}  // namespace lattice::parallel
