#pragma once
// bfloat16 storage: the top 16 bits of an fp32, rounded to nearest even, with the conversion rules of
// the AVX512-BF16 instruction (VCVTNEPS2BF16), so the scalar and the vector paths agree bit for bit:
// a NaN stays a quiet NaN, and subnormal inputs count as zero (their sign kept).
#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"

namespace lattice {

LATTICE_HOST_DEVICE inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // keep NaN a NaN
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;                            // subnormal: zero
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
LATTICE_HOST_DEVICE inline float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void to_bf16(const float* src, uint16_t* dst, int64_t n);
void from_bf16(const uint16_t* src, float* dst, int64_t n);

}  // namespace lattice
