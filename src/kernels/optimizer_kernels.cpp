#include "kernels/optimizer_kernels.hpp"

#include <omp.h>

#include <cmath>
#include <vector>

#include "tensor/bf16.hpp"

namespace lattice {

AdamWScalars adamw_scalars(double beta1, double beta2, double eps, double lr, int64_t step) {
  const float bc1 = float(1.0 - std::pow(beta1, double(step)));
  const float bc2 = float(1.0 - std::pow(beta2, double(step)));
  return {float(beta1), float(beta2), float(eps), float(lr) / bc1, 1.0f / std::sqrt(bc2)};
}

namespace {
// One element of AdamW: the one text both updates run.
inline void adamw_element(float& m, float& v, float& w, float g, float decay, const AdamWScalars& a) {
  m = a.b1 * m + (1.0f - a.b1) * g;
  v = a.b2 * v + (1.0f - a.b2) * g * g;
  const float denom = std::sqrt(v) * a.inv_sqrt_bc2 + a.eps;
  w = w * decay - a.step_size * m / denom;
}
}  // namespace

void adamw_update(float* m, float* v, float* w, const float* grad, int64_t n, float decay, const AdamWScalars& a) {
  const AdamWScalars s = a;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) adamw_element(m[i], v[i], w[i], grad[i], decay, s);
}

void adamw_update_segments(AdamWSegments batch, const AdamWScalars& a) {
  for (size_t i = 0; i < batch.count; ++i) {
    const AdamWSegment& s = batch.segments[i];
    adamw_update_fused(s.m, s.v, s.w, s.w16, s.grad, s.n, s.decay, a, s.grad_scale);
  }
}
void adamw_update_fused(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t n, float decay,
                        const AdamWScalars& a, float grad_scale) {
  const AdamWScalars s = a;
  if (!w16) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) adamw_element(m[i], v[i], w[i], grad[i] * grad_scale, decay, s);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    adamw_element(m[i], v[i], w[i], grad[i] * grad_scale, decay, s);
    w16[i] = to_bf16(w[i]);
  }
}

namespace {
// Σ x² over one thread's share, in double vector lanes: out of line, so the threads of a large array and
// the one thread of a small one sum a share alike.
__attribute__((noinline)) double share_sum_squares(const float* grads, int64_t begin, int64_t end) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = begin; i < end; ++i) acc += double(grads[i]) * double(grads[i]);
  return acc;
}
}  // namespace

double grad_sum_squares(const float* grads, int64_t n) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(size_t(threads), 0.0);
  // The same shares either way; a small tensor (a bias, a LayerNorm) sums them on this thread instead of
  // waking the team for microseconds of work (the norm visits every tensor: ~150 a step at GPT-2 small).
  if (n <= 65536) {
    for (int t = 0; t < threads; ++t) partial[size_t(t)] = share_sum_squares(grads, n * t / threads, n * (t + 1) / threads);
  } else {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      partial[size_t(t)] = share_sum_squares(grads, n * t / nt, n * (t + 1) / nt);
    }
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

void grad_sums_squares(GradPieceSums batch) {
  for (size_t i = 0; i < batch.count; ++i) batch.sums[i] = grad_sum_squares(batch.pieces[i].data, batch.pieces[i].n);
}

// Moved unchanged from optim/optimizer.cpp and engine/owned_grads.cpp, to be served through the seam.
void scale_grads(float* grads, int64_t n, float factor) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grads[i] *= factor;
}

bool all_finite(const float* v, int64_t n) {
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
  for (int64_t k = 0; k < n; ++k) bad |= !std::isfinite(v[k]);
  return bad == 0;
}

}  // namespace lattice
