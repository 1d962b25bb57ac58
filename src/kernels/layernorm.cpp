#include "kernels/layernorm.hpp"
#include "tensor/memory_tracker.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lattice {

// One row each, out of line: the fp32 kernels below and the bf16 passes (kernels/bf16_fused.cpp) call
// the same code, so they round alike.
__attribute__((noinline)) void layernorm_forward_row(float* y, float* mean, float* rstd, const float* x,
                                                     const float* weight, const float* bias, int64_t C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < C; ++i) sum += x[i];
  const float m = sum / float(C);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < C; ++i) var += (x[i] - m) * (x[i] - m);
  const float r = 1.0f / std::sqrt(var / float(C) + 1e-5f);
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - m) * r * weight[i] + bias[i];
  *mean = m;
  *rstd = r;
}

__attribute__((noinline)) void layernorm_backward_row(float* dx, float* dw, float* db, const float* dy, const float* x,
                                                      const float* weight, float m, float r, int64_t C) {
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int64_t i = 0; i < C; ++i) {
    const float xhat = (x[i] - m) * r;
    const float dnorm = weight[i] * dy[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * xhat;
  }
  dnorm_mean /= float(C);
  dnorm_norm_mean /= float(C);
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) {
    const float xhat = (x[i] - m) * r;
    dw[i] += dy[i] * xhat;
    db[i] += dy[i];
    dx[i] += (weight[i] * dy[i] - dnorm_mean - xhat * dnorm_norm_mean) * r;
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) layernorm_forward_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C);
}

int64_t layernorm_partial_floats(int64_t C) { return int64_t(omp_get_max_threads()) * 2 * C; }

void layernorm_backward_input(float* dinp, float* partial, int64_t partial_floats, const float* dout,
                              const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                              int64_t C) {
  const int threads = int(partial_floats / (2 * C));
  std::fill(partial, partial + partial_floats, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    float* dw = partial + size_t(omp_get_thread_num()) * 2 * size_t(C);
    float* db = dw + C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      layernorm_backward_row(dinp + n * C, dw, db, dout + n * C, inp + n * C, weight, mean[n], rstd[n], C);
  }
}

void layernorm_reduce_partials(float* dweight, float* dbias, const float* partial, int64_t partial_floats, int64_t C) {
  const int64_t threads = partial_floats / (2 * C);
  for (int64_t t = 0; t < threads; ++t) {
    const float* dw = partial + t * 2 * C;
    for (int64_t i = 0; i < C; ++i) dweight[i] += dw[i], dbias[i] += dw[C + i];
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  // Per-thread partial sums for the parameter gradients, added in a fixed order (deterministic).
  const int64_t floats = layernorm_partial_floats(C);
  tracked_vector<float, MemoryCategory::workspaces> partial(static_cast<size_t>(floats));
  layernorm_backward_input(dinp, partial.data(), floats, dout, inp, weight, mean, rstd, N, C);
  layernorm_reduce_partials(dweight, dbias, partial.data(), floats, C);
}

}  // namespace lattice
