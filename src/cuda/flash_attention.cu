// Fused causal attention on the device (cuda/flash_attention.hpp): its fp32 form on the CUDA cores (the
// bf16 tensor-core form is cuda/flash_attention_tc.cu, which the two calls at the end dispatch to).
// Thread layout in every kernel: 256 threads, thread t serves tile row t / 4 ("row") with its quarter
// q = t % 4; the quarter owns the 16 consecutive tile columns q·16 .. q·16 + 15 of the score tile and
// the head-dimension columns q, q + 4, q + 8, ... of the outputs. The four threads of a row are
// adjacent lanes of one warp, so a row's max and sum are two xor-shuffles, and a row written to shared
// memory by them is read back after a __syncwarp. Past the usual length on purpose: the forward and
// the two backward kernels share this thread layout and their tiles' shared-memory plan.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/common.cuh"
#include "cuda/flash_attention.hpp"
#include "cuda/flash_common.cuh"
#include "random/philox_core.hpp"

namespace lattice::cuda {
using namespace detail;
using namespace flash;

namespace {

constexpr int kT = 64;          // queries and keys per tile
constexpr int kThreads = 256;   // 4 threads per tile row
constexpr int kPLd = kT + 1;    // row stride of the 64 × 64 probability / dS tiles (padded: no bank conflicts)

// Rows [0, 64) of a tile of X [*, dh] starting at row r0 (n rows valid, the rest zero) into shared
// memory with row stride ld = dh + 1.
__device__ __forceinline__ void load_tile(float* dst, const float* src, int64_t n, const FastDivisor& dh_div,
                                          int64_t ld) {
  const int64_t dh = dh_div.d;
  for (int64_t idx = threadIdx.x; idx < kT * dh; idx += kThreads) {
    const int64_t r = dh_div.div(uint32_t(idx)), e = idx - r * dh;
    dst[r * ld + e] = r < n ? src[r * dh + e] : 0.0f;
  }
}

// Σ_e X[e]·Y[e] over the head dimension in ascending order (as the CPU's tile_abt).
__device__ __forceinline__ float dot(const float* x, const float* y, int64_t dh) {
  float acc = 0.0f;
  for (int64_t e = 0; e < dh; ++e) acc = fmaf(x[e], y[e], acc);
  return acc;
}

// ---- forward: one block per (query tile, b·a); NC = output columns per thread (dh <= 4·NC) ----
template <int NC>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(float* out, float* lse, const float* q,
                                                                 const float* k, const float* v, FlashArgs p) {
  extern __shared__ float smem[];
  const int64_t s = p.s, dh = p.dh, ld = dh + 1;
  float* Qs = smem;
  float* Ks = Qs + kT * ld;
  float* Vs = Ks + kT * ld;
  float* Ps = Vs + kT * ld;  // [64][kPLd]
  const int64_t qb = int64_t(gridDim.x) - 1 - blockIdx.x;  // the longest rows first
  const int64_t bh = blockIdx.y, head = bh * s * dh, i0 = qb * kT, nq = min(int64_t(kT), s - i0);
  const int r = int(threadIdx.x) >> 2, quad = int(threadIdx.x) & 3;
  const int64_t i = i0 + r;
  const bool row_ok = r < nq;
  load_tile(Qs, q + head + i0 * dh, nq, p.dh_div, ld);
  const uint64_t base = p.dropout ? mask_base(p, bh) : 0;
  float m = -__int_as_float(0x7f800000), l = 0.0f, acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.0f;

  for (int64_t j0 = 0; j0 < i0 + nq; j0 += kT) {  // causal: key tiles past the tile's last query skipped
    const int64_t nk = min(int64_t(kT), s - j0);
    __syncthreads();  // the previous tile's K, V reads are done
    load_tile(Ks, k + head + j0 * dh, nk, p.dh_div, ld);
    load_tile(Vs, v + head + j0 * dh, nk, p.dh_div, ld);
    __syncthreads();
    // Keys j0 .. j0 + n - 1 are visible to query i (j <= i); n is the same for the row's four threads.
    const int64_t n = row_ok ? max(int64_t(0), min(nk, i - j0 + 1)) : 0;
    float sc[16];
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) sc[kk] = dot(Qs + r * ld, Ks + (quad * 16 + kk) * ld, dh) * p.scale;
    const float corr = online_softmax_step(sc, n, quad, row_keep_bits(p, base, i, j0, quad, n), p, m, l,
                                           [&](int jl, float e) { Ps[r * kPLd + jl] = e; });
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] *= corr;
    __syncwarp();  // the row's probabilities, written by its four lanes, are read by all four
    for (int jl = 0; jl < nk; ++jl) {
      const float pj = Ps[r * kPLd + jl];
      const float* vr = Vs + jl * ld + quad;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (quad + 4 * c < dh) acc[c] = fmaf(pj, vr[4 * c], acc[c]);
    }
  }
  if (!row_ok) return;
  const float inv = 1.0f / l;
  float* o = out + head + i * dh + quad;
#pragma unroll
  for (int c = 0; c < NC; ++c)
    if (quad + 4 * c < dh) o[4 * c] = acc[c] * inv;
  if (quad == 0) lse[bh * s + i] = m + logf(l);
}

