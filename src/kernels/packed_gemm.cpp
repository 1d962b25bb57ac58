#include "kernels/packed_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace lattice {

#ifdef __AVX512F__
namespace {

// Register block 8 rows × 32 columns: 16 zmm accumulators, two B loads and eight broadcasts per k.
// Cache blocks chosen by measurement at the GPT-2-small shapes (bench/bench_gemm_candidates.cpp):
// KC 384 beat 192 on every large-K shape; NC bounds the packed B block (and so the workspace) and
// is wide enough that no thread packs A twice at these shapes.
constexpr int64_t kMR = 8, kNR = 32;
constexpr int64_t kKC = 384, kMC = 128, kNC = 1536;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct Strided {  // element (i, j) of op(X) is p[i·rs + j·cs]
  const float* p;
  int64_t rs, cs;
};

// c[8][32] = alpha · Σ_k a[k][·] ⊗ b[k][·] (+ bias) (+ c when add).
inline void micro_8x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                       const float* bias, bool add) {
  __m512 acc[kMR][2];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += kMR;
    b += kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 bias0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = _mm512_fmadd_ps(va, acc[r][0], bias0), v1 = _mm512_fmadd_ps(va, acc[r][1], bias1);
    if (add) v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cr)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cr + 16));
    _mm512_storeu_ps(cr, v0);
    _mm512_storeu_ps(cr + 16, v1);
  }
}

// dst[k][r] = src[r·ld + k] for an 8×8 block: the rows of a row-major A become the panel's columns.
inline void transpose_8x8(const float* src, int64_t ld, float* dst) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * 8, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * 8, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// Rows [i0, i0 + mc) of op(A), depth [p0, p0 + kc), as panels [kc][8]; rows at or past M are zero.
void pack_a(const Strided& A, int64_t M, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t ip = 0; ip < mc; ip += kMR, dst += kMR * kc) {
    const int64_t rows = std::min(kMR, M - (i0 + ip));
    if (A.rs == 1 && rows == kMR) {
      for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * kMR, A.p + (i0 + ip) + (p0 + k) * A.cs, kMR * 4);
      continue;
    }
    if (A.cs == 1 && rows == kMR) {  // row-major A: 8×8 transposes, then the depth's tail one by one
      const float* src = A.p + (i0 + ip) * A.rs + p0;
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) transpose_8x8(src + k, A.rs, dst + k * kMR);
      for (; k < kc; ++k)
        for (int64_t r = 0; r < kMR; ++r) dst[k * kMR + r] = src[r * A.rs + k];
      continue;
    }
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = 0.0f;
        continue;
      }
      const float* src = A.p + (i0 + ip + r) * A.rs + p0 * A.cs;
      for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = src[k * A.cs];
    }
  }
}

// Columns [j0, j0 + nc) of op(B), depth [p0, p0 + kc), as panels [kc][32]; columns at or past N are zero.
void pack_b(const Strided& B, int64_t N, int64_t j0, int64_t nc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t jp = 0; jp < nc; jp += kNR, dst += kNR * kc) {
    const int64_t cols = std::min(kNR, N - (j0 + jp));
    if (B.cs == 1 && cols == kNR) {
      for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * kNR, B.p + (p0 + k) * B.rs + j0 + jp, kNR * 4);
      continue;
    }
    for (int64_t j = 0; j < kNR; ++j) {
      if (j >= cols) {
        for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = 0.0f;
        continue;
      }
      const float* src = B.p + p0 * B.rs + (j0 + jp + j) * B.cs;
      for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = src[k * B.rs];
    }
  }
}

// An edge block (rows < 8 or cols < 32) goes through a full tile so the microkernel stays branch-free.
void micro_edge(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows, int64_t cols,
                float alpha, const float* bias, bool add) {
  alignas(64) float tile[kMR * kNR] = {};
  alignas(64) float bias_tile[kNR] = {};
  if (bias) std::memcpy(bias_tile, bias, size_t(cols) * 4);
  if (add)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(tile + r * kNR, c + r * ldc, size_t(cols) * 4);
  micro_8x32(kc, a, b, tile, kNR, alpha, bias ? bias_tile : nullptr, add);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(c + r * ldc, tile + r * kNR, size_t(cols) * 4);
}

