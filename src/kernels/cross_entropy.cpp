#include "kernels/cross_entropy.hpp"

#include <cmath>

#include "kernels/fast_math.hpp"

namespace lattice {

void cross_entropy_forward(float* x, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = x + n * Vp;
    float mx = row[0];
    for (int64_t j = 1; j < V; ++j) mx = row[j] > mx ? row[j] : mx;
    const float target_logit = row[targets[n]];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) {
      row[j] = fast_exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) row[j] *= inv;
    for (int64_t j = V; j < Vp; ++j) row[j] = 0.0f;
    losses[n] = mx + std::log(sum) - target_logit;
  }
}

void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t Vp,
                            float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * Vp;
    float* d = dlogits + n * Vp;
#pragma omp simd
    for (int64_t j = 0; j < Vp; ++j) d[j] = p[j] * scale;
    d[targets[n]] -= scale;
  }
}

}  // namespace lattice
