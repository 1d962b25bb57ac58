// The fused attention's blocks on a GPU (cuda/flash_attention.hpp, "blocks"): context parallelism's
// ring (--cp-comm-type p2p, tensor_parallel/ring_attention.cpp) calls them, a block of queries against
// a block of keys at their global positions (kernels/flash_attention.hpp's FlashBlock), the causal
// mask and the dropout's keep flags by global position, the forward merging into the output and
// log-sum-exp already there. One warp a query row (forward, dQ) or a key row (dK, dV), each lane
// holding the row's elements lane, lane + 32, …: the rows are written by one warp each, in a fixed
// order, so a call repeats its bits. These serve the ring's tests on one GPU (several ranks a card,
// their K and V staged through host memory), not its speed: no tiles, no tensor cores.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/common.cuh"
#include "cuda/flash_attention.hpp"
#include "cuda/flash_common.cuh"
#include "kernels/fast_math.hpp"
#include "random/philox_core.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

constexpr int kBlockRows = 4;            // warps (rows) a block of 128 threads
constexpr int kMaxLane = int(kFlashBlockMaxHeadDim / 32);  // a lane's elements of a row
static_assert(kFlashBlockMaxHeadDim == 32 * kMaxLane, "a row's elements are a warp's lanes' registers");

// The arguments every kernel reads: the block (positions, strides), the mask's draw (flash_common's
// FlashArgs with s = the sequence's length S, the mask's row length) and the scales.
struct BlockArgs {
  FlashBlock x;
  flash::FlashArgs p;
};

// A row of dh floats into the lane's slots (0 past dh).
__device__ __forceinline__ void load_row(float (&r)[kMaxLane], const float* row, int64_t dh, int lane) {
#pragma unroll
  for (int u = 0; u < kMaxLane; ++u) {
    const int64_t e = lane + 32 * u;
    r[u] = e < dh ? row[e] : 0.0f;
  }
}
__device__ __forceinline__ float dot_row(const float (&r)[kMaxLane], const float* row, int64_t dh, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < kMaxLane; ++u) {
    const int64_t e = lane + 32 * u;
    if (e < dh) s += r[u] * row[e];
  }
  return warp_sum(s);
}
// The lane's sums into a row of dh floats: added to what is there where `add` (a merged block), else
// written over it.
__device__ __forceinline__ void store_row(float* row, const float (&acc)[kMaxLane], bool add, int64_t dh, int lane) {
#pragma unroll
  for (int u = 0; u < kMaxLane; ++u) {
    const int64_t c = lane + 32 * u;
    if (c < dh) row[c] = add ? row[c] + acc[u] : acc[u];
  }
}
// The dropout's factor of global element (gi, gj) of head bh: 1/(1−p) kept, 0 dropped, 1 without.
__device__ __forceinline__ float keep_factor_at(const flash::FlashArgs& p, uint64_t base, int64_t gi, int64_t gj) {
  if (!p.dropout) return 1.0f;
  return philox_keep(p.words, p.threshold, base + uint64_t(gi) * uint64_t(p.s) + uint64_t(gj)) ? p.keep_scale : 0.0f;
}

// Query row i of head bh: its softmax over the keys it sees (max, then sum, then the weighted values:
// the CPU kernel's exponentials of the same scores), merged into out and lse where x.merge.
__global__ void block_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                                     BlockArgs args) {
  const FlashBlock& x = args.x;
  const flash::FlashArgs& p = args.p;
  const int lane = int(threadIdx.x & 31);
  const int64_t row = int64_t(blockIdx.x) * kBlockRows + (threadIdx.x >> 5);
  if (row >= x.b * x.a * x.nq) return;  // the whole warp alike
  const int64_t bh = row / x.nq, i = row % x.nq, gi = x.q0 + i, dh = x.dh;
  const int64_t n = min(x.nk, gi - x.k0 + 1);  // keys seen: k0 ≤ q0, so at least one
  const float* K = k + bh * x.k_stride;
  const float* V = v + bh * x.k_stride;
  float qr[kMaxLane];
  load_row(qr, q + bh * x.q_stride + i * dh, dh, lane);
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = fmaxf(mx, dot_row(qr, K + j * dh, dh, lane) * p.scale);
  const uint64_t base = p.dropout ? flash::mask_base(p, bh) : 0;
  float sum = 0.0f, acc[kMaxLane] = {};
  for (int64_t j = 0; j < n; ++j) {
    const float e = fast_exp(dot_row(qr, K + j * dh, dh, lane) * p.scale - mx);
    sum += e;
    const float w = e * keep_factor_at(p, base, gi, x.k0 + j);
#pragma unroll
    for (int u = 0; u < kMaxLane; ++u) {
      const int64_t c = lane + 32 * u;
      if (c < dh) acc[u] += w * V[j * dh + c];
    }
  }
  float* o = out + bh * x.q_stride + i * dh;
  float* L = lse + bh * x.lse_stride + i;
  const float inv = 1.0f / sum, block_lse = mx + logf(sum);
  float a_old = 0.0f, a_new = inv, merged = block_lse;
  if (x.merge) {  // the CPU's weights: each block's share of the combined sum
    const float top = fmaxf(*L, block_lse);
    const float w_old = expf(*L - top), w_new = expf(block_lse - top), total = w_old + w_new;
    a_old = w_old / total, a_new = w_new / total * inv, merged = top + logf(total);
  }
#pragma unroll
  for (int u = 0; u < kMaxLane; ++u) {
    const int64_t c = lane + 32 * u;
    if (c < dh) o[c] = x.merge ? o[c] * a_old + acc[u] * a_new : acc[u] * a_new;  // unmerged: a_new is 1/sum
  }
  __syncwarp();  // every lane has read *L before lane 0 writes it
  if (lane == 0) *L = merged;
}

