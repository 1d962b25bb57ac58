#pragma once
// Fused causal attention on the device, with the CPU's contract (kernels/flash_attention.hpp): Q, K, V,
// O, dO [b, a, s, dh] fp32, the log-sum-exp [b, a, s] fp32, out = Dropout(softmax(causal(Q·Kᵀ/√dh)))·V,
// the dropout's keep flags drawn element by element from the Philox stream at the same global indices
// as the CPU's fused and unfused attention (dropout.hpp's AttentionDropout, attention_mask_first: head
// bh's element (i, j) at its base + i·s + j), so the same elements are dropped.
//
// Tiles of 64 queries × 64 keys in shared memory, 256 threads a block, four threads a row; an online
// softmax (running max and sum per query row, with the CPU's fast_exp). The forward keeps only the
// log-sum-exp. The backward recomputes each score tile from Q, K and it, with no atomics: a first
// kernel computes D_i = dO_i·O_i, a second walks the query tiles for each key tile (one block owns a
// key tile's dK and dV), a third walks the key tiles for each query tile (one block owns its dQ). Every
// sum runs in a fixed order (the keys, the queries and the head dimension in ascending order, the four
// threads of a row by a fixed shuffle tree), so the bits repeat from run to run.
//
// Supports 1 <= dh <= 128 (kFlashMaxHeadDim; GPT-2's dh is 64), any s >= 1 (a last tile shorter than
// 64 is masked; the tensor-core form below, s below 2^31), b·a <= 65535 (the grid's y dimension);
// shapes outside throw std::invalid_argument.
// Shared memory per block: forward (3·64·(dh+1) + 64·65)·4 bytes (115 KiB at dh 128), backward up to
// (4·64·(dh+1) + 2·64·65 + 384)·4 bytes (163 KiB at dh 128): Hopper's 227 KiB opt-in limit.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/kernels.hpp"
#include "kernels/dropout.hpp"
#include "kernels/flash_attention.hpp"

namespace lattice::cuda {

inline constexpr int64_t kFlashMaxHeadDim = 128;

// The tensor-core form (cuda/flash_attention_tc.cu), which the two calls below take when the shape
// has bf16 operands (FlashShape::bf16_operands), dh is a multiple of 16 and the card has bf16 tensor
// cores (sm_80 on): the same tiles, causal mask, online softmax and dropout flags, with each warp's
// score tile, probabilities and output in registers and the products on mma.sync (fp32
// accumulation; dO and the probabilities rounded to bf16 for them), so within bf16 rounding of the
// fp32 form, not its bits. The tiles are 64, 96 or 128 columns wide (dh up to 64, 96, 128; zero past
// dh). Shared memory a block (forward in 128-row query tiles, in 64-row ones, dQ, dK dV), each with a
// second pair of the tiles it walks, which the bf16-in calls fill ahead by cp.async where the card's
// limit holds them: 45, 36, 36, 55 KiB at dh up to 64; -, 52, 52, 79 up to 96; -, 68, 68, 103 up to
// 128. Without the copies ahead: 36, 27, 36, 37; -, 39, 52, 53; -, 51, 68, 69 KiB.
// Q, K, V are fp32 (holding bf16 values) or the bf16 bits themselves (the kept tensors, read as they are).
// The shapes the form may serve (bf16 operands, dh a multiple of 16 up to 128), and whether it does on
// this device (sm_80 on, the shared memory, a build for sm_80 or later).
bool flash_tc_shape(const FlashShape& x);
bool flash_tc_supported(const FlashShape& x);
// The tensor-core kernels' forms, each giving the same bits. At dh <= 64 the forward takes 128-row
// query tiles (two 64-row slabs a warp) or 64-row ones, and with bf16 operands and no dropout also
// 64-row ones compiled into fewer registers (96: five blocks an SM where the plain form's 127 allow
// four); the backward's dQ kernel, there, as compiled (146 registers, three blocks an SM) or in 128
// (four). By default (tuned) each shape takes the fastest form it has, timed on its first call;
// flash_tc_force_forms makes this thread's next calls take the named ones where compiled
// (lattice_cuda_check's timings and [bits] checks compare them), and the last_ functions say which form
// this thread's last call ran (none before any).
enum class ForwardForm { none, tuned, two_slabs, one_slab, one_slab_dense };
enum class DqForm { none, tuned, plain, dense };
void flash_tc_force_forms(ForwardForm forward, DqForm dq);
ForwardForm flash_tc_last_forward_form();
DqForm flash_tc_last_dq_form();
const char* flash_tc_form_name(ForwardForm f);
const char* flash_tc_form_name(DqForm f);
void flash_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashShape& x,
                      const AttentionDropout& drop, cudaStream_t stream);
void flash_tc_forward(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                      const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream);
// Q, K, V as bf16 bits for the model's calls: each its own tensor [b, a, s, dh], or (rows) the QKV GEMM's
// token rows [b·s, 3·a·dh] as the model keeps them, q, k, v pointing at the three parts' first columns
// (kernels/flash_attention.hpp's FlashOperands::qkv_rows; of_rows makes them). The kernels read a
// head's rows where they are, 3·a·dh elements apart: the split into the head layout is gone.
struct QkvBits {
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
  bool rows = false;
  static QkvBits of_rows(const uint16_t* qkv, const FlashShape& x) {
    return {qkv, qkv + x.a * x.dh, qkv + 2 * x.a * x.dh, true};
  }
};
// The context straight into the token rows [b, s, a·dh] as bf16 bits (flash_attention_forward_rows_bf16).
void flash_tc_forward_rows(uint16_t* out_rows, float* lse, const QkvBits& in, const FlashShape& x,
                           const AttentionDropout& drop, cudaStream_t stream);
