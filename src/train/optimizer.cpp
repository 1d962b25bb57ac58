#include "train/optimizer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace lattice {

AdamW::AdamW(const ParamTable& table, const AdamWConfig& config, int64_t begin, int64_t end)
    : config_(config),
      begin_(begin),
      end_(end < 0 ? table.total() : std::min(end, table.total())),
      m_(std::max<int64_t>(0, end_ - begin_), "optimizer"),
      v_(std::max<int64_t>(0, end_ - begin_), "optimizer") {
  for (const auto& p : table.params()) {
    const int64_t b = std::max(p.offset, begin_), e = std::min(p.offset + p.numel, end_);
    if (b < e) ranges_.push_back({b, e, p.decay});
  }
}

void AdamW::update(float* params, const float* grads, double lr, int64_t step) {
  const float b1 = float(config_.beta1), b2 = float(config_.beta2), eps = float(config_.eps);
  const float bc1 = float(1.0 - std::pow(config_.beta1, double(step)));
  const float bc2 = float(1.0 - std::pow(config_.beta2, double(step)));
  const float step_size = float(lr) / bc1, inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  for (const Range& r : ranges_) {
    const float decay = r.decay ? float(1.0 - lr * config_.weight_decay) : 1.0f;
    float* m = m_.data() + (r.begin - begin_);  // moments are indexed from begin_
    float* v = v_.data() + (r.begin - begin_);
    float* w = params + r.begin;
    const float* grad = grads + r.begin;
    const int64_t n = r.end - r.begin;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i];
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(v[i]) * inv_sqrt_bc2 + eps;
      w[i] = w[i] * decay - step_size * m[i] / denom;
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
