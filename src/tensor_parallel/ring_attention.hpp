#pragma once
// Ring attention (--cp-comm-type p2p, docs/design.md §5.1): causal attention of the sequence that a
// context-parallel group shares, each rank keeping only its own S/c positions of Q, K and V.
//
// Rank r holds chunks r and 2c−1−r (SequenceSplit). In step t = 0 … c−1 it holds the K and V of rank
// (r − t) mod c and computes its queries' blocks against them (FlashBlock: global positions give the
// causal mask and the dropout bits, so the result is one rank's), while the K and V it holds travel
// on to rank r + 1 and the next arrive from r − 1. Each block's output is merged into the running
// one by their log-sum-exps. Every step computes two chunk × chunk blocks of keys behind the queries
// (the diagonal step two half blocks and one whole), so the ranks' work is even.
//
// Backward: the K and V travel the ring again, now with the partial sums of their dK and dV, which
// each rank adds its queries' share to before passing them on; after c steps they are home. Every
// transfer of step t is in flight while step t's blocks compute.
//
// The buffers, kept across steps under communication (analysis/memory_categories.cpp counts them):
// two K, V pairs (one arriving while the other computes), two dK, dV partial sums (one being made
// while the last one leaves) and the one arriving: 10 of a rank's b·a·(S/c)·dh elements.
#include "comm/communicator.hpp"
#include "kernels/dropout.hpp"
#include "tensor_parallel/context_parallel.hpp"

namespace lattice::parallel {

// q, k, v, out: [b, a, S/c, dh] at this rank's positions (a: its heads); lse: [b, a, S/c].
void ring_attention_forward(const ContextParallel& cp, float* out, float* lse, const float* q, const float* k,
                            const float* v, const HeadBlocks& x, const AttentionDropout& drop);
// dq, dk, dv (overwritten) at this rank's positions, from dout and the forward's q, k, v, out, lse.
void ring_attention_backward(const ContextParallel& cp, float* dq, float* dk, float* dv, const float* dout,
                             const float* q, const float* k, const float* v, const float* out, const float* lse,
                             const HeadBlocks& x, const AttentionDropout& drop);

}  // namespace lattice::parallel
