#include "kernels/embedding.hpp"

namespace lattice {

void embedding_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t b,
                       int64_t s, int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < b * s; ++n) {
    const float* e = wte + int64_t(ids[n]) * h;
    const float* p = wpe + (n % s) * h;
    float* y = out + n * h;
#pragma omp simd
    for (int64_t i = 0; i < h; ++i) y[i] = e[i] + p[i];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t b, int64_t s,
                        int64_t h) {
  constexpr int64_t kChunk = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < h; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < h ? c0 + kChunk : h;
    for (int64_t n = 0; n < b * s; ++n) {
      const float* dy = dout + n * h;
      float* de = dwte + int64_t(ids[n]) * h;
      float* dp = dwpe + (n % s) * h;
      for (int64_t i = c0; i < c1; ++i) de[i] += dy[i], dp[i] += dy[i];
    }
  }
}

}  // namespace lattice
