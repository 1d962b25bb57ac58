#pragma once
// The bias gradient of a linear layer (kernels/linear.hpp), apart from the GEMMs so that it builds
// without oneDNN (the CUDA parity check links the element-wise kernels alone).
#include <cstdint>

namespace lattice {

// Column sums of dy [N, out] added into db (parallel over columns, each column's rows in order:
// deterministic).
void bias_backward(float* db, const float* dy, int64_t N, int64_t out);
// The same sums assigned to `sums`, then added into db (linear_backward's split form).
void bias_column_sums(float* sums, const float* dy, int64_t N, int64_t out);
void bias_add(float* db, const float* sums, int64_t out);

}  // namespace lattice
