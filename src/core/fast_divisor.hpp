#pragma once
// FastDivisor: x / d and x % d for 0 <= x < 2^31 and 1 <= d < 2^31 by a multiply-high, an add and a
// shift (the round-up "magic number" method of Granlund and Montgomery). The CUDA kernels split flat
// indices by sizes known only at run time (the attention's head dimension); a 32-bit division there is
// a sequence of about twenty instructions, this is three. One text for the host (tested exhaustively
// for small divisors in tests/unit/test_fast_divisor.cpp) and the device.
#include <cstdint>
#include <stdexcept>

#include "core/host_device.hpp"

namespace lattice {

struct FastDivisor {
  uint32_t d = 1, magic = 0, shift = 0;

  FastDivisor() = default;
  // shift = ⌈log2 d⌉, magic = ⌊2^32·(2^shift − d) / d⌋ + 1. It fits 32 bits: 2^shift < 2d makes
  // 2^shift − d ≤ d − 1, so the floor is at most 2^32·(d − 1)/d = 2^32 − 2^32/d ≤ 2^32 − 2 for
  // d ≥ 2 (d = 1 gives shift 0 and magic 1).
  explicit FastDivisor(int64_t divisor) {
    if (divisor < 1 || divisor > int64_t(0x7fffffff))
      throw std::invalid_argument("FastDivisor: divisor outside [1, 2^31)");
    d = uint32_t(divisor);
    while ((uint64_t(1) << shift) < d) ++shift;
    magic = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  // x < 2^31: the high word of x·magic is at most x (magic < 2^32), so their sum does not wrap.
  LATTICE_HOST_DEVICE uint32_t div(uint32_t x) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(x, magic);
#else
    const uint32_t hi = uint32_t((uint64_t(x) * magic) >> 32);
#endif
    return (hi + x) >> shift;
  }
  // x % d, given q = div(x).
  LATTICE_HOST_DEVICE uint32_t mod(uint32_t x, uint32_t q) const { return x - q * d; }
};

}  // namespace lattice
