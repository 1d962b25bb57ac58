#include "tensor_parallel/vocab_parallel.hpp"

#include <cmath>
#include <vector>

#include "kernels/fast_math.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

void embedding_tokens_forward(float* out, const int32_t* ids, const float* wte, const VocabShard& v, int64_t N,
                              int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = int64_t(ids[n]) - v.v0;
    float* y = out + n * h;
    if (row < 0 || row >= v.v_local) {
      for (int64_t i = 0; i < h; ++i) y[i] = 0.0f;
      continue;
    }
    const float* e = wte + row * h;
    for (int64_t i = 0; i < h; ++i) y[i] = e[i];
  }
}

void embedding_tokens_backward(float* dwte, const float* dout, const int32_t* ids, const VocabShard& v, int64_t N,
                               int64_t h) {
  constexpr int64_t kChunk = 64;  // parallel over hidden columns: no two threads touch one element
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < h; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < h ? c0 + kChunk : h;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = int64_t(ids[n]) - v.v0;
      if (row < 0 || row >= v.v_local) continue;
      const float* dy = dout + n * h;
      float* de = dwte + row * h;
      for (int64_t i = c0; i < c1; ++i) de[i] += dy[i];
    }
  }
}

void cross_entropy_forward(const TensorParallel& tp, float* logits, float* losses, const int32_t* targets,
                           const VocabShard& v, int64_t N) {
  // Columns of this shard that are real tokens.
  const int64_t real = std::max<int64_t>(0, std::min(v.v_local, v.v_real - v.v0));
  tracked_vector<float, MemoryCategory::workspaces> row_max(static_cast<size_t>(N)), row_sum(row_max.size()), target_logit(row_max.size());
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * v.v_local;
    float mx = -INFINITY;
    for (int64_t j = 0; j < real; ++j) mx = x[j] > mx ? x[j] : mx;
    row_max[size_t(n)] = mx;
    const int64_t t = int64_t(targets[n]) - v.v0;
    target_logit[size_t(n)] = (t >= 0 && t < real) ? x[t] : 0.0f;
  }
  if (tp.active()) {
    tp.group->all_reduce({row_max.data(), row_max.size()}, comm::ReduceOp::max);
    tp.group->all_reduce({target_logit.data(), target_logit.size()});
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * v.v_local;
    const float mx = row_max[size_t(n)];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < real; ++j) {
      x[j] = fast_exp(x[j] - mx);
      sum += x[j];
    }
    for (int64_t j = real; j < v.v_local; ++j) x[j] = 0.0f;
    row_sum[size_t(n)] = sum;
  }
  if (tp.active()) tp.group->all_reduce({row_sum.data(), row_sum.size()});
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * v.v_local;
    const float inv = 1.0f / row_sum[size_t(n)];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) x[j] *= inv;
    losses[n] = row_max[size_t(n)] + std::log(row_sum[size_t(n)]) - target_logit[size_t(n)];
  }
}

void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, const VocabShard& v,
                            int64_t N, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * v.v_local;
    float* d = dlogits + n * v.v_local;
#pragma omp simd
    for (int64_t j = 0; j < v.v_local; ++j) d[j] = p[j] * scale;
    const int64_t t = int64_t(targets[n]) - v.v0;
    if (t >= 0 && t < v.v_local) d[t] -= scale;
  }
}

}  // namespace lattice::parallel
