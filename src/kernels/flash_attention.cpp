#include "kernels/flash_attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/dropout.hpp"
#include "kernels/fast_math.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

namespace {

// Queries and keys per tile. 64 × 64 fp32 scores (16 KB) plus the Q, K, V tiles stay in L1/L2;
// the register blocks below hold 4 rows × 64 columns, so tiles are whole multiples of them.
constexpr int64_t kB = 64;

// Sixteen floats, unaligned, as the compiler's vector extension: with AVX-512 one zmm register.
typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
inline v16 load16(const float* p) { return *reinterpret_cast<const v16*>(p); }
inline void store16(float* p, v16 x) { *reinterpret_cast<v16*>(p) = x; }

// S[r][0..64) = alpha · Σ_e X[r][e] · Yt[e][0..64) for R rows of X (row stride dh): 4R
// accumulators in registers, one broadcast of X per row and four loads of Yt per e.
template <int R>
inline void block_abt(float* S, const float* X, int64_t dh, const float* Yt, float alpha) {
  v16 acc[R][4] = {};
  for (int64_t e = 0; e < dh; ++e) {
    const float* y = Yt + e * kB;
    v16 y0 = load16(y), y1 = load16(y + 16), y2 = load16(y + 32), y3 = load16(y + 48);
    // Keep the four Yt vectors in registers: folded into every FMA they are reloaded R times and
    // the loads, not the FMAs, bound the loop (one core, a 64×64×64 tile: 89 → 214 GFLOP/s,
    // where oneDNN's matmul call reaches 140; docs/design.md §3.1).
    __asm__("" : "+v"(y0), "+v"(y1), "+v"(y2), "+v"(y3));
    for (int r = 0; r < R; ++r) {
      const float x = X[r * dh + e];
      acc[r][0] += x * y0, acc[r][1] += x * y1, acc[r][2] += x * y2, acc[r][3] += x * y3;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) store16(S + r * kB + 16 * c, acc[r][c] * alpha);
}

// A tile of X·Yᵀ: `rows` rows of X [rows, dh] against Yt = Yᵀ [dh, 64] (zero-padded keys).
void tile_abt(float* S, const float* X, int64_t rows, int64_t dh, const float* Yt, float alpha) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) block_abt<4>(S + r * kB, X + r * dh, dh, Yt, alpha);
  for (; r < rows; ++r) block_abt<1>(S + r * kB, X + r * dh, dh, Yt, alpha);
}

// C[r][0..16·NV) += Σ_c W[r][c] · Y[c][0..16·NV) for R rows, n terms (W rows of stride kB; with
// TW, W is stored transposed, W[r][c] at c·kB + r: a broadcast reads any address, so the backward's
// Pᵀ·dO and dSᵀ·Q need no transposed copy).
template <int R, int NV, bool TW>
inline void block_ab(float* C, int64_t ldc, const float* W, const float* Y, int64_t ldy, int64_t n) {
  v16 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = load16(C + r * ldc + 16 * v);
  for (int64_t c = 0; c < n; ++c) {
    v16 y[NV];
    for (int v = 0; v < NV; ++v) {
      y[v] = load16(Y + c * ldy + 16 * v);
      __asm__("" : "+v"(y[v]));  // in a register, not reloaded per row (as in block_abt)
    }
    for (int r = 0; r < R; ++r) {
      const float w = TW ? W[c * kB + r] : W[r * kB + c];
      for (int v = 0; v < NV; ++v) acc[r][v] += w * y[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store16(C + r * ldc + 16 * v, acc[r][v]);
}

template <int NV, bool TW>
void rows_ab(float* C, int64_t ldc, const float* W, const float* Y, int64_t ldy, int64_t rows, int64_t n) {
  const int64_t step = TW ? 1 : kB;  // where row r of W starts
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) block_ab<4, NV, TW>(C + r * ldc, ldc, W + r * step, Y, ldy, n);
  for (; r < rows; ++r) block_ab<1, NV, TW>(C + r * ldc, ldc, W + r * step, Y, ldy, n);
}

// C [rows, dh] (row stride dh) += W [rows, n] (row stride kB, or transposed: TW) · Y [n, dh].
template <bool TW = false>
void tile_ab(float* C, const float* W, const float* Y, int64_t rows, int64_t n, int64_t dh) {
  int64_t e = 0;
  for (; e + 64 <= dh; e += 64) rows_ab<4, TW>(C + e, dh, W, Y + e, dh, rows, n);
  for (; e + 16 <= dh; e += 16) rows_ab<1, TW>(C + e, dh, W, Y + e, dh, rows, n);
  for (; e < dh; ++e)
    for (int64_t r = 0; r < rows; ++r) {
      float sum = C[r * dh + e];
      for (int64_t c = 0; c < n; ++c) sum += (TW ? W[c * kB + r] : W[r * kB + c]) * Y[c * dh + e];
      C[r * dh + e] = sum;
    }
}

// Yt [dh, 64] = Yᵀ of n rows of Y [n, dh], keys n..63 zero.
void transpose_in(float* Yt, const float* Y, int64_t n, int64_t dh) {
  for (int64_t e = 0; e < dh; ++e) {
    float* row = Yt + e * kB;
    for (int64_t j = 0; j < n; ++j) row[j] = Y[j * dh + e];
    for (int64_t j = n; j < kB; ++j) row[j] = 0.0f;
  }
}

// Keys of query i visible in the key tile starting at j0 with nk keys (causal: j <= i).
inline int64_t visible(int64_t i, int64_t j0, int64_t nk) { return std::min(nk, i - j0 + 1); }

// Draws the keep flags of the nq × nk tile at (i0, j0) into keep [64, 64] (visible keys only).
// (i0, j0 global positions, s the mask's row length.)
void draw_tile(uint8_t* keep, const AttentionMaskDraw& m, uint64_t base, int64_t s, int64_t i0, int64_t nq, int64_t j0,
               int64_t nk) {
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t n = visible(i0 + r, j0, nk);
    if (n > 0) m.row(keep + r * kB, base + uint64_t(i0 + r) * uint64_t(s) + uint64_t(j0), n);
  }
}

}  // namespace

