#pragma once
// The bf16 activations' passes fused (issue: bf16 step speed): each is a sequence of the fp32 kernels
// followed by the narrowing of its result to bf16 (and, where a linear's bias gradient is due, the
// column sums of its fp32 gradient), done in one pass over memory instead of several, without the fp32
// intermediate where nothing else reads it. Each gives bitwise the bytes of the sequence it replaces
// (tests/unit/test_bf16_fused.cpp): the element math is the fp32 kernels' own code (their row
// functions, gelu_value/gelu_grad), narrowing is to_bf16's rule, and bias sums add each column's
// rows in order as bias_backward does.
#include <cstdint>

#include "kernels/heads.hpp"

namespace lattice {

// ---- forward ----
// x16 = bf16(x); y16 = bf16(LayerNorm(x)) with mean, rstd as layernorm_forward writes them.
void layernorm_forward_bf16(uint16_t* x16, uint16_t* y16, float* mean, float* rstd, const float* x,
                            const float* weight, const float* bias, int64_t N, int64_t C);
// split_heads of rows already narrowed (a GEMM's bf16 output, linear_forward_bf16): a copy, so the
// bits of split_heads then each of q, k, v narrowed.
void split_heads16(uint16_t* q, uint16_t* k, uint16_t* v, const uint16_t* qkv16, const HeadShape& x);
// split_heads16, then q, k, v widened (the fused attention's fp32 form reading the kept QKV rows,
// kernels/flash_attention.hpp's qkv_rows): one pass, the same bits.
void split_heads_widened(float* q, float* k, float* v, const uint16_t* qkv16, const HeadShape& x);
// merge_heads, then narrowed.
void merge_heads_bf16(uint16_t* out, const float* heads, const HeadShape& x);
// The rows [b·s, hl] widened from bf16, then unmerge_heads (the fused backward's O, kept as the
// projection's bf16 input): one pass, no fp32 copy of the rows.
void unmerge_heads_bf16(float* heads, const uint16_t* rows16, const HeadShape& x);
// act16 = bf16(gelu(pre16 widened)): the GeLU of the kept bf16 input the fc1 GEMM wrote
// (linear_forward_bf16), the value the backward's gelu' reads too.
void gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n);

// The fp32 rows the cross-entropy passes over bf16 logits widen at a time (a block of 8 rows a
// thread, at most N): the tracked bytes the planner adds to the head's transient (plan/memory_model.cpp).
int64_t ce_widened_block_bytes(int64_t N, int64_t v_local, int threads);

// ---- backward ----
// dy16 = bf16(dy [N, out]); db += dy's column sums (bias_backward).
void narrow_bias_backward(uint16_t* dy16, float* db, const float* dy, int64_t N, int64_t out);
// g = dout · gelu'(pre) (gelu_backward, pre and dout read from bf16: dout is the FC2 input gradient
// its GEMM wrote in bf16, linear_backward_input_bf16), then narrow_bias_backward of g.
// g16 may be dout16 (in place).
void gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout16, int64_t N,
                          int64_t out);
// merge_qkv_grads, then narrow_bias_backward of the [b·s, 3·hl] rows.
void merge_qkv_grads_narrow(uint16_t* dqkv16, float* db, const float* dq, const float* dk, const float* dv,
                            const HeadShape& x);
// softmax_causal_backward with probs read from bf16, its result narrowed.
void softmax_causal_backward_bf16(uint16_t* ds16, const float* dprobs, const uint16_t* probs16, int64_t batch,
                                  int64_t s);
// The cross-entropy over logits the head GEMM wrote in bf16 (logits16 [N, v_local], kept for backward
// in place of fp32 probabilities; docs/design.md §4): the forward makes each row's statistics and loss
// and writes nothing a column, and the backward makes each probability again from its bf16 logit and
// the row's maximum and sum. Every value is the bits of widening the row and running the fp32 pieces
// (kernels/vocab_shard.hpp), which the functions below do a block of rows at a time.
// ce_whole_forward's row_max, row_sum, target_logit and losses for one shard holding the whole
// vocabulary (v0 = 0); no probabilities.
void ce_whole_forward_bf16(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                           float* target_logit, const int32_t* targets, int64_t v_local, int64_t real, int64_t N);
// The vocabulary-parallel pieces: ce_shard_max_target's outputs; ce_shard_exp_sum's row sums only;
// ce_shard_normalize's losses only.
void ce_shard_max_target_bf16(float* row_max, float* target_logit, const uint16_t* logits16, const int32_t* targets,
                              int64_t v0, int64_t v_local, int64_t real, int64_t N);
void ce_shard_exp_sum_bf16(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t v_local,
                           int64_t real, int64_t N);
void ce_row_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int64_t N);
// dlogits16 = bf16((p − onehot(target − v0)) · scale), p the probabilities ce_shard_exp_sum and
// ce_shard_normalize make from the widened row with the kept (all-reduced) row_max and row_sum: the
// bits of ce_shard_backward on those probabilities, narrowed.
void ce_shard_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* row_max, const float* row_sum,
                            const int32_t* targets, int64_t v0, int64_t v_local, int64_t real, int64_t N, float scale);
// layernorm_backward with its input read from bf16.
void layernorm_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace lattice
