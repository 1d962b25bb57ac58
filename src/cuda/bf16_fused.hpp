#pragma once
// The CUDA forms of kernels/bf16_fused.hpp: the bf16 activations' passes, each one kernel (or one
// kernel and a fixed-order column reduce) instead of the fp32 kernels followed by separate narrowing
// passes through fp32 staging. Each gives the bits of the sequence it replaces on the device (the
// same element math, the same to_bf16 rounding, the same column-sum order as bias_backward):
// lattice_cuda_check compares each with that sequence, bit for bit. Built with -DLATTICE_CUDA=ON.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels.hpp"

namespace lattice::cuda {

// ---- forward ----
// x16 = bf16(x); y16 = bf16(LayerNorm(x)); mean, rstd as layernorm_forward writes them (cuda/rows.cu).
void layernorm_forward_bf16(uint16_t* x16, uint16_t* y16, float* mean, float* rstd, const float* x, const float* weight,
                            const float* bias, int64_t N, int64_t C, cudaStream_t stream = nullptr);
// split_heads of rows already narrowed (a GEMM's bf16 output): a copy of the bits; split_heads_widened,
// the same widened (kernels/bf16_fused.hpp's); unmerge_heads of rows widened; merge_heads, narrowed.
void split_heads16(uint16_t* q, uint16_t* k, uint16_t* v, const uint16_t* qkv16, int64_t b, int64_t s, int64_t a,
                   int64_t dh, cudaStream_t stream = nullptr);
void split_heads_widened(float* q, float* k, float* v, const uint16_t* qkv16, int64_t b, int64_t s, int64_t a,
                         int64_t dh, cudaStream_t stream = nullptr);
void unmerge_heads_bf16(float* heads, const uint16_t* rows16, int64_t b, int64_t s, int64_t a, int64_t dh,
                        cudaStream_t stream = nullptr);
void merge_heads_bf16(uint16_t* out, const float* heads, int64_t b, int64_t s, int64_t a, int64_t dh,
                      cudaStream_t stream = nullptr);
// y16 = bf16(y + bf16(bias)) over rows [N, out]: the fp32 product of a GEMM that wrote no bf16 D, with
// the bias as linear_forward_bf16 takes it (rounded to bf16), in one pass.
void narrow_rows_bias(uint16_t* y16, const float* y, const float* bias, int64_t N, int64_t out,
                      cudaStream_t stream = nullptr);
// act16 = bf16(gelu(pre16 widened)).
void gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n, cudaStream_t stream = nullptr);

// ---- backward: each bias gradient is bias_backward's column sums of the fp32 values narrowed ----
// (ws: bias_backward_workspace_bytes(N, out)).
// dy16 = bf16(dy [N, out]); db += dy's column sums.
void narrow_bias_backward(uint16_t* dy16, float* db, const float* dy, int64_t N, int64_t out, Workspace ws,
                          cudaStream_t stream = nullptr);
// g = dout · gelu'(pre) with pre read from bf16; g16 = bf16(g); db += g's column sums. g16 may be
// dout16 (each element is read, then written, by one thread).
void gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout16, int64_t N, int64_t out,
                          Workspace ws, cudaStream_t stream = nullptr);
// db += the column sums of g16 [N, out] widened (a GEMM's bf16 D: the GeLU's gradient written in
// cuBLASLt's epilogue, GemmContext::gemm_bf16_dgelu), in bias_backward's order.
void bias_backward_bf16(float* db, const uint16_t* g16, int64_t N, int64_t out, Workspace ws,
                        cudaStream_t stream = nullptr);
// merge_qkv_grads into [b·s, 3·a·dh] rows, narrowed to dqkv16; db += their column sums.
void merge_qkv_grads_narrow(uint16_t* dqkv16, float* db, const float* dq, const float* dk, const float* dv, int64_t b,
                            int64_t s, int64_t a, int64_t dh, Workspace ws, cudaStream_t stream = nullptr);
// softmax_causal_backward with probs read from bf16, ds narrowed (cuda/rows.cu).
void softmax_causal_backward_bf16(uint16_t* ds16, const float* dprobs, const uint16_t* probs16, int64_t batch,
                                  int64_t s, cudaStream_t stream = nullptr);
// layernorm_backward with its input read from bf16 (ws: layernorm_backward_workspace_bytes; cuda/rows.cu).
void layernorm_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                             Workspace ws, cudaStream_t stream = nullptr);
// The cross-entropy over kept bf16 logits (kernels/bf16_fused.hpp; cuda/rows.cu): the vocabulary-
// parallel pieces reading bf16, the losses from the statistics, and the gradient with each
// probability made again from its logit and the row's kept maximum and sum, narrowed.
void ce_shard_max_target_bf16(float* row_max, float* target_logit, const uint16_t* logits16, const int32_t* targets,
                              int64_t v0, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream = nullptr);
void ce_shard_exp_sum_bf16(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t v_local,
                           int64_t real, int64_t N, cudaStream_t stream = nullptr);
void ce_row_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int64_t N,
                   cudaStream_t stream = nullptr);
void ce_shard_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* row_max,
                            const float* row_sum, const int32_t* targets, int64_t v0, int64_t v_local, int64_t real,
                            int64_t N, float scale, cudaStream_t stream = nullptr);

// ---- optimizer ----
// adamw_update of grad × grad_scale (clipping's factor, as kernels/optimizer_kernels.hpp's fused
// update takes it), and, w16 non-null, w16 = bf16(w) of the updated weights in the same pass (the bf16
// weight copy).
void adamw_update_bf16(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t n, float decay,
                       const AdamWScalars& a, float grad_scale = 1.0f, cudaStream_t stream = nullptr);

}  // namespace lattice::cuda