// D_i = Σ_e dO_ie · O_ie for every query row (the softmax backward's row term).
__global__ void block_rowdot_kernel(float* D, const float* dout, const float* out, BlockArgs args) {
  const FlashBlock& x = args.x;
  const int lane = int(threadIdx.x & 31);
  const int64_t row = int64_t(blockIdx.x) * kBlockRows + (threadIdx.x >> 5);
  if (row >= x.b * x.a * x.nq) return;
  const int64_t bh = row / x.nq, i = row % x.nq;
  float r[kMaxLane];
  load_row(r, dout + bh * x.q_stride + i * x.dh, x.dh, lane);
  const float d = dot_row(r, out + bh * x.q_stride + i * x.dh, x.dh, lane);
  if (lane == 0) D[row] = d;
}

// One (query i, key j) pair's terms: P∘Z (for dV) and dS/√dh (for dQ and dK).
struct PairTerms {
  float pz, ds;
};
__device__ __forceinline__ PairTerms pair_terms(const BlockArgs& a, float score, float dp, float li, float di,
                                                uint64_t base, int64_t gi, int64_t gj) {
  const float prob = fast_exp(score - li), z = keep_factor_at(a.p, base, gi, gj);
  return {prob * z, prob * (dp * z - di) * a.p.scale};
}

// dQ_i = Σ_j dS_ij · K_j over the keys query i sees, into dq (added where x.merge).
__global__ void block_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v,
                                const float* lse, const float* D, BlockArgs args) {
  const FlashBlock& x = args.x;
  const int lane = int(threadIdx.x & 31);
  const int64_t row = int64_t(blockIdx.x) * kBlockRows + (threadIdx.x >> 5);
  if (row >= x.b * x.a * x.nq) return;
  const int64_t bh = row / x.nq, i = row % x.nq, gi = x.q0 + i, dh = x.dh;
  const int64_t n = min(x.nk, gi - x.k0 + 1);
  const float* K = k + bh * x.k_stride;
  const float* V = v + bh * x.k_stride;
  float qr[kMaxLane], dor[kMaxLane], acc[kMaxLane] = {};
  load_row(qr, q + bh * x.q_stride + i * dh, dh, lane);
  load_row(dor, dout + bh * x.q_stride + i * dh, dh, lane);
  const float li = lse[bh * x.lse_stride + i], di = D[row];
  const uint64_t base = args.p.dropout ? flash::mask_base(args.p, bh) : 0;
  for (int64_t j = 0; j < n; ++j) {
    const float score = dot_row(qr, K + j * dh, dh, lane) * args.p.scale;
    const PairTerms t = pair_terms(args, score, dot_row(dor, V + j * dh, dh, lane), li, di, base, gi, x.k0 + j);
#pragma unroll
    for (int u = 0; u < kMaxLane; ++u) {
      const int64_t c = lane + 32 * u;
      if (c < dh) acc[u] += t.ds * K[j * dh + c];
    }
  }
  store_row(dq + bh * x.q_stride + i * dh, acc, x.merge, dh, lane);
}

