#include "kernels/softmax.hpp"

#include <vector>

#include "kernels/fast_math.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {
namespace {

// Row i of a causal softmax (keys j <= i; the rest zero). One out-of-line copy, so both entry points
// below round exactly alike.
__attribute__((noinline)) void softmax_row(float* y, const float* x, int64_t i, int64_t s) {
  float mx = x[0];  // a maximum is exact in any order: taken in vector lanes
#pragma omp simd reduction(max : mx)
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

void write_as(void* dst, DType dtype, const float* src, int64_t n) {
  if (dtype == DType::fp32) {
    float* d = static_cast<float*>(dst);
    for (int64_t j = 0; j < n; ++j) d[j] = src[j];
    return;
  }
  uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = to_bf16(src[j]);
}

}  // namespace

void softmax_causal_forward(float* probs, const float* scores, int64_t batch, int64_t s) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < batch * s; ++row) softmax_row(probs + row * s, scores + row * s, row % s, s);
}

void softmax_dropout_forward(void* probs, uint8_t* mask, void* dropped, DType dtype, const float* scores,
                             int64_t local_heads, int64_t batch, int64_t s, const AttentionDropout& drop) {
  const bool dropout = drop.p > 0.0f;
  const size_t elem = dtype == DType::fp32 ? 4 : 2;
  const AttentionMaskDraw draw(drop);
  const float scale = dropout ? 1.0f / (1.0f - drop.p) : 1.0f;
#pragma omp parallel
  {
    // One row, in cache while written out.
    tracked_vector<float, MemoryCategory::workspaces> y(static_cast<size_t>(s)), out(static_cast<size_t>(s));
    tracked_vector<uint8_t, MemoryCategory::workspaces> keep(static_cast<size_t>(dropout ? s : 0));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < batch * s; ++row) {
      const int64_t i = row % s, bh = row / s;
      softmax_row(y.data(), scores + row * s, i, s);
      if (probs) write_as(static_cast<char*>(probs) + size_t(row * s) * elem, dtype, y.data(), s);
      if (!dropout) continue;
      uint8_t* k = mask ? mask + row * s : keep.data();
      draw.row(k, attention_mask_first(drop, local_heads, s, bh) + uint64_t(i * s), s);
      if (!dropped) continue;
      for (int64_t j = 0; j < s; ++j) out[size_t(j)] = k[j] ? y[size_t(j)] * scale : 0.0f;  // as dropout_forward
      write_as(static_cast<char*>(dropped) + size_t(row * s) * elem, dtype, out.data(), s);
    }
  }
}

// Row i of the causal softmax's backward, out of line so the fp32 kernel and the bf16 pass
// (kernels/bf16_fused.cpp) round alike.
__attribute__((noinline)) void softmax_backward_row(float* ds, const float* dp, const float* p, int64_t i, int64_t s) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= i; ++j) dot += p[j] * dp[j];
#pragma omp simd
  for (int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (dp[j] - dot);
  for (int64_t j = i + 1; j < s; ++j) ds[j] = 0.0f;
}

void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < batch * s; ++row)
    softmax_backward_row(dscores + row * s, dprobs + row * s, probs + row * s, row % s, s);
}

}  // namespace lattice
