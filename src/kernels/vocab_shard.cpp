#include "kernels/vocab_shard.hpp"

#include <cmath>

#include "kernels/fast_math.hpp"

namespace lattice {

void embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t v_local, int64_t N,
                             int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = int64_t(ids[n]) - v0;
    float* y = out + n * h;
    if (row < 0 || row >= v_local) {
      for (int64_t i = 0; i < h; ++i) y[i] = 0.0f;
      continue;
    }
    const float* e = wte + row * h;
    for (int64_t i = 0; i < h; ++i) y[i] = e[i];
  }
}

void embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t v_local,
                              int64_t N, int64_t h) {
  constexpr int64_t kChunk = 64;  // parallel over hidden columns: no two threads touch one element
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < h; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < h ? c0 + kChunk : h;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = int64_t(ids[n]) - v0;
      if (row < 0 || row >= v_local) continue;
      const float* dy = dout + n * h;
      float* de = dwte + row * h;
      for (int64_t i = c0; i < c1; ++i) de[i] += dy[i];
    }
  }
}

void ce_shard_max_target(float* row_max, float* target_logit, const float* logits, const int32_t* targets, int64_t v0,
                         int64_t v_local, int64_t real, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * v_local;
    float mx = -INFINITY;  // a maximum is exact in any order: summed in vector lanes
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < real; ++j) mx = x[j] > mx ? x[j] : mx;
    row_max[n] = mx;
    const int64_t t = int64_t(targets[n]) - v0;
    target_logit[n] = (t >= 0 && t < real) ? x[t] : 0.0f;
  }
}

void ce_shard_exp_sum(float* row_sum, float* logits, const float* row_max, int64_t v_local, int64_t real, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * v_local;
    const float mx = row_max[n];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < real; ++j) {
      x[j] = fast_exp(x[j] - mx);
      sum += x[j];
    }
    for (int64_t j = real; j < v_local; ++j) x[j] = 0.0f;
    row_sum[n] = sum;
  }
}

void ce_shard_normalize(float* logits, float* losses, const float* row_max, const float* row_sum,
                        const float* target_logit, int64_t v_local, int64_t real, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * v_local;
    const float inv = 1.0f / row_sum[n];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) x[j] *= inv;
    losses[n] = row_max[n] + std::log(row_sum[n]) - target_logit[n];
  }
}

void ce_whole_forward(float* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                      const int32_t* targets, int64_t v_local, int64_t real, int64_t N) {
  ce_shard_max_target(row_max, target_logit, logits, targets, 0, v_local, real, N);
  ce_shard_exp_sum(row_sum, logits, row_max, v_local, real, N);
  ce_shard_normalize(logits, losses, row_max, row_sum, target_logit, v_local, real, N);
}

void ce_shard_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t v_local,
                       int64_t N, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * v_local;
    float* d = dlogits + n * v_local;
#pragma omp simd
    for (int64_t j = 0; j < v_local; ++j) d[j] = p[j] * scale;
    const int64_t t = int64_t(targets[n]) - v0;
    if (t >= 0 && t < v_local) d[t] -= scale;
  }
}

// Moved unchanged from model/gpt.cpp, to be served through the backend seam.
void add_positions(float* x, const float* wpe, int64_t b, int64_t s_local, int64_t pos0, int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < b * s_local; ++n) {
    const float* p = wpe + (pos0 + n % s_local) * h;
    float* y = x + n * h;
    for (int64_t i = 0; i < h; ++i) y[i] += p[i];
  }
}

void position_grads(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0, int64_t h) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < s_local; ++i)
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* d = dx + (bi * s_local + i) * h;
      float* g = dwpe + (pos0 + i) * h;
      for (int64_t c = 0; c < h; ++c) g[c] += d[c];
    }
}

}  // namespace lattice