// One thread's columns [j_begin, j_end) of C.
void gemm_columns(const GemmShape& s, const Strided& A, const Strided& B, float* C, const float* bias,
                  int64_t j_begin, int64_t j_end, float* ap, float* bp) {
  for (int64_t jc = j_begin; jc < j_end; jc += kNC) {
    const int64_t nc = round_up(std::min(kNC, j_end - jc), kNR);
    for (int64_t pc = 0; pc < s.K; pc += kKC) {
      const int64_t kc = std::min(kKC, s.K - pc);
      pack_b(B, s.N, jc, nc, pc, kc, bp);
      const bool add = pc > 0 || s.accumulate;
      const float* block_bias = pc == 0 ? bias : nullptr;  // added once, with the first depth block
      for (int64_t ic = 0; ic < s.M; ic += kMC) {
        const int64_t mc = round_up(std::min(kMC, s.M - ic), kMR);
        pack_a(A, s.M, ic, mc, pc, kc, ap);
        for (int64_t jp = 0; jp < nc; jp += kNR) {
          const int64_t cols = std::min(kNR, s.N - (jc + jp));
          const float* panel_bias = block_bias ? block_bias + jc + jp : nullptr;
          for (int64_t ip = 0; ip < mc; ip += kMR) {
            const int64_t rows = std::min(kMR, s.M - (ic + ip));
            float* cp = C + (ic + ip) * s.N + jc + jp;
            if (rows == kMR && cols == kNR)
              micro_8x32(kc, ap + ip * kc, bp + jp * kc, cp, s.N, s.alpha, panel_bias, add);
            else
              micro_edge(kc, ap + ip * kc, bp + jp * kc, cp, s.N, rows, cols, s.alpha, panel_bias, add);
          }
        }
      }
    }
  }
}

}  // namespace

bool packed_gemm_available() { return true; }
int64_t packed_gemm_workspace_bytes_per_thread() { return (kKC * kMC + kKC * kNC) * int64_t(sizeof(float)); }

void packed_gemm_f32(const GemmShape& s, const float* a, const float* b, float* c, const float* bias) {
  if (s.batch != 1) throw std::logic_error("packed_gemm_f32: batch must be 1");
  if (s.M <= 0 || s.N <= 0) return;
  if (s.K == 0) {  // an empty sum: C = bias (+ C)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) c[i * s.N + j] = (s.accumulate ? c[i * s.N + j] : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  const Strided A{a, s.trans_a ? 1 : s.K, s.trans_a ? s.M : 1};
  const Strided B{b, s.trans_b ? 1 : s.N, s.trans_b ? s.K : 1};
  const int64_t panels = (s.N + kNR - 1) / kNR;
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), panels));
#pragma omp parallel num_threads(threads)
  {
    // Constant-size workspace per thread (packed_gemm_workspace_bytes_per_thread), kept for the thread's life.
    static thread_local std::vector<float> ap(size_t(kKC * kMC)), bp(size_t(kKC * kNC));
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t p0 = panels * t / nt, p1 = panels * (t + 1) / nt;
    if (p1 > p0) gemm_columns(s, A, B, c, bias, p0 * kNR, std::min(p1 * kNR, s.N), ap.data(), bp.data());
  }
}

#else  // no AVX-512: gemm() keeps every shape on oneDNN

bool packed_gemm_available() { return false; }
int64_t packed_gemm_workspace_bytes_per_thread() { return 0; }
void packed_gemm_f32(const GemmShape&, const float*, const float*, float*, const float*) {
  throw std::logic_error("packed_gemm_f32: built without AVX-512");
}

#endif

}  // namespace lattice
