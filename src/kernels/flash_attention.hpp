#pragma once
// Fused causal attention for CPU (docs/design.md §3.1), FlashAttention-style: the scores QKᵀ/√dh
// are computed 64 queries × 64 keys at a time with an online softmax (running max and sum per
// query row), so no s×s tensor exists. The forward keeps only the per-row log-sum-exp; the
// backward recomputes each score tile from Q, K and it. The dropout mask on the probabilities is
// drawn element by element from the same counter-based stream the unfused path fills (§10), so
// both paths drop the same elements and compute the same function to fp32 rounding.
#include <cstdint>
#include <stdexcept>

#include "kernels/dropout.hpp"

namespace lattice {

// Shapes: b rows × a heads of s positions, head dimension dh; Q, K, V, O, dO are [b, a, s, dh]
// fp32, the log-sum-exp [b, a, s] fp32.
struct FlashShape {
  int64_t b = 0, a = 0, s = 0, dh = 0;
  // Q, K, V hold bf16 values (--activation-dtype bf16, widened for the call): a device may then compute
  // the products in bf16 with fp32 accumulation (cuda/flash_attention.hpp's tensor-core form), within
  // bf16 rounding of this contract. The CPU's kernels compute in fp32 either way.
  bool bf16_operands = false;
};

// Q, K, V [b, a, s, dh] as the model keeps them: fp32, or (bf16) bf16 bits, with fp32 room
// (q32, k32, v32: the model's own workspaces, so widening costs no memory) where an implementation
// that computes from fp32 widens bf16 ones. The seam's fused attention (backend/device_ops.hpp) takes
// them so: the CPU widens, as the model did before; a device's bf16 kernels read the bits themselves.
// qkv_rows (bf16 only): the bits are the QKV GEMM's token rows [b·s, 3·a·dh] (Q | K | V a row, as
// split_heads reads them), q, k, v pointing at the three parts' first columns, rows 3·a·dh apart; the
// model keeps the rows so when the attention reads them there (model/attention.hpp).
struct FlashOperands {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  bool bf16 = false;
  float* q32 = nullptr;
  float* k32 = nullptr;
  float* v32 = nullptr;
  bool qkv_rows = false;
};

// The fp32 Q, K, V [b, a, s, dh] of `in`: as given, or bf16 bits widened by widen(src, dst, n) into
// the room `in` gives — the CPU's from_bf16, or a device's — or, from the QKV rows, split and widened
// in one pass by split_widen(q32, k32, v32, rows, x) (split_heads_widened's contract).
struct FlashFp32Operands {
  const float *q, *k, *v;
};
template <class Widen, class SplitWiden>
FlashFp32Operands fp32_operands(const FlashOperands& in, const FlashShape& x, Widen&& widen, SplitWiden&& split_widen) {
  if (!in.bf16)
    return {static_cast<const float*>(in.q), static_cast<const float*>(in.k), static_cast<const float*>(in.v)};
  if (!in.q32 || !in.k32 || !in.v32) throw std::invalid_argument("fused attention: bf16 operands without fp32 room");
  if (in.qkv_rows) {
    split_widen(in.q32, in.k32, in.v32, static_cast<const uint16_t*>(in.q), x);
    return {in.q32, in.k32, in.v32};
  }
  const int64_t n = x.b * x.a * x.s * x.dh;
  widen(static_cast<const uint16_t*>(in.q), in.q32, n);
  widen(static_cast<const uint16_t*>(in.k), in.k32, n);
  widen(static_cast<const uint16_t*>(in.v), in.v32, n);
  return {in.q32, in.k32, in.v32};
}

// One block of context parallelism's ring (docs/design.md §5.1), and in general the kernels' unit:
// nq queries at global positions q0 … q0+nq−1 against nk keys at k0 … k0+nk−1, causal by global
// position (k0 ≤ q0, so every query sees a key); S is the whole sequence, the dropout mask's row
// length. Strides are floats from one (row, head) to the next: of Q, O, dO, dQ (q_stride), of K, V,
// dK, dV (k_stride) and of the log-sum-exp (lse_stride). `merge`: the forward combines its output
// with the output and log-sum-exp already there (a row's first block overwrites), the
// backward adds into dQ, dK, dV; otherwise both overwrite.
struct FlashBlock {
  int64_t b = 0, a = 0, nq = 0, nk = 0, dh = 0;
  int64_t q0 = 0, k0 = 0, S = 0;
  int64_t q_stride = 0, k_stride = 0, lse_stride = 0;
  bool merge = false;
};
// The whole causal square of FlashShape as one block.
FlashBlock whole_sequence(const FlashShape& x);
// std::logic_error unless the block's first query sees one of its keys (k0 ≤ q0): every device's
// blocks assume it.
void check_flash_block(const FlashBlock& x);

void flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashBlock& x,
                         const AttentionDropout& drop);