// ---- backward 1: D[row] = Σ_e dO·O, one warp per row (lanes strided, then the warp's fixed tree) ----
// dout16 non-null (the tensor-core form's backward): dO also rounded to bf16 there, in the same read.
// A warp a row of the head layout (bh·s + i). ROWS: dO and O are read from the token rows [b, s, a·dh]
// (fp32 dO, bf16 O), the same values at the same place in the sum, so the same D and dout16.
template <bool ROWS, class TO>
__global__ void flash_rowdot_kernel(float* D, uint16_t* dout16, const float* dout, const TO* out, int64_t rows,
                                    int64_t dh, int64_t s, int64_t a) {
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = int(threadIdx.x) & 31;
  if (warp >= rows) return;  // whole warps leave together
  int64_t src = warp * dh;
  if (ROWS) {
    // Row (bh, i) sits at token row bi·s + i, head hd. 32-bit divisions where the counts allow (every
    // lane makes them; four 64-bit ones took some 300 instructions a row).
    int64_t bi, hd, i;
    if (rows <= int64_t(0xffffffffu) && a <= int64_t(0xffffffffu)) {
      const uint32_t w = uint32_t(warp), su = uint32_t(s), au = uint32_t(a);
      const uint32_t bh = w / su, b32 = bh / au;
      i = int64_t(w - bh * su), bi = int64_t(b32), hd = int64_t(bh - b32 * au);
    } else {
      const int64_t bh = warp / s;
      i = warp - bh * s, bi = bh / a, hd = bh - bi * a;
    }
    src = ((bi * s + i) * a + hd) * dh;
  }
  // A lane's columns (at most kFlashMaxHeadDim / 32) loaded before the first dout16 store: a store
  // the compiler cannot prove apart from dout and out kept each later load behind it. The same sum in
  // the same order, so the same D and dout16.
  constexpr int kPerLane = int(kFlashMaxHeadDim / 32);
  float d[kPerLane] = {}, o[kPerLane] = {};
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t e = lane + 32 * u;
    if (e < dh) d[u] = dout[src + e], o[u] = load_f32(out, src + e);
  }
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t e = lane + 32 * u;
    if (e >= dh) break;
    if (dout16) dout16[warp * dh + e] = to_bf16_bits(d[u]);
    acc = fmaf(d[u], o[u], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) D[warp] = acc;
}

