#pragma once
// Routing under context parallelism (docs/design.md §5.1, §12): a CP rank holds s/c positions of each
// row, but capacity, dropping and the auxiliary loss are decided over the whole micro-batch. So every
// CP rank all-gathers the router logits of the micro-batch (N·E floats, small beside the activations),
// routes all N tokens exactly as one rank does, and keeps the assignments of its own positions. Its
// backward takes the whole micro-batch's logit gradients and keeps its own rows: each row's gradient
// reads only that row's gates and the group's statistics, which every CP rank holds alike.
#include <cstdint>

#include "moe/router.hpp"
#include "tensor/memory_tracker.hpp"
#include "tensor_parallel/context_parallel.hpp"

namespace lattice::moe {

// This CP rank's tokens of a micro-batch of `rows` rows of split.S positions: local token n (row
// n / (S/c), position n mod S/c) is micro-batch token row·S + split.global(n mod S/c).
struct LocalTokens {
  parallel::SequenceSplit split;
  int64_t rows = 0;
  int64_t count() const { return rows * split.local(); }
  int64_t full(int64_t n) const {
    const int64_t sl = split.local();
    return n / sl * split.S + split.global(n % sl);
  }
  // The local index of micro-batch token f, or −1 when another CP rank holds it.
  int64_t local_of(int64_t f) const;
};

// Each CP rank's `parts` blocks of [count, width] floats (in `local`, one after another) all-gathered
// into `full[p]`, [rows·S, width] each, in micro-batch order. `staging` receives the gather.
void gather_tokens(const parallel::ContextParallel& cp, const LocalTokens& t, const float* local, int parts,
                   int64_t width, float* const* full, tracked_vector<float, MemoryCategory::workspaces>& staging);

// Keeps the assignments of this rank's tokens, renumbered to local tokens (the dispatch order stays
// expert-major, tokens ascending), and sets `load` to this rank's assignments per expert.
void keep_local(Routing& r, const LocalTokens& t);

}  // namespace lattice::moe
