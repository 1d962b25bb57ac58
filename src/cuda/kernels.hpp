#pragma once
// The CUDA forms of the CPU's element-wise kernels (src/kernels, tensor/bf16, the vocabulary-parallel
// cross-entropy's pieces, the optimizer's kernels): the same signatures and semantics, with device
// pointers and a stream. Each is deterministic: no floating-point atomics, every reduction in a fixed
// order, so a run repeats itself bit for bit. Where a CPU kernel adds in a fixed sequential order
// (embedding backward, per element) the device adds in that order too; where the CPU reduces in
// vector lanes (LayerNorm's row sums, softmax) the device reduces in its own fixed tree, within
// rounding of the CPU (docs/gpu-kernels.md: what lattice_cuda_check compares, and the tolerances).
//
// Built only with -DLATTICE_CUDA=ON. docs/gpu-runs.md says which of these have run on a GPU; the
// GEMMs are in cuda/gemm.hpp, the fused attention in cuda/flash_attention.hpp.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/config.hpp"
#include "core/host_device.hpp"
#include "kernels/dropout.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "random/philox.hpp"

namespace lattice::cuda {

// Scratch memory a kernel needs besides its operands (device memory the caller owns; the backend
// seam will take it from the tracking allocator). `bytes` must be at least what the kernel's
// *_workspace_bytes() asks for.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// ---- embedding (kernels/embedding.hpp) ----
void embedding_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t b, int64_t s,
                       int64_t h, cudaStream_t stream = nullptr);
// Accumulates into dwte [vocab, h] and dwpe [s, h]. Deterministic: the tokens are sorted by id (a
// stable radix sort, so equal ids keep their order) and each (row, column) of dwte adds its tokens'
// gradients in token order, as the CPU does; dwpe's (position, column) adds its rows in order.
size_t embedding_backward_workspace_bytes(int64_t b, int64_t s, int64_t vocab);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t b, int64_t s,
                        int64_t h, int64_t vocab, Workspace ws, cudaStream_t stream = nullptr);

// The vocabulary-parallel embedding's pieces (kernels/vocab_shard.hpp): a shard holds rows
// [v0, v0 + v_local) of the padded vocabulary. Forward: out[n] = wte[ids[n] − v0] or 0. Backward:
// dwte[ids[n] − v0] += dout[n] for the tokens the shard holds, each row's tokens in token order (the
// ids sorted stably, as embedding_backward), the same additions in the same order as the CPU.
void embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t v_local, int64_t N,
                             int64_t h, cudaStream_t stream = nullptr);
size_t embedding_shard_backward_workspace_bytes(int64_t N, int64_t v_local);
void embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t v_local,
                              int64_t N, int64_t h, Workspace ws, cudaStream_t stream = nullptr);
// The positions of a rank's slice [pos0, pos0 + s_local) of b sequences: x += wpe rows; dwpe += Σ_bi dx,
// rows in sequence order per element (the CPU's order).
void add_positions(float* x, const float* wpe, int64_t b, int64_t s_local, int64_t pos0, int64_t h,
                   cudaStream_t stream = nullptr);
void position_grads(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0, int64_t h,
                    cudaStream_t stream = nullptr);

// ---- LayerNorm (kernels/layernorm.hpp) ----
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t stream = nullptr);
// dinp += the input gradient; dweight += Σ_rows dy·x̂, dbias += Σ_rows dy (per-chunk partial sums in
// the workspace, added in chunk order).
size_t layernorm_backward_workspace_bytes(int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C, Workspace ws,
                        cudaStream_t stream = nullptr);

// ---- GeLU, tanh form (kernels/gelu.hpp) ----
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream = nullptr);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t stream = nullptr);

// ---- bias and residual ----
// y[r, i] += bias[i] over N rows of `out` (the bias add of model/transformer_layer.cpp's
// residual_dropout_add; the CPU's linear_forward adds it inside the GEMM).
void bias_add_rows(float* y, const float* bias, int64_t N, int64_t out, cudaStream_t stream = nullptr);
// db += column sums of dy [N, out] (kernels/bias.hpp).
size_t bias_backward_workspace_bytes(int64_t N, int64_t out);
void bias_backward(float* db, const float* dy, int64_t N, int64_t out, Workspace ws, cudaStream_t stream = nullptr);
// x[i] += y[i] (the residual stream's add).
void residual_add(float* x, const float* y, int64_t n, cudaStream_t stream = nullptr);

// ---- dropout (kernels/dropout.hpp), masks from random/philox_core.hpp ----
void dropout_mask_fill(uint8_t* mask, const DropoutStream& stream_, uint64_t first_index, int64_t n, float p,
                       cudaStream_t stream = nullptr);
void dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p,
                     cudaStream_t stream = nullptr);
void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p,
                      cudaStream_t stream = nullptr);