// ---- backward 2: dK, dV of one key tile, walking its query tiles ----
// Thread row = key jr of the tile; its quarter's 16 queries; dK, dV columns quad + 4c.
template <int NC>
__global__ void __launch_bounds__(kThreads) flash_dkdv_kernel(float* dk, float* dv, const float* dout,
                                                              const float* q, const float* k, const float* v,
                                                              const float* lse, const float* D, FlashArgs p) {
  extern __shared__ float smem[];
  const int64_t s = p.s, dh = p.dh, ld = dh + 1;
  float* Ks = smem;
  float* Vs = Ks + kT * ld;
  float* Qs = Vs + kT * ld;
  float* dOs = Qs + kT * ld;
  float* PZt = dOs + kT * ld;   // [key][query]: the dropout output P∘Z, for dV
  float* dSt = PZt + kT * kPLd;  // [key][query]: dS (·1/√dh), for dK
  float* Ls = dSt + kT * kPLd;   // the query tile's log-sum-exp
  float* Ds = Ls + kT;           // and its D
  uint32_t* keep = reinterpret_cast<uint32_t*>(Ds + kT);  // [query][quarter of the keys]: 16 flags each
  const int64_t bh = blockIdx.y, head = bh * s * dh, j0 = int64_t(blockIdx.x) * kT, nk = min(int64_t(kT), s - j0);
  const int jr = int(threadIdx.x) >> 2, quad = int(threadIdx.x) & 3;
  const int64_t j = j0 + jr;
  load_tile(Ks, k + head + j0 * dh, nk, p.dh_div, ld);
  load_tile(Vs, v + head + j0 * dh, nk, p.dh_div, ld);
  const uint64_t base = p.dropout ? mask_base(p, bh) : 0;
  float adk[NC], adv[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) adk[c] = 0.0f, adv[c] = 0.0f;

  for (int64_t i0 = j0; i0 < s; i0 += kT) {  // causal: query tiles before the key tile see none of it
    const int64_t nq = min(int64_t(kT), s - i0);
    __syncthreads();  // the previous query tile's reads are done
    load_tile(Qs, q + head + i0 * dh, nq, p.dh_div, ld);
    load_tile(dOs, dout + head + i0 * dh, nq, p.dh_div, ld);
    if (threadIdx.x < kT) {
      const bool ok = int64_t(threadIdx.x) < nq;
      Ls[threadIdx.x] = ok ? lse[bh * s + i0 + threadIdx.x] : 0.0f;
      Ds[threadIdx.x] = ok ? D[bh * s + i0 + threadIdx.x] : 0.0f;
    }
    if (p.dropout) {  // thread (query row jr, quarter) draws that row's 16 flags of this key tile
      const int64_t iq = i0 + jr;
      keep[jr * 4 + quad] =
          jr < nq ? keep_bits16(p.words, p.threshold, base + uint64_t(iq) * uint64_t(s) + uint64_t(j0 + quad * 16)) : 0u;
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < 16; ++kk) {
      const int il = quad * 16 + kk;
      const int64_t iq = i0 + il;
      float pz = 0.0f, ds = 0.0f;
      if (jr < nk && il < nq && j <= iq) {
        const float sv = dot(Qs + il * ld, Ks + jr * ld, dh) * p.scale;
        const float dp = dot(dOs + il * ld, Vs + jr * ld, dh);  // d(dropout output) = dO · Vᵀ
        const float pr = fast_exp(sv - Ls[il]);
        const float z = p.dropout ? (((keep[il * 4 + (jr >> 4)] >> (jr & 15)) & 1u) ? p.keep_scale : 0.0f) : 1.0f;
        pz = pr * z;
        ds = pr * (dp * z - Ds[il]) * p.scale;
      }
      PZt[jr * kPLd + il] = pz;
      dSt[jr * kPLd + il] = ds;
    }
    __syncwarp();
    for (int il = 0; il < nq; ++il) {  // dV_j += (P∘Z)ᵀ·dO, dK_j += dSᵀ·Q: queries in order
      const float pz = PZt[jr * kPLd + il], ds = dSt[jr * kPLd + il];
      const float* dor = dOs + il * ld + quad;
      const float* qr = Qs + il * ld + quad;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (quad + 4 * c < dh) adv[c] = fmaf(pz, dor[4 * c], adv[c]), adk[c] = fmaf(ds, qr[4 * c], adk[c]);
    }
  }
  if (jr >= nk) return;
  float* dkr = dk + head + j * dh + quad;
  float* dvr = dv + head + j * dh + quad;
#pragma unroll
  for (int c = 0; c < NC; ++c)
    if (quad + 4 * c < dh) dkr[4 * c] = adk[c], dvr[4 * c] = adv[c];
}

