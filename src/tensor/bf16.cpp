#include "tensor/bf16.hpp"

namespace lattice {

void to_bf16(const float* src, uint16_t* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

void from_bf16(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

}  // namespace lattice