// ---- causal softmax with the attention dropout (kernels/softmax.hpp) ----
void softmax_causal_forward(float* probs, const float* scores, int64_t batch, int64_t s,
                            cudaStream_t stream = nullptr);
// probs, mask, dropped may each be null; probs and dropped written as `dtype` (fp32 or bf16 bits).
void softmax_dropout_forward(void* probs, uint8_t* mask, void* dropped, DType dtype, const float* scores,
                             int64_t local_heads, int64_t batch, int64_t s, const AttentionDropout& drop,
                             cudaStream_t stream = nullptr);
void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s,
                             cudaStream_t stream = nullptr);

// ---- vocabulary-parallel cross-entropy (tensor_parallel/vocab_parallel.hpp), in its three pieces ----
// A rank's shard holds columns [v0, v0 + v_local) of the padded vocabulary, `real` of them real tokens
// (max(0, min(v_local, v_real − v0))). Between the pieces the caller all-reduces row_max (max) and
// target_logit (sum), then row_sum (sum), over the tensor-parallel group, as the CPU does.
// 1. row_max[n] = max over the real columns (−inf if none); target_logit[n] = the target's logit if
//    this shard holds it, else 0.
void ce_shard_max_target(float* row_max, float* target_logit, const float* logits, const int32_t* targets,
                         int64_t v0, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream = nullptr);
// 2. logits[n, j] = exp(logits − row_max) for real columns, 0 for padding; row_sum[n] = their sum.
void ce_shard_exp_sum(float* row_sum, float* logits, const float* row_max, int64_t v_local, int64_t real, int64_t N,
                      cudaStream_t stream = nullptr);
// 3. logits /= row_sum (real columns); losses[n] = row_max + log(row_sum) − target_logit.
void ce_shard_normalize(float* logits, float* losses, const float* row_max, const float* row_sum,
                        const float* target_logit, int64_t v_local, int64_t real, int64_t N,
                        cudaStream_t stream = nullptr);
// 1–3 at once where one shard holds the whole vocabulary (v0 = 0, no all-reduce between): one
// kernel, the row in shared memory, bitwise the three pieces' outputs; where a row does not fit the
// device's shared memory (ce_whole_forward_fused false), the three pieces.
bool ce_whole_forward_fused(int64_t v_local);
void ce_whole_forward(float* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                      const int32_t* targets, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream = nullptr);
// The same over logits the head GEMM wrote in bf16 and keeps (kernels/bf16_fused.hpp): the statistics
// and losses only, the bits of widening the logits and calling ce_whole_forward; where a row does not
// fit (or is not aligned for the one-pass kernel), the bf16 pieces (cuda/bf16_fused.hpp).
void ce_whole_forward_bf16(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                           float* target_logit, const int32_t* targets, int64_t v_local, int64_t real, int64_t N,
                           cudaStream_t stream = nullptr);
// dlogits = (probs − onehot(target − v0)) · scale on this shard (may alias probs).
void ce_shard_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t v_local,
                       int64_t N, float scale, cudaStream_t stream = nullptr);
// kernels/cross_entropy.hpp's one-rank form: ce_whole_forward (scratch: 3·N floats).
size_t cross_entropy_workspace_bytes(int64_t N);
void cross_entropy_forward(float* logits_to_probs, float* losses, const int32_t* targets, int64_t N, int64_t V,
                           int64_t Vp, Workspace ws, cudaStream_t stream = nullptr);
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t Vp,
                            float scale, cudaStream_t stream = nullptr);

// ---- optimizer (kernels/optimizer_kernels.hpp) ----
void adamw_update(float* m, float* v, float* w, const float* grad, int64_t n, float decay, const AdamWScalars& a,
                  cudaStream_t stream = nullptr);
// adamw_update_bf16 of every segment in one launch (a table of each segment's blocks, copied to the
// workspace): a launch a tensor ran 148 a GPT-2 step, half of them over 768-element biases. Each
// segment four elements a thread where its pointers allow and one for the rest, as adamw_update_bf16
// does: its bits. `segments` is a host array.
size_t adamw_segments_workspace_bytes(size_t count);
void adamw_update_segments(const AdamWSegment* segments, size_t count, const AdamWScalars& a, Workspace ws,
                           cudaStream_t stream = nullptr);
