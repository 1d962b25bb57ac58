#include "kernels/bias.hpp"

namespace lattice {

namespace {
// Column sums of dy [N, out], each column's rows added in order (parallel over columns, so
// deterministic); emit(c, sum) receives them. One loop for the fused and the split backward.
template <class Emit>
void column_sums(const float* dy, int64_t N, int64_t out, Emit emit) {
  constexpr int64_t kChunk = 64;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < out; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < out ? c0 + kChunk : out;
    float acc[kChunk] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* row = dy + n * out;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c) emit(c, acc[c - c0]);
  }
}
}  // namespace

void bias_backward(float* db, const float* dy, int64_t N, int64_t out) {
  column_sums(dy, N, out, [db](int64_t c, float sum) { db[c] += sum; });
}

void bias_column_sums(float* sums, const float* dy, int64_t N, int64_t out) {
  column_sums(dy, N, out, [sums](int64_t c, float sum) { sums[c] = sum; });
}

void bias_add(float* db, const float* sums, int64_t out) {
  for (int64_t c = 0; c < out; ++c) db[c] += sums[c];
}

// Moved unchanged from model/transformer_layer.cpp, to be served through the backend seam.
void bias_add_rows(float* y, const float* bias, int64_t N, int64_t out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < out; ++i) y[r * out + i] += bias[i];
}

void residual_add(float* x, const float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace lattice