// D = rowsum(dO ∘ O) and dout16 = dO rounded to bf16 (b·a·s·dh values; 16-byte aligned lets the
// kernels copy it ahead), both computed by the caller in one pass over dO.
void flash_tc_backward(float* dq, float* dk, float* dv, const uint16_t* dout16, const float* q, const float* k,
                       const float* v, const float* lse, const float* D, const FlashShape& x,
                       const AttentionDropout& drop, cudaStream_t stream);
void flash_tc_backward(float* dq, float* dk, float* dv, const uint16_t* dout16, const QkvBits& in, const float* lse,
                       const float* D, const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream);
// The same with the gradients as bf16 bits in the QKV rows [b·s, 3·a·dh] (merge_qkv_grads' layout)
// and each 64-row chunk's column sums into partial [b·s / 64][3·a·dh] (column_partials_kernel's);
// s a multiple of 64 (std::invalid_argument otherwise).
void flash_tc_backward_qkv_rows(uint16_t* dqkv16, float* partial, const uint16_t* dout16, const QkvBits& in,
                                const float* lse, const float* D, const FlashShape& x, const AttentionDropout& drop,
                                cudaStream_t stream);

// Empty if the shape is supported, else why not.
std::string flash_attention_unsupported(const FlashShape& x);

void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream = nullptr);

// Scratch of the backward: D = rowsum(dO ∘ O), b·a·s floats, and for shapes the tensor-core form may
// serve (bf16 operands, dh a multiple of 16) dO rounded to bf16, b·a·s·dh values.
size_t flash_attention_backward_workspace_bytes(const FlashShape& x);
// dq, dk, dv overwritten, as on the CPU.
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const FlashShape& x,
                              const AttentionDropout& drop, Workspace ws, cudaStream_t stream = nullptr);

// The same two with Q, K, V as bf16 bits, where the tensor-core form serves the shape
// (flash_tc_supported; std::invalid_argument otherwise): the kept tensors read as they are, with no
// fp32 copy of them widened first. Bit for bit the fp32 calls on the widened values.
void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream = nullptr);
void flash_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                                   const uint16_t* k, const uint16_t* v, const float* out, const float* lse,
                                   const FlashShape& x, const AttentionDropout& drop, Workspace ws,
                                   cudaStream_t stream = nullptr);

// The model's fused calls under bf16 activations, with the context in the token rows [b, s, a·dh]
// the projection reads (HeadShape's merge_heads layout) instead of the head layout: the forward
// writes it as bf16 bits, bit for bit flash_attention_forward_bf16 followed by merge_heads_bf16; the
// backward reads dO (fp32) and O (bf16 bits) there, bit for bit unmerge_heads and unmerge_heads_bf16
// followed by flash_attention_backward_bf16 (dq, dk, dv stay in the head layout), each on the heads
// `in` names (split from the QKV rows where in.rows). The passes between are gone (a layer's three,
// 2026-11-27 H200 profile: 7.5 ms a GPT-2 step at micro-batch 32). Where the tensor-core form does
// not serve the shape: std::invalid_argument.
void flash_attention_forward_rows_bf16(uint16_t* out_rows, float* lse, const QkvBits& in, const FlashShape& x,
                                       const AttentionDropout& drop, cudaStream_t stream = nullptr);
void flash_attention_backward_rows_bf16(float* dq, float* dk, float* dv, const float* dout_rows, const QkvBits& in,
                                        const uint16_t* out_rows, const float* lse, const FlashShape& x,
                                        const AttentionDropout& drop, Workspace ws, cudaStream_t stream = nullptr);

// The backward from the rows with the QKV gradient in the rows too: dqkv16 [b·s, 3·a·dh] as bf16 bits
// and the QKV bias gradient added into db [3·a·dh], bit for bit flash_attention_backward_rows_bf16
// followed by merge_qkv_grads_narrow. The kernels write the narrowed rows and each 64-row chunk's
// column sums as they finish a tile, so the fp32 dq, dk, dv and the merge's pass over them are gone
// (merge_qkv_grads_narrow took 5.3 ms a GPT-2 step at micro-batch 32, 2026-11-27 H200 profile). For
// the shapes flash_qkv_rows_supported names (the tensor-core form's, s a multiple of 64: a query or key
// tile is then one chunk of the column sums); std::invalid_argument otherwise.
bool flash_qkv_rows_supported(const FlashShape& x);
size_t flash_attention_backward_qkv_rows_workspace_bytes(const FlashShape& x);
void flash_attention_backward_qkv_rows_bf16(uint16_t* dqkv16, float* db, const float* dout_rows, const QkvBits& in,
                                            const uint16_t* out_rows, const float* lse, const FlashShape& x,
                                            const AttentionDropout& drop, Workspace ws, cudaStream_t stream = nullptr);

// Blocks (cuda/flash_block.cu): context parallelism's ring's unit, kernels/flash_attention.hpp's
// FlashBlock contract (queries and keys at global positions, the mask's rows S long, the forward
// merging into out and lse where x.merge, the backward adding into dq, dk, dv there). One warp a row,
// fp32, dh 1 to kFlashBlockMaxHeadDim (std::invalid_argument otherwise): for the ring's tests on one GPU,
// not for speed. The backward's scratch: D, b·a·nq floats.
inline constexpr int64_t kFlashBlockMaxHeadDim = 256;
void flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashBlock& x,
                         const AttentionDropout& drop, cudaStream_t stream = nullptr);
size_t flash_block_backward_workspace_bytes(const FlashBlock& x);
void flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const FlashBlock& x,
                          const AttentionDropout& drop, Workspace ws, cudaStream_t stream = nullptr);

}  // namespace lattice::cuda
