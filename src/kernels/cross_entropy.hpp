#pragma once
// Softmax cross-entropy on fp32 logits of N rows × Vp (padded) columns; only the first V columns
// are real tokens, the padding is never predicted.
#include <cstdint>

namespace lattice {
// Overwrites logits with probabilities (padding set to 0) and writes each row's loss.
void cross_entropy_forward(float* logits_to_probs, float* losses, const int32_t* targets, int64_t N, int64_t V,
                           int64_t Vp);
// dlogits = (probs − onehot(target)) · scale   (may alias probs)
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t Vp,
                            float scale);
}  // namespace lattice