// ---- backward 3: dQ of one query tile, walking its key tiles ----
template <int NC>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(float* dq, const float* dout, const float* q,
                                                            const float* k, const float* v, const float* lse,
                                                            const float* D, FlashArgs p) {
  extern __shared__ float smem[];
  const int64_t s = p.s, dh = p.dh, ld = dh + 1;
  float* Qs = smem;
  float* dOs = Qs + kT * ld;
  float* Ks = dOs + kT * ld;
  float* Vs = Ks + kT * ld;
  float* dSs = Vs + kT * ld;  // [query][key]
  const int64_t qb = int64_t(gridDim.x) - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, head = bh * s * dh, i0 = qb * kT, nq = min(int64_t(kT), s - i0);
  const int r = int(threadIdx.x) >> 2, quad = int(threadIdx.x) & 3;
  const int64_t i = i0 + r;
  const bool row_ok = r < nq;
  load_tile(Qs, q + head + i0 * dh, nq, p.dh_div, ld);
  load_tile(dOs, dout + head + i0 * dh, nq, p.dh_div, ld);
  const float li = row_ok ? lse[bh * s + i] : 0.0f, di = row_ok ? D[bh * s + i] : 0.0f;
  const uint64_t base = p.dropout ? mask_base(p, bh) : 0;
  float acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.0f;

  for (int64_t j0 = 0; j0 < i0 + nq; j0 += kT) {
    const int64_t nk = min(int64_t(kT), s - j0);
    __syncthreads();
    load_tile(Ks, k + head + j0 * dh, nk, p.dh_div, ld);
    load_tile(Vs, v + head + j0 * dh, nk, p.dh_div, ld);
    __syncthreads();
    const int64_t n = row_ok ? max(int64_t(0), min(nk, i - j0 + 1)) : 0;
    const uint32_t keep = row_keep_bits(p, base, i, j0, quad, n);
#pragma unroll 4
    for (int kk = 0; kk < 16; ++kk) {
      const int jl = quad * 16 + kk;
      float ds = 0.0f;
      if (jl < n) {
        const float sv = dot(Qs + r * ld, Ks + jl * ld, dh) * p.scale;
        const float dp = dot(dOs + r * ld, Vs + jl * ld, dh);
        const float pr = fast_exp(sv - li);
        const float z = keep_factor(p, keep, kk);
        ds = pr * (dp * z - di) * p.scale;
      }
      dSs[r * kPLd + jl] = ds;
    }
    __syncwarp();
    for (int jl = 0; jl < nk; ++jl) {  // dQ_i += dS·K: keys in order
      const float ds = dSs[r * kPLd + jl];
      const float* kr = Ks + jl * ld + quad;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (quad + 4 * c < dh) acc[c] = fmaf(ds, kr[4 * c], acc[c]);
    }
  }
  if (!row_ok) return;
  float* o = dq + head + i * dh + quad;
#pragma unroll
  for (int c = 0; c < NC; ++c)
    if (quad + 4 * c < dh) o[4 * c] = acc[c];
}

size_t forward_smem(int64_t dh) { return size_t(3 * kT * (dh + 1) + kT * kPLd) * sizeof(float); }
size_t dkdv_smem(int64_t dh) { return size_t(4 * kT * (dh + 1) + 2 * kT * kPLd + 2 * kT + 4 * kT) * sizeof(float); }
size_t dq_smem(int64_t dh) { return size_t(4 * kT * (dh + 1) + kT * kPLd) * sizeof(float); }

void require_supported(const FlashShape& x, const char* what) {
  const std::string why = flash_attention_unsupported(x);
  if (!why.empty()) throw std::invalid_argument(std::string("CUDA: ") + what + ": " + why);
}

template <int NC>
void forward_launch(float* out, float* lse, const float* q, const float* k, const float* v, const FlashShape& x,
                    const FlashArgs& p, cudaStream_t stream) {
  const size_t bytes = forward_smem(x.dh);
  allow_smem(flash_forward_kernel<NC>, bytes, "flash_attention_forward");
  const dim3 grid(unsigned((x.s + kT - 1) / kT), unsigned(x.b * x.a));
  flash_forward_kernel<NC><<<grid, kThreads, bytes, stream>>>(out, lse, q, k, v, p);
  check_launch("flash_attention_forward");
}

template <int NC>
void backward_launch(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                     const float* v, const float* lse, const float* D, const FlashShape& x, const FlashArgs& p,
                     cudaStream_t stream) {
  const dim3 grid(unsigned((x.s + kT - 1) / kT), unsigned(x.b * x.a));
  const size_t b1 = dkdv_smem(x.dh), b2 = dq_smem(x.dh);
  allow_smem(flash_dkdv_kernel<NC>, b1, "flash_attention_backward dK dV");
  allow_smem(flash_dq_kernel<NC>, b2, "flash_attention_backward dQ");
  flash_dkdv_kernel<NC><<<grid, kThreads, b1, stream>>>(dk, dv, dout, q, k, v, lse, D, p);
  check_launch("flash_attention_backward dK dV");
  flash_dq_kernel<NC><<<grid, kThreads, b2, stream>>>(dq, dout, q, k, v, lse, D, p);
  check_launch("flash_attention_backward dQ");
}

}  // namespace