FlashBlock whole_sequence(const FlashShape& x) {
  FlashBlock w;
  w.b = x.b, w.a = x.a, w.nq = x.s, w.nk = x.s, w.dh = x.dh, w.S = x.s;
  w.q_stride = w.k_stride = x.s * x.dh, w.lse_stride = x.s;
  return w;
}

void flash_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             const FlashShape& x, const AttentionDropout& drop) {
  flash_block_forward(out, lse, q, k, v, whole_sequence(x), drop);
}

void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, const float* lse, const FlashShape& x,
                              const AttentionDropout& drop) {
  flash_block_backward(dq, dk, dv, dout, q, k, v, out, lse, whole_sequence(x), drop);
}

// What flash_block_forward and flash_block_backward below allocate (their tracked_vectors).
int64_t flash_block_forward_scratch_bytes(const FlashBlock& x, int threads) {
  const int64_t nkb = (x.nk + kB - 1) / kB, kt = x.b * x.a * nkb * x.dh * kB;  // Kᵀ, tile by tile
  const int64_t per_thread = 4 * (2 * kB * kB + kB * x.dh + 2 * kB) + kB * kB;  // S, P, acc, m, l; mask bytes
  return 4 * kt + int64_t(std::max(1, threads)) * per_thread;
}
int64_t flash_block_backward_scratch_bytes(const FlashBlock& x, int threads) {
  // S, dP, PZ; Kᵀ, Vᵀ, dK, dV tiles; D, a row sum per query; the mask bytes.
  const int64_t per_thread = 4 * (3 * kB * kB + 4 * x.dh * kB + x.nq) + kB * kB;
  return int64_t(std::max(1, threads)) * per_thread;
}

void check_flash_block(const FlashBlock& x) {
  if (x.nq > 0 && x.nk > 0 && x.k0 > x.q0)
    throw std::logic_error("flash block: its first query sees none of its keys (k0 > q0)");
}

void flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashBlock& x,
                         const AttentionDropout& drop) {
  check_flash_block(x);
  const int64_t dh = x.dh, nqb = (x.nq + kB - 1) / kB, nkb = (x.nk + kB - 1) / kB, heads = x.b * x.a;
  const int64_t items = heads * nqb;
  const float scale = 1.0f / std::sqrt(float(dh)), keep_scale = drop.p > 0 ? 1.0f / (1.0f - drop.p) : 1.0f;
  const AttentionMaskDraw drawer(drop);
  // Kᵀ tile by tile, once: every query tile of a head reads the same key tiles.
  tracked_vector<float, MemoryCategory::workspaces> kt(size_t(heads * nkb * dh * kB));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < heads * nkb; ++t) {
    const int64_t bh = t / nkb, j0 = t % nkb * kB;
    transpose_in(kt.data() + t * dh * kB, k + bh * x.k_stride + j0 * dh, std::min(kB, x.nk - j0), dh);
  }
  // Later query blocks see more keys: hand them out first so the dynamic schedule ends even.
