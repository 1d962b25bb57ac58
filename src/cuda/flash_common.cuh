#pragma once
// What the fused attention's two forms share (cuda/flash_attention.cu, the fp32 kernels on the CUDA
// cores; cuda/flash_attention_tc.cu, the bf16 ones on the tensor cores): the kernels' arguments, the
// dropout's keep flags (the CPU's elements, random/philox_core.hpp), a tile row's four-thread
// reductions, and the shared-memory opt-in.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/fast_divisor.hpp"
#include "cuda/common.cuh"
#include "kernels/dropout.hpp"
#include "kernels/flash_attention.hpp"
#include "random/philox_core.hpp"

namespace lattice::cuda::flash {
using namespace detail;

struct FlashArgs {
  int64_t a = 0, s = 0, dh = 0;
  FastDivisor dh_div;  // a tile's flat index (< 64·dh) into row and element without a division
  float scale = 1.0f, keep_scale = 1.0f;
  bool dropout = false;
  PhiloxStreamWords words{};
  uint32_t threshold = 0;
  int64_t first_row = 0, heads = 0, head0 = 0;
  // Where Q, K, V are: each [b, a, s, dh] (rows dh apart), or the QKV GEMM's token rows [b·s, 3·a·dh]
  // (qkv_rows: rows 3·a·dh apart, a head's dh columns at its place in each part; the tensor-core
  // kernels only, kernels/flash_attention.hpp's FlashOperands::qkv_rows).
  bool qkv_rows = false;
  int64_t ld_qkv = 0;
};
// The offset of head bh's first row of Q, K or V from that tensor's (or part's) start, and its rows' stride.
__host__ __device__ inline int64_t qkv_head(const FlashArgs& p, int64_t bh) {
  return p.qkv_rows ? (bh / p.a) * p.s * p.ld_qkv + (bh % p.a) * p.dh : bh * p.s * p.dh;
}

inline FlashArgs make_args(const FlashShape& x, const AttentionDropout& drop) {
  FlashArgs p;
  p.a = x.a, p.s = x.s, p.dh = x.dh;
  p.dh_div = FastDivisor(x.dh);
  p.scale = 1.0f / std::sqrt(float(x.dh));  // the CPU's 1.0f / std::sqrt(float(dh))
  p.dropout = drop.p > 0.0f;
  p.keep_scale = p.dropout ? 1.0f / (1.0f - drop.p) : 1.0f;
  p.words = philox_stream_words(drop.stream.seed, drop.stream.step, drop.stream.layer, uint32_t(DropoutSite::attention));
  p.threshold = dropout_keep_threshold(drop.p);
  p.first_row = drop.first_row;
  p.heads = drop.heads_total ? drop.heads_total : x.a;
  p.head0 = drop.head0;
  p.ld_qkv = x.dh;
  return p;
}

// dropout.hpp's attention_mask_first: the global index of (local batch·head bh, query 0, key 0).
__device__ __forceinline__ uint64_t mask_base(const FlashArgs& p, int64_t bh) {
  const int64_t bi = bh / p.a, hd = bh % p.a;
  return uint64_t((p.first_row + bi) * p.heads + p.head0 + hd) * uint64_t(p.s) * uint64_t(p.s);
}

template <int OFF>
__device__ __forceinline__ uint32_t collect16(const uint32_t (&r)[20], uint32_t threshold) {
  uint32_t bits = 0;
#pragma unroll
  for (int k = 0; k < 16; ++k) bits |= uint32_t(r[OFF + k] >= threshold) << k;
  return bits;
}
// Keep flags of global elements first .. first + 15 (bit k: element first + k), from the Philox blocks
// that cover them: the same bits as philox_keep element by element (random/philox_core.hpp). Four
// blocks where `first` is a block's first element (always, in the attention's calls, when s is a
// multiple of 4), five otherwise: a fifth of the draws saved where the rounds are most of the dropout's
// instructions.
__device__ inline uint32_t keep_bits16(const PhiloxStreamWords& w, uint32_t threshold, uint64_t first) {
  uint32_t r[20];
  const uint64_t block0 = first >> 2;
  const int blocks = (first & 3) ? 5 : 4;
#pragma unroll
  for (int b = 0; b < 5; ++b) {
    if (b == blocks) {
      r[16] = r[17] = r[18] = r[19] = 0;  // never read: collect16<0> takes r[0 … 15]
      break;
    }
    const uint64_t blk = block0 + uint64_t(b);
    uint32_t c[4] = {uint32_t(blk), uint32_t(blk >> 32), w.c2, w.c3};
    philox4x32_10(c, w.k0, w.k1);
#pragma unroll
    for (int i = 0; i < 4; ++i) r[4 * b + i] = c[i];
  }
  switch (int(first & 3)) {
    case 0: return collect16<0>(r, threshold);
    case 1: return collect16<1>(r, threshold);
    case 2: return collect16<2>(r, threshold);
    default: return collect16<3>(r, threshold);
  }
}

// Max and sum over the four adjacent lanes of a tile row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The keep flags of query i's 16 columns j0 + quad·16 … of a key tile (bit k: column quad·16 + k), or
// all kept when there is no dropout or the row sees none of the tile (n its visible keys).
__device__ __forceinline__ uint32_t row_keep_bits(const FlashArgs& p, uint64_t base, int64_t i, int64_t j0, int quad,
                                                  int64_t n) {
  return (p.dropout && n > 0)
             ? keep_bits16(p.words, p.threshold, base + uint64_t(i) * uint64_t(p.s) + uint64_t(j0 + quad * 16))
             : 0xffffu;
}
// The dropout's factor Z of column kk of those: 1/(1−p) kept, 0 dropped, 1 without dropout.
__device__ __forceinline__ float keep_factor(const FlashArgs& p, uint32_t keep, int kk) {
  return p.dropout ? (((keep >> kk) & 1u) ? p.keep_scale : 0.0f) : 1.0f;
}

// One key tile's step of a tile row's online softmax, four threads a row with 16 scaled scores each
// (sc): the row's running max m and sum l take its first n (visible) columns, and store(jl, e) gets
// each column's probability after the dropout (0 where masked). Returns the factor the row's running
// output is to be scaled by (1 where the row sees none of the tile). Every lane of the warp calls it.
template <class Store>
__device__ __forceinline__ float online_softmax_step(const float (&sc)[16], int64_t n, int quad, uint32_t keep,
                                                     const FlashArgs& p, float& m, float& l, Store store) {
  float mx = m;
#pragma unroll
  for (int kk = 0; kk < 16; ++kk)
    if (quad * 16 + kk < n) mx = fmaxf(mx, sc[kk]);
  mx = quad_max(mx);
  float sum = 0.0f;
  const float corr = n > 0 ? fast_exp(m - mx) : 1.0f;  // 0-ish on the first tile (fast_exp(-inf) = e^-87)
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    const int jl = quad * 16 + kk;
    float e = jl < n ? fast_exp(sc[kk] - mx) : 0.0f;
    sum += e;
    if (p.dropout) e = ((keep >> kk) & 1u) ? e * p.keep_scale : 0.0f;
    store(jl, e);
  }
  sum = quad_sum(sum);
  if (n > 0) {
    l = l * corr + sum;
    m = mx;
  }
  return corr;
}


}  // namespace lattice::cuda::flash
