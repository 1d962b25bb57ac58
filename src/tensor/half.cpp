#include "tensor/half.hpp"

#include <cstring>

#include "tensor/bf16.hpp"

namespace lattice {

namespace {
uint16_t to_fp16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float from_fp16(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
float widen_one(bool fp16, uint16_t u) { return fp16 ? from_fp16(u) : from_bf16(u); }
uint16_t narrow_one(bool fp16, float f) { return fp16 ? to_fp16(f) : to_bf16(f); }
}  // namespace

void HalfFormat::narrow(const float* src, uint16_t* dst, int64_t n) const {
  if (!fp16) return to_bf16(src, dst, n);
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = to_fp16(src[i]);
}

void HalfFormat::widen(const uint16_t* src, float* dst, int64_t n) const {
  if (!fp16) return from_bf16(src, dst, n);
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = from_fp16(src[i]);
}

void HalfFormat::accumulate(const float* src, uint16_t* dst, int64_t n) const {
  const bool h = fp16;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) dst[i] = narrow_one(h, widen_one(h, dst[i]) + src[i]);
}

}  // namespace lattice
