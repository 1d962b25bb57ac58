#pragma once
// The vocabulary-parallel embedding and cross-entropy (tensor_parallel/vocab_parallel.hpp), in the
// pieces each rank computes alone: a shard holds rows/columns [v0, v0 + v_local) of the padded
// vocabulary, `real` of them real tokens (max(0, min(v_local, v_real − v0))). The all-reduces
// between the cross-entropy's pieces are the caller's. cuda/kernels.hpp has the same pieces.
#include <cstdint>

namespace lattice {

// out[n] = wte[ids[n] − v0] if this shard holds the token, else 0.
void embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t v_local, int64_t N,
                             int64_t h);
// dwte[ids[n] − v0] += dout[n] for the tokens this shard holds, in token order (per element).
void embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t v_local,
                              int64_t N, int64_t h);
// The learned positions, for the rows of one rank's sequence slice [pos0, pos0 + s_local) of b
// sequences: x[bi, i] += wpe[pos0 + i]; and the gradient, dwpe[pos0 + i] += Σ_bi dx[bi, i] (rows
// added in sequence order, per element).
void add_positions(float* x, const float* wpe, int64_t b, int64_t s_local, int64_t pos0, int64_t h);
void position_grads(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0, int64_t h);
// 1. row_max[n] = max over the real columns (−inf if none); target_logit[n] = the target's logit if
//    this shard holds it, else 0.
void ce_shard_max_target(float* row_max, float* target_logit, const float* logits, const int32_t* targets, int64_t v0,
                         int64_t v_local, int64_t real, int64_t N);
// 2. logits[n, j] = exp(logits − row_max) on real columns, 0 on padding; row_sum[n] = their sum.
void ce_shard_exp_sum(float* row_sum, float* logits, const float* row_max, int64_t v_local, int64_t real, int64_t N);
// 3. logits /= row_sum on real columns; losses[n] = row_max + log(row_sum) − target_logit.
void ce_shard_normalize(float* logits, float* losses, const float* row_max, const float* row_sum,
                        const float* target_logit, int64_t v_local, int64_t real, int64_t N);
// 1–3 in order where one shard holds the whole vocabulary (v0 = 0): the same outputs, for a device
// that makes them in one pass (cuda/kernels.hpp).
void ce_whole_forward(float* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                      const int32_t* targets, int64_t v_local, int64_t real, int64_t N);
// dlogits = (probs − onehot(target − v0)) · scale on this shard (may alias probs).
void ce_shard_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t v_local,
                       int64_t N, float scale);

}  // namespace lattice
