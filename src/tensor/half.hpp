#pragma once
// 16-bit storage of model weights and gradients: bf16 (fp32's exponent, 8-bit mantissa) or IEEE
// fp16 (5-bit exponent: needs loss scaling), converted to and from fp32 by whole arrays.
#include <cstdint>

namespace lattice {

struct HalfFormat {
  bool fp16 = false;
  void narrow(const float* src, uint16_t* dst, int64_t n) const;  // round to nearest even
  void widen(const uint16_t* src, float* dst, int64_t n) const;
  // dst += src, through fp32 (one rounding).
  void accumulate(const float* src, uint16_t* dst, int64_t n) const;
};

}  // namespace lattice
