#pragma once
// AdamW (decoupled weight decay) over the flat parameter buffer. Weight decay applies only to
// matrices and embeddings (ParamInfo::decay), never to LayerNorm weights or biases.
#include <cstdint>
#include <vector>

#include "model/params.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  // Keeps moments for the flat range [begin, end) of the parameters (the whole model by default;
  // one data-parallel rank's shard under ZeRO).
  AdamW(const ParamTable& table, const AdamWConfig& config, int64_t begin = 0, int64_t end = -1);

  // One update of params[begin, end) from grads[begin, end) with learning rate lr; `step` counts
  // from 1 (bias correction).
  void update(float* params, const float* grads, double lr, int64_t step);
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }

  // Moments of [begin, end): element i belongs to parameter element begin + i.
  float* exp_avg() { return m_.data(); }
  float* exp_avg_sq() { return v_.data(); }
  const float* exp_avg() const { return m_.data(); }
  const float* exp_avg_sq() const { return v_.data(); }
  int64_t size() const { return m_.size(); }

 private:
  struct Range {
    int64_t begin, end;
    bool decay;
  };
  std::vector<Range> ranges_;
  AdamWConfig config_;
  int64_t begin_ = 0, end_ = 0;
  TrackedArray<float> m_, v_;
};

// Global L2 norm of the gradient buffer (double accumulation, deterministic order).
double grad_norm(const float* grads, int64_t n);
void scale_grads(float* grads, int64_t n, float factor);

}  // namespace lattice
