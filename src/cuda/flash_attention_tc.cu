// The fused attention on the tensor cores (cuda/flash_attention.hpp, "bf16 operands"): the fp32
// kernels' tiles, softmax, dropout flags and order of work (cuda/flash_attention.cu), with the tile
// products — S = Q·Kᵀ, O += P·V, dP = dO·Vᵀ, dV += (P∘Z)ᵀ·dO, dK += dSᵀ·Q, dQ += dS·K — on the tensor
// cores (WMMA 16×16×16, bf16 operands in shared memory, fp32 accumulation). Q, K and V hold bf16
// values already (--activation-dtype bf16), so their tiles are exact; dO and the probabilities and dS
// fed to the products are rounded to bf16. The eight warps of a block share each 64-row product by
// 16×16 output tiles; each output tile adds its K in ascending order, so the bits repeat from run to
// run. What the element-wise steps read and write goes through shared memory (a WMMA fragment's
// element layout is the hardware's), four threads a tile row as in the fp32 kernels.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "cuda/flash_attention.hpp"
#include "cuda/flash_common.cuh"

namespace lattice::cuda {
using namespace detail;
using namespace flash;

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kT = 64;          // queries and keys per tile
constexpr int kThreads = 256;   // 8 warps; 4 threads a tile row in the element-wise steps
constexpr int kWarps = kThreads / 32;
constexpr int kSLd = kT + 4;    // fp32 64 × 64 tiles (WMMA: a multiple of 4 floats)
constexpr int kPLd = kT + 8;    // bf16 64 × 64 tiles (WMMA: a multiple of 8 halves)

// Shared memory, carved in 128-byte pieces (WMMA loads want 32-byte aligned tiles) from `base`. Each
// kernel's layout function below carves its tiles in order; the launch asks for what the same
// function carves from base 0 (`at`), so the size cannot drift from the layout.
struct Carver {
  uintptr_t base;
  size_t at = 0;
  template <class T>
  __host__ __device__ T* take(size_t count) {
    T* p = reinterpret_cast<T*>(base + at);
    at += (count * sizeof(T) + 127) / 128 * 128;
    return p;
  }
};

// The forward's tiles: Q, K, V (bf16, row stride dh + 8), S (fp32), P (bf16), the output O (fp32, row
// stride dh + 4) and each row's rescaling factor.
struct ForwardTiles {
  uint16_t *Q, *K, *V;
  float* S;
  uint16_t* P;
  float *O, *corr;
  size_t bytes;
};
__host__ __device__ inline ForwardTiles forward_tiles(uintptr_t base, int dh) {
  Carver c{base};
  ForwardTiles t;
  t.Q = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.K = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.V = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.S = c.take<float>(size_t(kT) * kSLd);
  t.P = c.take<uint16_t>(size_t(kT) * kPLd);
  t.O = c.take<float>(size_t(kT) * (dh + 4));
  t.corr = c.take<float>(kT);
  t.bytes = c.at;
  return t;
}

// The backward kernels' tiles: Q, dO, K, V (bf16), S and dP (fp32), dS (bf16, [query][key]) and the
// accumulated gradient (fp32: dQ, or dK); the key tile's kernel (`key_tile`) also P∘Z (bf16, for dV),
// dV, and the query tile's log-sum-exp and D.
struct BackwardTiles {
  uint16_t *Q, *dO, *K, *V;
  float *S, *dP;
  uint16_t *dS, *PZ = nullptr;
  float *acc, *acc_v = nullptr, *L = nullptr, *D = nullptr;
  size_t bytes;
};
__host__ __device__ inline BackwardTiles backward_tiles(uintptr_t base, int dh, bool key_tile) {
  Carver c{base};
  BackwardTiles t;
  t.Q = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.dO = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.K = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.V = c.take<uint16_t>(size_t(kT) * (dh + 8));
  t.S = c.take<float>(size_t(kT) * kSLd);
  t.dP = c.take<float>(size_t(kT) * kSLd);
  t.dS = c.take<uint16_t>(size_t(kT) * kPLd);
  t.acc = c.take<float>(size_t(kT) * (dh + 4));
  if (key_tile) {
    t.PZ = c.take<uint16_t>(size_t(kT) * kPLd);
    t.acc_v = c.take<float>(size_t(kT) * (dh + 4));
    t.L = c.take<float>(kT);
    t.D = c.take<float>(kT);
  }
  t.bytes = c.at;
  return t;
}

// Rows [0, 64) of X [*, dh] (n valid, the rest zero) as bf16 bits with row stride ld. X: fp32 values
// (rounded here; exact for Q, K, V, which hold bf16 values), or bf16 bits as kept (copied).
__device__ __forceinline__ uint16_t bf16_bits_of(float x) { return to_bf16_bits(x); }
__device__ __forceinline__ uint16_t bf16_bits_of(uint16_t x) { return x; }
template <class T>
__device__ __forceinline__ void load_bf16_tile(uint16_t* dst, const T* src, int64_t n, const FastDivisor& dh_div,
                                               int ld) {
  const int dh = int(dh_div.d);
  for (int idx = int(threadIdx.x); idx < kT * dh; idx += kThreads) {
    const int r = int(dh_div.div(uint32_t(idx))), e = idx - r * dh;
    dst[r * ld + e] = r < n ? bf16_bits_of(src[int64_t(r) * dh + e]) : uint16_t(0);
  }
}

// C[M × N] (+)= A[M × K] · B[K × N], each 16×16 output tile by one warp (tiles dealt round the warps),
// its K in ascending steps of 16. A and B are bf16 bits in shared memory, row- or column-major
// (wmma::row_major / col_major: element (m, k) of a column-major A at A[k·lda + m]); C is fp32,
// row-major, loaded first when `accumulate`.
template <class ALayout, class BLayout>
__device__ void tile_mma(float* C, int ldc, const uint16_t* A, int lda, const uint16_t* B, int ldb, int M, int N, int K,
                         bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // no bf16 tensor cores before sm_80: flash_tc_supported sends such cards the fp32 form
#else
  constexpr bool a_row = std::is_same_v<ALayout, wmma::row_major>;
  constexpr bool b_row = std::is_same_v<BLayout, wmma::row_major>;
  const int warp = int(threadIdx.x) >> 5, tiles_n = N / 16;
  for (int t = warp; t < (M / 16) * tiles_n; t += kWarps) {
    const int m0 = (t / tiles_n) * 16, n0 = (t % tiles_n) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    float* cp = C + m0 * ldc + n0;
    if (accumulate) wmma::load_matrix_sync(c, cp, unsigned(ldc), wmma::mem_row_major);
    else wmma::fill_fragment(c, 0.0f);
    for (int k0 = 0; k0 < K; k0 += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, ALayout> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, BLayout> b;
      const uint16_t* ap = a_row ? A + m0 * lda + k0 : A + k0 * lda + m0;
      const uint16_t* bp = b_row ? B + k0 * ldb + n0 : B + n0 * ldb + k0;
      wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(ap), unsigned(lda));
      wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(bp), unsigned(ldb));
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(cp, c, unsigned(ldc), wmma::mem_row_major);
  }
#endif
}

