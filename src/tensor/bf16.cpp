#include "tensor/bf16.hpp"

#include <immintrin.h>

namespace lattice {

namespace {
// VCVTNEPS2BF16, 16 at a time, on CPUs that have it (checked at run time: the build targets a
// baseline without BF16, CMakeLists.txt); its rounding is the scalar to_bf16's (nearest-even).
__attribute__((target("avx512f,avx512vl,avx512bf16"))) void to_bf16_avx512(const float* src, uint16_t* dst,
                                                                         int64_t n) {
  const int64_t vec = n / 16 * 16;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < vec; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
  for (int64_t i = vec; i < n; ++i) dst[i] = to_bf16(src[i]);
}

const bool kHasAvx512Bf16 = __builtin_cpu_supports("avx512bf16");
}  // namespace

void to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (kHasAvx512Bf16) return to_bf16_avx512(src, dst, n);
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

void from_bf16(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

}  // namespace lattice