std::string flash_attention_unsupported(const FlashShape& x) {
  if (x.b < 0 || x.a < 0 || x.s < 0) return "negative shape";
  if (x.dh < 1 || x.dh > kFlashMaxHeadDim)
    return "head dimension " + std::to_string(x.dh) + " outside 1.." + std::to_string(kFlashMaxHeadDim) +
           " (the fused CUDA attention holds 64-row tiles of dh + 1 floats in shared memory)";
  if (x.b * x.a > 65535) return "b·a = " + std::to_string(x.b * x.a) + " heads past the grid's 65535";
  if ((x.s + kT - 1) / kT > int64_t(0x7fffffff)) return "sequence too long";
  return {};
}

void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream) {
  require_supported(x, "flash_attention_forward");
  if (x.b * x.a * x.s == 0) return;
  if (flash_tc_supported(x)) return flash_tc_forward(out, lse, q, k, v, x, drop, stream);
  const FlashArgs p = make_args(x, drop);
  if (x.dh <= 32)
    forward_launch<8>(out, lse, q, k, v, x, p, stream);
  else if (x.dh <= 64)
    forward_launch<16>(out, lse, q, k, v, x, p, stream);
  else
    forward_launch<32>(out, lse, q, k, v, x, p, stream);
}

namespace {
// The backward's scratch: D, then (tensor-core shapes) dO in bf16, 256-byte aligned.
size_t rowdot_bytes(const FlashShape& x) {
  return (size_t(std::max<int64_t>(0, x.b * x.a * x.s)) * sizeof(float) + 255) / 256 * 256;
}
}  // namespace

size_t flash_attention_backward_workspace_bytes(const FlashShape& x) {
  const size_t dout16 = flash_tc_shape(x) ? size_t(std::max<int64_t>(0, x.b * x.a * x.s * x.dh)) * sizeof(uint16_t) : 0;
  return rowdot_bytes(x) + dout16;
}

namespace {
// D = rowsum(dO ∘ O) into the workspace (both forms' backward reads it), and dO rounded to bf16 into
// dout16 where given (the tensor-core form's, dout16_room).
template <bool ROWS = false, class TO = float>
float* backward_rowdot(const float* dout, const TO* out, const FlashShape& x, Workspace ws, uint16_t* dout16,
                       cudaStream_t stream) {
  const int64_t rows = x.b * x.a * x.s;
  if (ws.bytes < flash_attention_backward_workspace_bytes(x) || !ws.data)
    throw std::runtime_error("CUDA: flash_attention_backward: workspace of " + std::to_string(ws.bytes) +
                             " bytes, needs " + std::to_string(flash_attention_backward_workspace_bytes(x)));
  float* D = static_cast<float*>(ws.data);  // the dO copy follows at rowdot_bytes (dout16_room)
  const int64_t threads = rows * 32;
  flash_rowdot_kernel<ROWS><<<unsigned((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(D, dout16, dout, out,
                                                                                             rows, x.dh, x.s, x.a);
  check_launch("flash_attention_backward D");
  return D;
}
uint16_t* dout16_room(const FlashShape& x, Workspace ws) {
  return reinterpret_cast<uint16_t*>(static_cast<char*>(ws.data) + rowdot_bytes(x));
}
void require_tc(const FlashShape& x, const char* what) {
  if (!flash_tc_supported(x))
    throw std::invalid_argument(std::string("CUDA: ") + what +
                                ": bf16 operands need the tensor-core form (bf16 operands flagged, dh a multiple of "
                                "16 up to 128, s below 2^31, a card from sm_80 with the shared memory)");
}
}  // namespace

void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const FlashShape& x,
                              const AttentionDropout& drop, Workspace ws, cudaStream_t stream) {
  require_supported(x, "flash_attention_backward");
  if (x.b * x.a * x.s == 0) return;
  const bool tc = flash_tc_supported(x);
  uint16_t* dout16 = tc ? dout16_room(x, ws) : nullptr;
  const float* D = backward_rowdot(dout, out, x, ws, dout16, stream);
  if (tc) return flash_tc_backward(dq, dk, dv, dout16, q, k, v, lse, D, x, drop, stream);
  const FlashArgs p = make_args(x, drop);
  if (x.dh <= 32)
    backward_launch<8>(dq, dk, dv, dout, q, k, v, lse, D, x, p, stream);
  else if (x.dh <= 64)
    backward_launch<16>(dq, dk, dv, dout, q, k, v, lse, D, x, p, stream);
  else
    backward_launch<32>(dq, dk, dv, dout, q, k, v, lse, D, x, p, stream);
}

void flash_attention_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                  const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream) {
  require_supported(x, "flash_attention_forward");
  if (x.b * x.a * x.s == 0) return;
  require_tc(x, "flash_attention_forward");
  flash_tc_forward(out, lse, q, k, v, x, drop, stream);
}
void flash_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                                   const uint16_t* k, const uint16_t* v, const float* out, const float* lse,
                                   const FlashShape& x, const AttentionDropout& drop, Workspace ws,
                                   cudaStream_t stream) {
  require_supported(x, "flash_attention_backward");
  if (x.b * x.a * x.s == 0) return;
  require_tc(x, "flash_attention_backward");
  uint16_t* dout16 = dout16_room(x, ws);
  const float* D = backward_rowdot(dout, out, x, ws, dout16, stream);
  flash_tc_backward(dq, dk, dv, dout16, QkvBits{q, k, v}, lse, D, x, drop, stream);
}

