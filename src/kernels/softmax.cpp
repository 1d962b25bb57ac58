#include "kernels/softmax.hpp"

#include "kernels/fast_math.hpp"

namespace lattice {

void softmax_causal_forward(float* probs, const float* scores, int64_t batch, int64_t s) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < batch * s; ++row) {
    const int64_t i = row % s;
    const float* x = scores + row * s;
    float* y = probs + row * s;
    float mx = x[0];
    for (int64_t j = 1; j <= i; ++j) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j <= i; ++j) {
      y[j] = fast_exp(x[j] - mx);
      sum += y[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j <= i; ++j) y[j] *= inv;
    for (int64_t j = i + 1; j < s; ++j) y[j] = 0.0f;
  }
}

void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < batch * s; ++row) {
    const int64_t i = row % s;
    const float* p = probs + row * s;
    const float* dp = dprobs + row * s;
    float* ds = dscores + row * s;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j <= i; ++j) dot += p[j] * dp[j];
#pragma omp simd
    for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (dp[j] - dot);
    for (int64_t j = i + 1; j < s; ++j) ds[j] = 0.0f;
  }
}

}  // namespace lattice
