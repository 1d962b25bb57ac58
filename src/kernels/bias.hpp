#pragma once
// The bias gradient of a linear layer (kernels/linear.hpp), apart from the GEMMs so that it builds
// without oneDNN (the CUDA parity check links the element-wise kernels alone); the bias add of a
// residual branch and the residual add itself (cuda/kernels.hpp has the same two).
#include <cstdint>

namespace lattice {

// Column sums of dy [N, out] added into db (parallel over columns, each column's rows in order:
// deterministic).
void bias_backward(float* db, const float* dy, int64_t N, int64_t out);
// The same sums assigned to `sums`, then added into db (linear_backward's split form).
void bias_column_sums(float* sums, const float* dy, int64_t N, int64_t out);
void bias_add(float* db, const float* sums, int64_t out);
// y[r, i] += bias[i] over N rows of `out`.
void bias_add_rows(float* y, const float* bias, int64_t N, int64_t out);
// x[i] += y[i].
void residual_add(float* x, const float* y, int64_t n);

}  // namespace lattice
