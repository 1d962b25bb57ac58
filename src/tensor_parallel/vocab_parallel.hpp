#pragma once
// Vocabulary-parallel embedding and cross-entropy (docs/design.md §5): each tensor-parallel rank holds rows
// [v0, v0 + v_local) of the (padded) vocabulary; no rank ever holds the full logits.
#include <cstdint>

#include "tensor_parallel/conjugate.hpp"

namespace lattice::parallel {

struct VocabShard {
  int64_t v0 = 0, v_local = 0;  // this rank's first row and row count
  int64_t v_real = 0;           // the real vocabulary; rows at or past it are padding
};

// out[N, h] = wte_shard[id - v0] for ids inside the shard, 0 elsewhere (the partial sum that the
// TP group then reduces).
void embedding_tokens_forward(float* out, const int32_t* ids, const float* wte_shard, const VocabShard& v,
                              int64_t N, int64_t h);
void embedding_tokens_backward(float* dwte_shard, const float* dout, const int32_t* ids, const VocabShard& v,
                               int64_t N, int64_t h);

// logits[N, v_local] (fp32) become this shard's probabilities; losses[N] get each row's loss.
// Max, sum of exponentials and the target logit are all-reduced over the TP group.
void cross_entropy_forward(const TensorParallel& tp, float* logits, float* losses, const int32_t* targets,
                           const VocabShard& v, int64_t N);
// The same over logits the head GEMM wrote in bf16 (logits16, [N, v_local]; bf16 activations), which
// are kept for backward instead of probabilities: the forward writes only each row's (all-reduced)
// maximum and sum of exponentials into kept_stats (2·N floats: N maxima, then N sums) and the losses;
// the bits of widening and calling cross_entropy_forward (kernels/bf16_fused.hpp).
void cross_entropy_forward_bf16(const TensorParallel& tp, float* kept_stats, const uint16_t* logits16, float* losses,
                                const int32_t* targets, const VocabShard& v, int64_t N);
// dlogits = (probs − onehot(target)) · scale on this shard (may alias probs).
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, const VocabShard& v,
                            int64_t N, float scale);
// The same from the kept bf16 logits and statistics, each probability made again (the bits of the fp32
// probabilities), the gradient narrowed to bf16 as it is made (the head's GEMMs read it so).
void cross_entropy_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* kept_stats,
                                 const int32_t* targets, const VocabShard& v, int64_t N, float scale);

}  // namespace lattice::parallel
