#pragma once
// Fused causal attention for CPU (docs/design.md §3.1), FlashAttention-style: the scores QKᵀ/√dh
// are computed 64 queries × 64 keys at a time with an online softmax (running max and sum per
// query row), so no s×s tensor exists. The forward keeps only the per-row log-sum-exp; the
// backward recomputes each score tile from Q, K and it. The dropout mask on the probabilities is
// drawn element by element from the same counter-based stream the unfused path fills (§10), so
// both paths drop the same elements and compute the same function to fp32 rounding.
#include <cstdint>

#include "kernels/dropout.hpp"

namespace lattice {

// Shapes: b rows × a heads of s positions, head dimension dh; Q, K, V, O, dO are [b, a, s, dh]
// fp32, the log-sum-exp [b, a, s] fp32.
struct FlashShape {
  int64_t b = 0, a = 0, s = 0, dh = 0;
};

// out = Dropout(softmax(causal(Q·Kᵀ/√dh))) · V; lse[row] = log Σ_j exp(score_j) (the softmax's
// normaliser before dropout), what the backward needs instead of the probabilities.
void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const FlashShape& x, const AttentionDropout& drop);

// dq, dk, dv (overwritten) from dout and the forward's Q, K, V, output and log-sum-exp.
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const FlashShape& x,
                              const AttentionDropout& drop);

}  // namespace lattice