// *out = Σ grads[i]² in double: a fixed grid of blocks each summing fixed slices, the block sums added
// in block order by one block (deterministic for any n).
size_t grad_sum_squares_workspace_bytes();
void grad_sum_squares(double* out, const float* grads, int64_t n, Workspace ws, cudaStream_t stream = nullptr);
// The sums of squares of `count` pieces at once (the global norm's tensors): sums[i] (device) =
// Σ pieces[i].data[k]² in double, by two launches for all the pieces (one a piece-block of partial
// sums, one a piece adding its partials), where a launch pair a piece ran ~300 launches a GPT-2
// step. Each piece's partition into blocks depends on its size alone (at most 1024 blocks, at least
// 2048 elements a block), so its bits repeat and do not depend on the other pieces. `pieces` is a host
// array (kernels/optimizer_kernels.hpp's GradPiece); the call copies it to the workspace.
size_t grad_sums_squares_workspace_bytes(size_t count, const GradPiece* pieces);
void grad_sums_squares(double* sums, const GradPiece* pieces, size_t count, Workspace ws,
                       cudaStream_t stream = nullptr);
// A fingerprint of `bytes` bytes of device memory, to tell whether two outputs hold the same bits
// without a second copy (GemmContext's tuner): hash = Σ mix(mix(i) ^ wᵢ) mod 2⁶⁴ over the 32-bit words
// wᵢ (a last partial word zero-padded), mix splitmix64's finalizer (a bijection, so for each i two
// different words give different terms); moved_words counts the words that differ from `against`'s
// (the same bytes of another buffer, 4-byte aligned too; null: from 0). Integer sums: the same result
// in any order. Synchronizes the stream (the sums come back to the host).
LATTICE_HOST_DEVICE inline uint64_t splitmix64_final(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Word i's term of the hash (the kernel's, the host's tail, lattice_cuda_check's reference).
LATTICE_HOST_DEVICE inline uint64_t bits_fingerprint_term(uint64_t i, uint32_t w) {
  return splitmix64_final(splitmix64_final(i) ^ w);
}
struct BitsFingerprint {
  uint64_t hash = 0, moved_words = 0;
  bool operator==(const BitsFingerprint& o) const { return hash == o.hash && moved_words == o.moved_words; }
};
size_t bits_fingerprint_workspace_bytes();
BitsFingerprint bits_fingerprint(const void* data, size_t bytes, Workspace ws, cudaStream_t stream = nullptr,
                                 const void* against = nullptr);
// grads *= factor (clipping; optim's scale_grads).
void scale_grads(float* grads, int64_t n, float factor, cudaStream_t stream = nullptr);

// ---- bf16 (tensor/bf16.hpp): the same rounding (nearest even, NaN kept quiet, subnormals to zero) ----
void to_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream = nullptr);
void from_bf16(const uint16_t* src, float* dst, int64_t n, cudaStream_t stream = nullptr);
// dst += src through fp32, one rounding (HalfFormat::accumulate's bf16 form).
void bf16_accumulate(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream = nullptr);

// ---- fp16 (tensor/half.hpp's HalfFormat{fp16 = true}): the CPU's _Float16 rounding, bit for bit ----
// (cuda/fp16_bits.hpp: nearest even, fp16 subnormals kept, overflow to inf, NaN kept quiet.)
void to_fp16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream = nullptr);      // narrow
void from_fp16(const uint16_t* src, float* dst, int64_t n, cudaStream_t stream = nullptr);    // widen
// dst += src through fp32, one rounding (HalfFormat::accumulate).
void fp16_accumulate(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream = nullptr);

// ---- fp16 loss scaling (train/trainer.cpp's unscale, engine/owned_grads.cpp's all_finite) ----
// *flag = 1 if any of grads[0, n) is an inf or NaN; *flag is left as it is otherwise, so one flag
// (zeroed by the caller) collects several pieces, as all_finite does. Threads that find one store 1:
// an integer store of one value, the same result in any order (no atomics needed).
void grads_nonfinite(int32_t* flag, const float* grads, int64_t n, cudaStream_t stream = nullptr);
// grads *= float(1.0 / loss_scale), the trainer's unscale of a clean step (scale_grads's product).
void unscale_grads(float* grads, int64_t n, double loss_scale, cudaStream_t stream = nullptr);

// ---- attention's head layout (model/attention.cpp), a = this rank's heads, hl = a·dh ----
// [b·s, 3·hl] rows (q | k | v, head-major within each) → q, k, v [b, a, s, dh].
void split_heads(float* q, float* k, float* v, const float* qkv, int64_t b, int64_t s, int64_t a, int64_t dh,
                 cudaStream_t stream = nullptr);
// [b, a, s, dh] → [b·s, hl].
void merge_heads(float* out, const float* heads, int64_t b, int64_t s, int64_t a, int64_t dh,
                 cudaStream_t stream = nullptr);
// [b·s, hl] → [b, a, s, dh].
void unmerge_heads(float* heads, const float* rows, int64_t b, int64_t s, int64_t a, int64_t dh,
                   cudaStream_t stream = nullptr);
// dq, dk, dv [b, a, s, dh] → dqkv [b·s, 3·hl] (split_heads' transpose).
void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t b, int64_t s, int64_t a,
                     int64_t dh, cudaStream_t stream = nullptr);

}  // namespace lattice::cuda
