#include "tensor/fp8.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "tensor/bf16.hpp"

namespace lattice {

uint8_t fp8_encode(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const auto sign = uint8_t((bits >> 24) & 0x80);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7f;   // NaN
  if (bits >= 0x43e00000u) return sign | 0x7e;  // 448 and beyond: the largest value
  if (bits < 0x3c800000u) {                     // below 2^-6: subnormal steps of 2^-9 (8 steps = 2^-6, code 0x08)
    float a;
    std::memcpy(&a, &bits, 4);
    return sign | uint8_t(std::nearbyint(a * 512.0f));
  }
  // Normal: keep 3 of the 23 mantissa bits, rounding to nearest even, then re-bias the exponent
  // (127 → 7); a carry out of the mantissa moves to the exponent as it should.
  const uint32_t rounded = (bits + 0x7ffffu + ((bits >> 20) & 1u)) >> 20;
  return sign | uint8_t(std::min<uint32_t>(rounded - (120u << 3), 0x7e));
}

namespace {

std::array<float, 256> decode_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    if ((c & 0x7f) == 0x7f) v = std::nanf("");
    t[size_t(c)] = (c & 0x80) ? -v : v;
  }
  return t;
}
const std::array<float, 256> kDecode = decode_table();

// The block's scale exponent k: the smallest with max|x| / 2^k ≤ 448 (0 for an all-zero block),
// stored as k + 127 in one byte.
int block_exponent(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0;
  int e;
  const float m = std::frexp(amax / 448.0f, &e);  // amax/448 = m·2^e, m in [0.5, 1)
  return std::clamp(m == 0.5f ? e - 1 : e, -127, 127);
}

template <class In>
float value(const In* src, int64_t i) {
  if constexpr (sizeof(In) == 2) return from_bf16(src[i]);
  else return src[i];
}

template <class In>
void compress(const In* src, int64_t numel, int64_t row, uint8_t* codes, uint8_t* scales) {
  const int64_t rows = numel / row, blocks = (row + kFp8Block - 1) / kFp8Block;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t begin = r * row + blk * kFp8Block, end = std::min(begin + kFp8Block, (r + 1) * row);
      float amax = 0.0f;
      // The finite values set the scale (an inf saturates to ±448 instead of flushing its block to 0).
      for (int64_t i = begin; i < end; ++i) {
        const float a = std::fabs(value(src, i));
        if (std::isfinite(a)) amax = std::max(amax, a);
      }
      const int k = block_exponent(amax);
      scales[r * blocks + blk] = uint8_t(k + 127);
      const float inv = std::ldexp(1.0f, -k);
      for (int64_t i = begin; i < end; ++i) codes[i] = fp8_encode(value(src, i) * inv);
    }
  }
}

template <class Out>
void expand(const uint8_t* codes, const uint8_t* scales, int64_t numel, int64_t row, Out* out) {
  const int64_t rows = numel / row, blocks = (row + kFp8Block - 1) / kFp8Block;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t begin = r * row + blk * kFp8Block, end = std::min(begin + kFp8Block, (r + 1) * row);
      const float scale = std::ldexp(1.0f, int(scales[r * blocks + blk]) - 127);
      for (int64_t i = begin; i < end; ++i) {
        const float v = kDecode[codes[i]] * scale;
        if constexpr (sizeof(Out) == 2) out[i] = to_bf16(v);
        else out[i] = v;
      }
    }
  }
}

}  // namespace

float fp8_decode(uint8_t code) { return kDecode[code]; }

void fp8_compress(const float* src, int64_t numel, int64_t row, uint8_t* codes, uint8_t* scales) {
  compress(src, numel, row, codes, scales);
}
void fp8_compress(const uint16_t* src_bf16, int64_t numel, int64_t row, uint8_t* codes, uint8_t* scales) {
  compress(src_bf16, numel, row, codes, scales);
}
void fp8_expand(const uint8_t* codes, const uint8_t* scales, int64_t numel, int64_t row, float* out) {
  expand(codes, scales, numel, row, out);
}
void fp8_expand(const uint8_t* codes, const uint8_t* scales, int64_t numel, int64_t row, uint16_t* out_bf16) {
  expand(codes, scales, numel, row, out_bf16);
}

}  // namespace lattice
