#include "tensor/bf16.hpp"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

namespace lattice {

void to_bf16(const float* src, uint16_t* dst, int64_t n) {
#ifdef __AVX512BF16__
  // 16 at a time with VCVTNEPS2BF16, whose rounding the scalar to_bf16 follows; the tail one by one.
  const int64_t vec = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < vec; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
  for (int64_t i = vec; i < n; ++i) dst[i] = to_bf16(src[i]);
#else
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
#endif
}

void from_bf16(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

}  // namespace lattice
