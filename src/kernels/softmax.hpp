#pragma once
// Causal softmax over the rows of `batch` score matrices of size s×s: row i attends to j <= i;
// entries j > i of the output are zero.
#include <cstdint>

namespace lattice {
void softmax_causal_forward(float* probs, const float* scores, int64_t batch, int64_t s);  // may alias
// dscores = probs ⊙ (dprobs − rowsum(probs ⊙ dprobs))   (may alias dprobs)
void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s);
}  // namespace lattice
