#pragma once
// What happens to the gradient a rank holds once it is reduced — the whole buffer, or its ZeRO
// pieces — before the optimizer reads it: the tied embedding summed over the embedding group,
// sequence-parallel partial sums completed over TP, the global norm, clipping.
#include <vector>

#include "comm/communicator.hpp"
#include "model/params.hpp"

namespace lattice::parallel {

// Flat pieces of the gradient and where each one's values are.
struct OwnedGrads {
  std::vector<FlatPiece> pieces;
  std::vector<float*> data;
};

// Calls fn(values, n) on every held part of the flat range [begin, end) (every rank of a group
// holding the same pieces makes the same calls, so fn may run a collective).
template <class Fn>
void for_each_owned(const OwnedGrads& g, int64_t begin, int64_t end, Fn&& fn) {
  for (size_t i = 0; i < g.pieces.size(); ++i) {
    const int64_t b = std::max(begin, g.pieces[i].begin), e = std::min(end, g.pieces[i].end);
    if (b < e) fn(g.data[i] + (b - g.pieces[i].begin), e - b);
  }
}

// Under sequence parallelism each TP rank saw only its sequence shard's part of the replicated
// tensors' gradients (ParamInfo::sequence_partial): sum them over TP.
void finish_sequence_parallel(const ParamTable& table, comm::Communicator& tp, const OwnedGrads& g);

// Global L2 norm over the whole model: TP shards summed over `tp`, replicated tensors once; ZeRO
// pieces summed over `shard`; without ZeRO, experts over the expert-parallel group `ep` (each rank
// holds its own); pipeline stages over `pp`, the tied embedding counted by the stage with count_wte
// only. Null groups are skipped.
double global_grad_norm(const ParamTable& table, const OwnedGrads& g, comm::Communicator* tp,
                        comm::Communicator* shard, comm::Communicator* pp, bool count_wte,
                        comm::Communicator* ep = nullptr);

void scale_grads(const OwnedGrads& g, float factor);
// Whether every value held is finite (fp16's overflow check, this rank only).
bool all_finite(const OwnedGrads& g);

}  // namespace lattice::parallel