// dK_j = Σ_i dS_ij · Q_i and dV_j = Σ_i (P∘Z)_ij · dO_i over the queries that see key j, into dk, dv
// (added where x.merge).
__global__ void block_dkdv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                                  const float* v, const float* lse, const float* D, BlockArgs args) {
  const FlashBlock& x = args.x;
  const int lane = int(threadIdx.x & 31);
  const int64_t row = int64_t(blockIdx.x) * kBlockRows + (threadIdx.x >> 5);
  if (row >= x.b * x.a * x.nk) return;
  const int64_t bh = row / x.nk, j = row % x.nk, gj = x.k0 + j, dh = x.dh;
  const float* Q = q + bh * x.q_stride;
  const float* dO = dout + bh * x.q_stride;
  float kr[kMaxLane], vr[kMaxLane], dka[kMaxLane] = {}, dva[kMaxLane] = {};
  load_row(kr, k + bh * x.k_stride + j * dh, dh, lane);
  load_row(vr, v + bh * x.k_stride + j * dh, dh, lane);
  const uint64_t base = args.p.dropout ? flash::mask_base(args.p, bh) : 0;
  for (int64_t i = gj > x.q0 ? gj - x.q0 : 0; i < x.nq; ++i) {  // the queries at or after key j
    const float score = dot_row(kr, Q + i * dh, dh, lane) * args.p.scale;
    const PairTerms t = pair_terms(args, score, dot_row(vr, dO + i * dh, dh, lane), lse[bh * x.lse_stride + i],
                                   D[bh * x.nq + i], base, x.q0 + i, gj);
#pragma unroll
    for (int u = 0; u < kMaxLane; ++u) {
      const int64_t c = lane + 32 * u;
      if (c < dh) dka[u] += t.ds * Q[i * dh + c], dva[u] += t.pz * dO[i * dh + c];
    }
  }
  store_row(dk + bh * x.k_stride + j * dh, dka, x.merge, dh, lane);
  store_row(dv + bh * x.k_stride + j * dh, dva, x.merge, dh, lane);
}

BlockArgs block_args(const FlashBlock& x, const AttentionDropout& drop, const char* what) {
  if (x.dh < 1 || x.dh > kFlashBlockMaxHeadDim)
    throw std::invalid_argument(std::string("CUDA: ") + what + ": head dimension " + std::to_string(x.dh) +
                                " (the blocks' kernels take 1 to " + std::to_string(kFlashBlockMaxHeadDim) + ")");
  check_flash_block(x);
  FlashShape shape;  // the mask's rows are the whole sequence's: S long
  shape.b = x.b, shape.a = x.a, shape.s = x.S, shape.dh = x.dh;
  return {x, flash::make_args(shape, drop)};
}
unsigned row_blocks(int64_t rows) { return unsigned((rows + kBlockRows - 1) / kBlockRows); }

}  // namespace

void flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashBlock& x,
                         const AttentionDropout& drop, cudaStream_t stream) {
  const BlockArgs args = block_args(x, drop, "flash_block_forward");
  const int64_t rows = x.b * x.a * x.nq;
  if (rows <= 0 || x.nk <= 0) return;
  block_forward_kernel<<<row_blocks(rows), 32 * kBlockRows, 0, stream>>>(out, lse, q, k, v, args);
  check_launch("flash_block_forward");
}

size_t flash_block_backward_workspace_bytes(const FlashBlock& x) {
  return size_t(std::max<int64_t>(0, x.b * x.a * x.nq)) * sizeof(float);
}

void flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const FlashBlock& x,
                          const AttentionDropout& drop, Workspace ws, cudaStream_t stream) {
  const BlockArgs args = block_args(x, drop, "flash_block_backward");
  const int64_t qrows = x.b * x.a * x.nq, krows = x.b * x.a * x.nk;
  if (qrows <= 0 || krows <= 0) return;
  if (!ws.data || ws.bytes < flash_block_backward_workspace_bytes(x))
    throw std::runtime_error("CUDA: flash_block_backward: workspace of " + std::to_string(ws.bytes) +
                             " bytes, needs " + std::to_string(flash_block_backward_workspace_bytes(x)));
  float* D = static_cast<float*>(ws.data);
  block_rowdot_kernel<<<row_blocks(qrows), 32 * kBlockRows, 0, stream>>>(D, dout, out, args);
  check_launch("flash_block_backward D");
  block_dq_kernel<<<row_blocks(qrows), 32 * kBlockRows, 0, stream>>>(dq, dout, q, k, v, lse, D, args);
  check_launch("flash_block_backward dQ");
  block_dkdv_kernel<<<row_blocks(krows), 32 * kBlockRows, 0, stream>>>(dk, dv, dout, q, k, v, lse, D, args);
  check_launch("flash_block_backward dK dV");
}

}  // namespace lattice::cuda