// ---- forward: one block per (query tile, b·a), the longest rows first. TIn: how Q, K, V are held,
// fp32 (bf16 values) or bf16 bits. ----
template <class TIn>
__global__ void __launch_bounds__(kThreads) tc_forward_kernel(float* out, float* lse, const TIn* q, const TIn* k,
                                                              const TIn* v, FlashArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dh = int(p.dh), ld = dh + 8, old = dh + 4;
  const ForwardTiles t = forward_tiles(reinterpret_cast<uintptr_t>(smem), dh);
  const int64_t s = p.s;
  const int64_t qb = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, head = bh * s * dh, i0 = qb * kT, nq = min(int64_t(kT), s - i0);
  const int r = int(threadIdx.x) >> 2, quad = int(threadIdx.x) & 3;
  const int64_t i = i0 + r;
  const bool row_ok = r < nq;
  load_bf16_tile(t.Q, q + head + i0 * dh, nq, p.dh_div, ld);
  for (int idx = int(threadIdx.x); idx < kT * old; idx += kThreads) t.O[idx] = 0.0f;
  const uint64_t base = p.dropout ? mask_base(p, bh) : 0;
  float m = -__int_as_float(0x7f800000), l = 0.0f;

  for (int64_t j0 = 0; j0 < i0 + nq; j0 += kT) {  // causal: key tiles past the tile's last query skipped
    const int64_t nk = min(int64_t(kT), s - j0);
    __syncthreads();  // the previous tile's K, V, P reads are done
    load_bf16_tile(t.K, k + head + j0 * dh, nk, p.dh_div, ld);
    load_bf16_tile(t.V, v + head + j0 * dh, nk, p.dh_div, ld);
    __syncthreads();
    tile_mma<wmma::row_major, wmma::col_major>(t.S, kSLd, t.Q, ld, t.K, ld, kT, kT, dh, false);  // S = Q·Kᵀ
    __syncthreads();
    const int64_t n = row_ok ? max(int64_t(0), min(nk, i - j0 + 1)) : 0;
    float sc[16];
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) sc[kk] = t.S[r * kSLd + quad * 16 + kk] * p.scale;
    const float corr = online_softmax_step(sc, n, quad, row_keep_bits(p, base, i, j0, quad, n), p, m, l,
                                           [&](int jl, float e) { t.P[r * kPLd + jl] = to_bf16_bits(e); });
    if (quad == 0) t.corr[r] = corr;
    __syncthreads();
    for (int idx = int(threadIdx.x); idx < kT * dh; idx += kThreads) {
      const int rr = int(p.dh_div.div(uint32_t(idx)));
      t.O[rr * old + idx - rr * dh] *= t.corr[rr];
    }
    __syncthreads();
    tile_mma<wmma::row_major, wmma::row_major>(t.O, old, t.P, kPLd, t.V, ld, kT, dh, kT, true);  // O += P·V
  }
  __syncthreads();
  if (quad == 0) t.corr[r] = row_ok ? 1.0f / l : 0.0f;
  if (row_ok && quad == 0) lse[bh * s + i] = m + logf(l);
  __syncthreads();
  for (int idx = int(threadIdx.x); idx < int(nq) * dh; idx += kThreads) {
    const int rr = int(p.dh_div.div(uint32_t(idx))), e = idx - rr * dh;
    out[head + (i0 + rr) * dh + e] = t.O[rr * old + e] * t.corr[rr];
  }
}

