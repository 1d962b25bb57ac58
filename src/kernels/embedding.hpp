#pragma once
// Token + learned position embedding. `ids` are N = b·s tokens in [b, s] order; `pos0` is the
// global position of the first column (non-zero only under sequence sharding).
#include <cstdint>

namespace lattice {
void embedding_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t b,
                       int64_t s, int64_t h);
// Accumulates into dwte and dwpe. Parallel over hidden columns so no two threads touch one row.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t b, int64_t s,
                        int64_t h);
}  // namespace lattice
