#pragma once
// IEEE binary16 (fp16) conversions, one text for the host and the device, with the rounding of the
// CPU's tensor/half.cpp (_Float16 casts, which g++ compiles to F16C's VCVTPS2PH / VCVTPH2PS on the
// x86-64-v3/v4 targets lattice builds for): round to nearest even, fp16 subnormals kept, overflow to
// infinity, a NaN kept a quiet NaN with the top bits of its payload. CUDA's __float2half_rn rounds the
// same but returns one canonical NaN, hence this text (lattice_cuda_check compares the bits).
#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"

namespace lattice::cuda {

LATTICE_HOST_DEVICE inline uint16_t fp16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN: quiet, payload's top
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // 65520 and up (and inf) round to inf
  if (a >= 0x38800000u) {                                   // a normal fp16 (2^-14 and up)
    uint32_t r = a - 0x38000000u;                           // rebias the exponent: 127 - 15 = 112
    r += 0xfffu + ((r >> 13) & 1u);                         // round to nearest even at bit 13
    return uint16_t(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return uint16_t(sign);  // up to 2^-25 (a tie, to even): zero
  // An fp16 subnormal: the value in units of 2^-24, rounded to nearest even (may round up to 2^-14).
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;  // shift in [14, 24]
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

LATTICE_HOST_DEVICE inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1fu) {
    u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);  // inf, or a NaN made quiet
  } else if (e == 0) {
    const float v = float(m) * 5.9604644775390625e-8f;  // m · 2^-24, exact
    std::memcpy(&u, &v, 4);
    u |= sign;
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace lattice::cuda