// What both backward kernels compute for a pair of tiles (query tile i0, key tile j0), the block
// synchronised before and after: S = Q·Kᵀ and dP = dO·Vᵀ on the tensor cores, then thread (row r,
// quarter quad), owning query i = i0 + r and keys quad·16 … (n of them visible), writes dS·(1/√dh)
// and, for the key tile's kernel (t.PZ), P∘Z (the dropout's output, for dV), as bf16 bits, zero where
// masked. li, di: the query's log-sum-exp and D.
__device__ void tc_backward_pair(const BackwardTiles& t, int dh, int r, int quad, int64_t n, int64_t i, int64_t j0,
                                 float li, float di, uint64_t base, const FlashArgs& p) {
  const int ld = dh + 8;
  tile_mma<wmma::row_major, wmma::col_major>(t.S, kSLd, t.Q, ld, t.K, ld, kT, kT, dh, false);    // S = Q·Kᵀ
  tile_mma<wmma::row_major, wmma::col_major>(t.dP, kSLd, t.dO, ld, t.V, ld, kT, kT, dh, false);  // dP = dO·Vᵀ
  __syncthreads();
  const uint32_t keep = row_keep_bits(p, base, i, j0, quad, n);
#pragma unroll 4
  for (int kk = 0; kk < 16; ++kk) {
    const int jl = quad * 16 + kk;
    float pz = 0.0f, ds = 0.0f;
    if (jl < n) {
      const float pr = fast_exp(t.S[r * kSLd + jl] * p.scale - li);
      const float z = keep_factor(p, keep, kk);
      pz = pr * z;
      ds = pr * (t.dP[r * kSLd + jl] * z - di) * p.scale;
    }
    if (t.PZ) t.PZ[r * kPLd + jl] = to_bf16_bits(pz);
    t.dS[r * kPLd + jl] = to_bf16_bits(ds);
  }
  __syncthreads();
}

