#include "train/optimizer.hpp"

#include <omp.h>

#include <cmath>

namespace lattice {

AdamW::AdamW(const ParamTable& table, const AdamWConfig& config)
    : config_(config), m_(table.total(), "optimizer"), v_(table.total(), "optimizer") {
  for (const auto& p : table.params()) ranges_.push_back({p.offset, p.offset + p.numel, p.decay});
}

void AdamW::update(float* params, const float* grads, double lr, int64_t step) {
  const float b1 = float(config_.beta1), b2 = float(config_.beta2), eps = float(config_.eps);
  const float bc1 = float(1.0 - std::pow(config_.beta1, double(step)));
  const float bc2 = float(1.0 - std::pow(config_.beta2, double(step)));
  const float step_size = float(lr) / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  float* m = m_.data();
  float* v = v_.data();
  for (const Range& r : ranges_) {
    const float decay = r.decay ? float(1.0 - lr * config_.weight_decay) : 1.0f;
#pragma omp parallel for simd schedule(static) if (r.end - r.begin > 65536)
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float g = grads[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(v[i]) * inv_sqrt_bc2 + eps;
      params[i] = params[i] * decay - step_size * m[i] / denom;
    }
  }
}

double grad_norm(const float* grads, int64_t n) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
  {
    double acc = 0.0;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) acc += double(grads[i]) * double(grads[i]);
    partial[size_t(omp_get_thread_num())] = acc;
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return std::sqrt(sum);
}

void scale_grads(float* grads, int64_t n, float factor) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) grads[i] *= factor;
}

}  // namespace lattice