#pragma omp parallel
  {
    tracked_vector<float, MemoryCategory::workspaces> S(kB * kB), P(kB * kB), acc(kB * dh);
    tracked_vector<float, MemoryCategory::workspaces> m(kB), l(kB);
    tracked_vector<uint8_t, MemoryCategory::workspaces> keep(kB * kB);
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t bh = item / nqb, qb = nqb - 1 - item % nqb;
      const int64_t i0 = qb * kB, nq = std::min(kB, x.nq - i0), gi0 = x.q0 + i0;  // gi0: global position
      const float* Q = q + bh * x.q_stride + i0 * dh;
      const float* V = v + bh * x.k_stride;
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      const uint64_t base = drop.p > 0 ? attention_mask_first(drop, x.a, x.S, bh) : 0;
      // causal: key tiles past the last query skipped
      for (int64_t j0 = 0; j0 < x.nk && x.k0 + j0 <= gi0 + nq - 1; j0 += kB) {
        const int64_t nk = std::min(kB, x.nk - j0), gj0 = x.k0 + j0;
        tile_abt(S.data(), Q, nq, dh, kt.data() + (bh * nkb + j0 / kB) * dh * kB, scale);
        if (drop.p > 0) draw_tile(keep.data(), drawer, base, x.S, gi0, nq, gj0, nk);
        for (int64_t r = 0; r < nq; ++r) {
          const int64_t n = visible(gi0 + r, gj0, nk);
          float* sr = S.data() + r * kB;
          float* pr = P.data() + r * kB;
          std::fill(pr + std::max<int64_t>(n, 0), pr + nk, 0.0f);
          if (n <= 0) continue;
          float mx = m[size_t(r)];
#pragma omp simd reduction(max : mx)
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, sr[j]);
          const float corr = fast_exp(m[size_t(r)] - mx);  // 0 on the first tile (-inf → exp(-87))
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < n; ++j) {
            const float e = fast_exp(sr[j] - mx);
            sum += e;
            pr[j] = e;
          }
          if (drop.p > 0) {
            const uint8_t* kr = keep.data() + r * kB;
            for (int64_t j = 0; j < n; ++j) pr[j] = kr[j] ? pr[j] * keep_scale : 0.0f;
          }
          l[size_t(r)] = l[size_t(r)] * corr + sum;
          m[size_t(r)] = mx;
          if (corr != 1.0f) {
            float* ar = acc.data() + r * dh;
            for (int64_t e = 0; e < dh; ++e) ar[e] *= corr;
          }
        }
        tile_ab(acc.data(), P.data(), V + j0 * dh, nq, nk, dh);
      }
      for (int64_t r = 0; r < nq; ++r) {
        const float inv = 1.0f / l[size_t(r)];
        float* o = out + bh * x.q_stride + (i0 + r) * dh;
        float* L = lse + bh * x.lse_stride + i0 + r;
        const float block_lse = m[size_t(r)] + std::log(l[size_t(r)]);
        if (!x.merge) {
          for (int64_t e = 0; e < dh; ++e) o[e] = acc[size_t(r * dh + e)] * inv;
          *L = block_lse;
          continue;
        }
        // Two blocks' softmaxes over disjoint keys, each normalised by its own sum: weighted by
        // their shares of the combined sum, exp(lse_i − lse), they are the softmax over both.
        const float top = std::max(*L, block_lse);
        const float w_old = std::exp(*L - top), w_new = std::exp(block_lse - top), total = w_old + w_new;
        const float a_old = w_old / total, a_new = w_new / total * inv;
        for (int64_t e = 0; e < dh; ++e) o[e] = o[e] * a_old + acc[size_t(r * dh + e)] * a_new;
        *L = top + std::log(total);
      }
    }
  }
}

void flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const FlashBlock& x,
                          const AttentionDropout& drop) {
  check_flash_block(x);
  const int64_t dh = x.dh, heads = x.b * x.a;
  const float scale = 1.0f / std::sqrt(float(dh)), keep_scale = drop.p > 0 ? 1.0f / (1.0f - drop.p) : 1.0f;
  const AttentionMaskDraw drawer(drop);
  // One head per work item: its dK, dV tiles and its dQ rows are written by one thread only.
#pragma omp parallel
  {
    tracked_vector<float, MemoryCategory::workspaces> S(kB * kB), dP(kB * kB), PZ(kB * kB), Kt(dh * kB), Vt(dh * kB);
    tracked_vector<float, MemoryCategory::workspaces> dK(kB * dh), dV(kB * dh), D(static_cast<size_t>(x.nq));
    tracked_vector<uint8_t, MemoryCategory::workspaces> keep(kB * kB);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const int64_t qh = bh * x.q_stride, kh = bh * x.k_stride;
      const float* L = lse + bh * x.lse_stride;
      // D_i = Σ_e dO_ie · O_ie = Σ_j P_ij · dP_ij (the softmax backward's row term, dropout included).
      for (int64_t i = 0; i < x.nq; ++i) {
        float sum = 0.0f;
        for (int64_t e = 0; e < dh; ++e) sum += dout[qh + i * dh + e] * out[qh + i * dh + e];
        D[size_t(i)] = sum;
      }
      if (!x.merge) std::fill(dq + qh, dq + qh + x.nq * dh, 0.0f);
      const uint64_t base = drop.p > 0 ? attention_mask_first(drop, x.a, x.S, bh) : 0;
      for (int64_t j0 = 0; j0 < x.nk; j0 += kB) {
        const int64_t nk = std::min(kB, x.nk - j0), gj0 = x.k0 + j0;
        transpose_in(Kt.data(), k + kh + j0 * dh, nk, dh);
        transpose_in(Vt.data(), v + kh + j0 * dh, nk, dh);
        std::fill(dK.begin(), dK.end(), 0.0f);
        std::fill(dV.begin(), dV.end(), 0.0f);
        // causal: query tiles that end before key gj0 see none of it
        for (int64_t i0 = std::max<int64_t>(gj0 - x.q0, 0) / kB * kB; i0 < x.nq; i0 += kB) {
          const int64_t nq = std::min(kB, x.nq - i0), gi0 = x.q0 + i0;
          const float* Q = q + qh + i0 * dh;
          const float* dO = dout + qh + i0 * dh;
          tile_abt(S.data(), Q, nq, dh, Kt.data(), scale);
          tile_abt(dP.data(), dO, nq, dh, Vt.data(), 1.0f);  // d(dropout output) = dO · Vᵀ
          if (drop.p > 0) draw_tile(keep.data(), drawer, base, x.S, gi0, nq, gj0, nk);
          for (int64_t r = 0; r < nq; ++r) {
            const int64_t n = std::max<int64_t>(visible(gi0 + r, gj0, nk), 0);
            const float li = L[i0 + r], di = D[size_t(i0 + r)];
            float *sr = S.data() + r * kB, *dr = dP.data() + r * kB, *zr = PZ.data() + r * kB;
            const uint8_t* kr = keep.data() + r * kB;
            for (int64_t j = 0; j < n; ++j) {
              const float p = fast_exp(sr[j] - li);
              const float z = drop.p > 0 ? (kr[j] ? keep_scale : 0.0f) : 1.0f;
              zr[j] = p * z;                             // dropout output, for dV
              sr[j] = p * (dr[j] * z - di) * scale;      // dS / √dh, for dQ and dK
            }
            std::fill(zr + n, zr + nk, 0.0f);
            std::fill(sr + n, sr + nk, 0.0f);
          }
          tile_ab<true>(dV.data(), PZ.data(), dO, nk, nq, dh);    // dV_j += (P∘Z)ᵀ · dO_i
          tile_ab(dq + qh + i0 * dh, S.data(), k + kh + j0 * dh, nq, nk, dh);  // dQ_i += dS · K_j
          tile_ab<true>(dK.data(), S.data(), Q, nk, nq, dh);      // dK_j += dSᵀ · Q_i
        }
        float* dk_tile = dk + kh + j0 * dh;
        float* dv_tile = dv + kh + j0 * dh;
        if (x.merge) {
          for (int64_t i = 0; i < nk * dh; ++i) dk_tile[i] += dK[size_t(i)], dv_tile[i] += dV[size_t(i)];
        } else {
          std::copy(dK.begin(), dK.begin() + nk * dh, dk_tile);
          std::copy(dV.begin(), dV.begin() + nk * dh, dv_tile);
        }
      }
    }
  }
}

}  // namespace lattice