// The block's share of dQ, dK, dV from dO, the final output O and log-sum-exp of the queries' rows
// (every block's, merged), so the shares of a row's blocks sum to its gradient.
void flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const FlashBlock& x,
                          const AttentionDropout& drop);

// The tracked scratch (MemoryCategory::workspaces) one call of the CPU's blocks holds while it runs on
// `threads` OpenMP threads, at its largest: the forward's Kᵀ tiles and each thread's score,
// probability, accumulator, row-statistic and mask tiles; the backward's per-thread tiles and the
// queries' row sums. The planner adds the larger of a layer's calls to a rank's workspaces
// (plan/memory_model.cpp); unit FlashScratch.* holds the kernels to these counts.
int64_t flash_block_forward_scratch_bytes(const FlashBlock& x, int threads);
int64_t flash_block_backward_scratch_bytes(const FlashBlock& x, int threads);

// Context parallelism's ring (tensor_parallel/ring_attention.hpp) cuts the sequence S into 2c chunks
// of C = S/(2c); rank o holds chunks o and 2c−1−o (its local chunk i is global chunk i ? 2c−1−o : o,
// rows [i·C, (i + 1)·C) of every head). fn(block, query row offset, key row offset) for each of rank
// r's query chunks that sees a key chunk of rank `owner`, for b sequences of a heads of dh: a key
// chunk behind the query chunk or on its diagonal (the causal half); one ahead is skipped. Key chunk r
// comes first for both of r's query chunks (behind or on the diagonal of each) and overwrites; every
// other block merges. One rule for the ring and for the planner's timing of it (plan/gemm_shapes.hpp).
template <class F>
void for_each_ring_block(int64_t b, int64_t a, int64_t S, int64_t dh, int c, int r, int owner, F&& fn) {
  const int64_t C = S / (2 * int64_t(c));
  auto global_chunk = [c](int o, int i) { return i ? 2 * int64_t(c) - 1 - o : int64_t(o); };
  for (int qi = 0; qi < 2; ++qi)
    for (int ki = 0; ki < 2; ++ki) {
      const int64_t gq = global_chunk(r, qi), gk = global_chunk(owner, ki);
      if (gk > gq) continue;
      FlashBlock blk;
      blk.b = b, blk.a = a, blk.nq = C, blk.nk = C, blk.dh = dh;
      blk.q0 = gq * C, blk.k0 = gk * C, blk.S = S;
      blk.q_stride = blk.k_stride = 2 * C * dh, blk.lse_stride = 2 * C;
      blk.merge = !(owner == r && ki == 0);
      fn(blk, qi * C, ki * C);
    }
}

// out = Dropout(softmax(causal(Q·Kᵀ/√dh))) · V; lse[row] = log Σ_j exp(score_j) (the softmax's
// normaliser before dropout), what the backward needs instead of the probabilities.
void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const FlashShape& x, const AttentionDropout& drop);

// dq, dk, dv (overwritten) from dout and the forward's Q, K, V, output and log-sum-exp.
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const FlashShape& x,
                              const AttentionDropout& drop);

}  // namespace lattice