void flash_attention_forward_rows_bf16(uint16_t* out_rows, float* lse, const QkvBits& in, const FlashShape& x,
                                       const AttentionDropout& drop, cudaStream_t stream) {
  require_supported(x, "flash_attention_forward");
  if (x.b * x.a * x.s == 0) return;
  require_tc(x, "flash_attention_forward");
  flash_tc_forward_rows(out_rows, lse, in, x, drop, stream);
}
void flash_attention_backward_rows_bf16(float* dq, float* dk, float* dv, const float* dout_rows, const QkvBits& in,
                                        const uint16_t* out_rows, const float* lse, const FlashShape& x,
                                        const AttentionDropout& drop, Workspace ws, cudaStream_t stream) {
  require_supported(x, "flash_attention_backward");
  if (x.b * x.a * x.s == 0) return;
  require_tc(x, "flash_attention_backward");
  uint16_t* dout16 = dout16_room(x, ws);
  const float* D = backward_rowdot<true>(dout_rows, out_rows, x, ws, dout16, stream);
  flash_tc_backward(dq, dk, dv, dout16, in, lse, D, x, drop, stream);
}

bool flash_qkv_rows_supported(const FlashShape& x) { return x.s % kColumnChunkRows == 0 && flash_tc_supported(x); }
namespace {
// After the backward's scratch: the column sums' partials, one row of 3·a·dh per 64-row chunk.
size_t qkv_partial_offset(const FlashShape& x) { return (flash_attention_backward_workspace_bytes(x) + 255) / 256 * 256; }
}  // namespace
size_t flash_attention_backward_qkv_rows_workspace_bytes(const FlashShape& x) {
  return qkv_partial_offset(x) + size_t(std::max<int64_t>(0, column_chunks(x.b * x.s) * 3 * x.a * x.dh)) * sizeof(float);
}
void flash_attention_backward_qkv_rows_bf16(uint16_t* dqkv16, float* db, const float* dout_rows, const QkvBits& in,
                                            const uint16_t* out_rows, const float* lse, const FlashShape& x,
                                            const AttentionDropout& drop, Workspace ws, cudaStream_t stream) {
  require_supported(x, "flash_attention_backward");
  if (x.b * x.a * x.s == 0) return;
  if (!flash_qkv_rows_supported(x))
    throw std::invalid_argument("CUDA: flash_attention_backward: the QKV rows need the tensor-core form and s a "
                                "multiple of 64");
  if (ws.bytes < flash_attention_backward_qkv_rows_workspace_bytes(x) || !ws.data)
    throw std::runtime_error("CUDA: flash_attention_backward: workspace of " + std::to_string(ws.bytes) +
                             " bytes, needs " + std::to_string(flash_attention_backward_qkv_rows_workspace_bytes(x)));
  uint16_t* dout16 = dout16_room(x, ws);
  const float* D = backward_rowdot<true>(dout_rows, out_rows, x, ws, dout16, stream);
  float* partial = reinterpret_cast<float*>(static_cast<char*>(ws.data) + qkv_partial_offset(x));
  flash_tc_backward_qkv_rows(dqkv16, partial, dout16, in, lse, D, x, drop, stream);
  const int64_t cols = 3 * x.a * x.dh, chunks = column_chunks(x.b * x.s);
  column_reduce_kernel<<<column_group_grid(cols), kReduceWarps * 32, 0, stream>>>(db, partial, cols, chunks);
  check_launch("flash_attention_backward QKV bias sums");
}

}  // namespace lattice::cuda
