#pragma once
// Causal softmax over the rows of `batch` score matrices of size s×s: row i attends to j <= i;
// entries j > i of the output are zero.
#include <cstdint>

#include "core/config.hpp"
#include "kernels/dropout.hpp"

namespace lattice {
void softmax_causal_forward(float* probs, const float* scores, int64_t batch, int64_t s);  // may alias

// The attention probabilities and their dropout in one pass over each row of the [b·a, s, s] scores
// (a = local_heads), instead of four passes over s² elements: probs = the causal softmax; with
// drop.p > 0, mask = the row's keep flags (drawn as dropout_mask_fill draws them at
// attention_mask_first) and dropped = probs · mask / (1 − p). probs and dropped are written as `dtype`
// (fp32 values or bf16 bits), each destination may be null (not wanted), and the values are bitwise
// those of softmax_causal_forward, dropout_mask_fill, dropout_forward and a conversion to dtype.
void softmax_dropout_forward(void* probs, uint8_t* mask, void* dropped, DType dtype, const float* scores,
                             int64_t local_heads, int64_t batch, int64_t s, const AttentionDropout& drop);
// dscores = probs ⊙ (dprobs − rowsum(probs ⊙ dprobs))   (may alias dprobs)
void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s);
// Its row i (of s): the code both it and the bf16 pass (kernels/bf16_fused.hpp) run.
void softmax_backward_row(float* ds, const float* dp, const float* p, int64_t i, int64_t s);
}  // namespace lattice