// ---- backward: dK, dV of one key tile, walking its query tiles ----
template <class TIn>
__global__ void __launch_bounds__(kThreads) tc_dkdv_kernel(float* dk, float* dv, const float* dout, const TIn* q,
                                                           const TIn* k, const TIn* v, const float* lse,
                                                           const float* D, FlashArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dh = int(p.dh), ld = dh + 8, old = dh + 4;
  const BackwardTiles t = backward_tiles(reinterpret_cast<uintptr_t>(smem), dh, true);
  const int64_t s = p.s;
  const int64_t bh = blockIdx.y, head = bh * s * dh, j0 = int64_t(blockIdx.x) * kT, nk = min(int64_t(kT), s - j0);
  const int r = int(threadIdx.x) >> 2, quad = int(threadIdx.x) & 3;
  load_bf16_tile(t.K, k + head + j0 * dh, nk, p.dh_div, ld);
  load_bf16_tile(t.V, v + head + j0 * dh, nk, p.dh_div, ld);
  for (int idx = int(threadIdx.x); idx < kT * old; idx += kThreads) t.acc[idx] = 0.0f, t.acc_v[idx] = 0.0f;
  const uint64_t base = p.dropout ? mask_base(p, bh) : 0;

  for (int64_t i0 = j0; i0 < s; i0 += kT) {  // causal: query tiles before the key tile see none of it
    const int64_t nq = min(int64_t(kT), s - i0);
    __syncthreads();  // the previous query tile's reads are done
    load_bf16_tile(t.Q, q + head + i0 * dh, nq, p.dh_div, ld);
    load_bf16_tile(t.dO, dout + head + i0 * dh, nq, p.dh_div, ld);
    if (threadIdx.x < kT) {
      const bool ok = int64_t(threadIdx.x) < nq;
      t.L[threadIdx.x] = ok ? lse[bh * s + i0 + threadIdx.x] : 0.0f;
      t.D[threadIdx.x] = ok ? D[bh * s + i0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    const int64_t i = i0 + r;
    const int64_t n = r < nq ? max(int64_t(0), min(nk, i - j0 + 1)) : 0;
    tc_backward_pair(t, dh, r, quad, n, i, j0, t.L[r], t.D[r], base, p);
    // dV += (P∘Z)ᵀ·dO and dK += dSᵀ·Q: the [query][key] tiles read column-major as [key][query].
    tile_mma<wmma::col_major, wmma::row_major>(t.acc_v, old, t.PZ, kPLd, t.dO, ld, kT, dh, kT, true);
    tile_mma<wmma::col_major, wmma::row_major>(t.acc, old, t.dS, kPLd, t.Q, ld, kT, dh, kT, true);
  }
  __syncthreads();
  for (int idx = int(threadIdx.x); idx < int(nk) * dh; idx += kThreads) {
    const int rr = int(p.dh_div.div(uint32_t(idx))), e = idx - rr * dh;
    dk[head + (j0 + rr) * dh + e] = t.acc[rr * old + e];
    dv[head + (j0 + rr) * dh + e] = t.acc_v[rr * old + e];
  }
}

// ---- backward: dQ of one query tile, walking its key tiles ----
template <class TIn>
__global__ void __launch_bounds__(kThreads) tc_dq_kernel(float* dq, const float* dout, const TIn* q, const TIn* k,
                                                         const TIn* v, const float* lse, const float* D, FlashArgs p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dh = int(p.dh), ld = dh + 8, old = dh + 4;
  const BackwardTiles t = backward_tiles(reinterpret_cast<uintptr_t>(smem), dh, false);
  const int64_t s = p.s;
  const int64_t qb = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, head = bh * s * dh, i0 = qb * kT, nq = min(int64_t(kT), s - i0);
  const int r = int(threadIdx.x) >> 2, quad = int(threadIdx.x) & 3;
  const int64_t i = i0 + r;
  const bool row_ok = r < nq;
  load_bf16_tile(t.Q, q + head + i0 * dh, nq, p.dh_div, ld);
  load_bf16_tile(t.dO, dout + head + i0 * dh, nq, p.dh_div, ld);
  for (int idx = int(threadIdx.x); idx < kT * old; idx += kThreads) t.acc[idx] = 0.0f;
  const float li = row_ok ? lse[bh * s + i] : 0.0f, di = row_ok ? D[bh * s + i] : 0.0f;
  const uint64_t base = p.dropout ? mask_base(p, bh) : 0;

  for (int64_t j0 = 0; j0 < i0 + nq; j0 += kT) {
    const int64_t nk = min(int64_t(kT), s - j0);
    __syncthreads();
    load_bf16_tile(t.K, k + head + j0 * dh, nk, p.dh_div, ld);
    load_bf16_tile(t.V, v + head + j0 * dh, nk, p.dh_div, ld);
    __syncthreads();
    const int64_t n = row_ok ? max(int64_t(0), min(nk, i - j0 + 1)) : 0;
    tc_backward_pair(t, dh, r, quad, n, i, j0, li, di, base, p);
    tile_mma<wmma::row_major, wmma::row_major>(t.acc, old, t.dS, kPLd, t.K, ld, kT, dh, kT, true);  // dQ += dS·K
  }
  __syncthreads();
  for (int idx = int(threadIdx.x); idx < int(nq) * dh; idx += kThreads) {
    const int rr = int(p.dh_div.div(uint32_t(idx))), e = idx - rr * dh;
    dq[head + (i0 + rr) * dh + e] = t.acc[rr * old + e];
  }
}

}  // namespace

bool flash_tc_supported(const FlashShape& x) {
  if (!x.bf16_operands || x.dh % 16 != 0 || x.dh > kFlashMaxHeadDim) return false;
  // The card needs bf16 tensor cores (sm_80 on) and the shared memory of the largest block (an A100's
  // 163 KiB does not hold the backward's at dh 112 and 128: those take the fp32 form there).
  int device = 0, major = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const int dh = int(x.dh);
  return major >= 8 && size_t(optin) >= std::max(forward_tiles(0, dh).bytes, backward_tiles(0, dh, true).bytes);
}

namespace {
template <class TIn>
void tc_forward(float* out, float* lse, const TIn* q, const TIn* k, const TIn* v, const FlashShape& x,
                const AttentionDropout& drop, cudaStream_t stream) {
  const FlashArgs p = make_args(x, drop);
  const size_t bytes = forward_tiles(0, int(x.dh)).bytes;
  allow_smem(tc_forward_kernel<TIn>, bytes, "flash_attention_forward (tensor cores)");
  const dim3 grid(unsigned((x.s + kT - 1) / kT), unsigned(x.b * x.a));
  tc_forward_kernel<TIn><<<grid, kThreads, bytes, stream>>>(out, lse, q, k, v, p);
  check_launch("flash_attention_forward (tensor cores)");
}
template <class TIn>
void tc_backward(float* dq, float* dk, float* dv, const float* dout, const TIn* q, const TIn* k, const TIn* v,
                 const float* lse, const float* D, const FlashShape& x, const AttentionDropout& drop,
                 cudaStream_t stream) {
  const FlashArgs p = make_args(x, drop);
  const dim3 grid(unsigned((x.s + kT - 1) / kT), unsigned(x.b * x.a));
  const size_t b1 = backward_tiles(0, int(x.dh), true).bytes, b2 = backward_tiles(0, int(x.dh), false).bytes;
  allow_smem(tc_dkdv_kernel<TIn>, b1, "flash_attention_backward dK dV (tensor cores)");
  allow_smem(tc_dq_kernel<TIn>, b2, "flash_attention_backward dQ (tensor cores)");
  tc_dkdv_kernel<TIn><<<grid, kThreads, b1, stream>>>(dk, dv, dout, q, k, v, lse, D, p);
  check_launch("flash_attention_backward dK dV (tensor cores)");
  tc_dq_kernel<TIn><<<grid, kThreads, b2, stream>>>(dq, dout, q, k, v, lse, D, p);
  check_launch("flash_attention_backward dQ (tensor cores)");
}
}  // namespace

void flash_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashShape& x,
                      const AttentionDropout& drop, cudaStream_t stream) {
  tc_forward(out, lse, q, k, v, x, drop, stream);
}
void flash_tc_forward(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                      const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream) {
  tc_forward(out, lse, q, k, v, x, drop, stream);
}
void flash_tc_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                       const float* v, const float* lse, const float* D, const FlashShape& x,
                       const AttentionDropout& drop, cudaStream_t stream) {
  tc_backward(dq, dk, dv, dout, q, k, v, lse, D, x, drop, stream);
}
void flash_tc_backward(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q, const uint16_t* k,
                       const uint16_t* v, const float* lse, const float* D, const FlashShape& x,
                       const AttentionDropout& drop, cudaStream_t stream) {
  tc_backward(dq, dk, dv, dout, q, k, v, lse, D, x, drop, stream);
}

}  // namespace lattice::cuda
