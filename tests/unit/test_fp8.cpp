// 8-bit kept activations (tensor/fp8.hpp): the e4m3 codes, rounding to nearest even, saturation,
// and the per-32-element power-of-two scales, which must not depend on how a tensor is split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tensor/fp8.hpp"

using namespace lattice;

TEST(Fp8, EveryCodeDecodesAndEncodesBackToItself) {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_decode(uint8_t(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    ++finite;
    if (c == 0x80) continue;  // -0 encodes as -0: the same code
    EXPECT_EQ(fp8_encode(v), uint8_t(c)) << c << " = " << v;
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(fp8_decode(0x7e), 448.0f);
  EXPECT_EQ(fp8_decode(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(fp8_decode(0x08), std::ldexp(1.0f, -6));  // the smallest normal
}

TEST(Fp8, RoundsToTheNearestCodeTiesToEvenAndSaturates) {
  std::vector<float> codes;
  for (int c = 0; c < 0x7f; ++c) codes.push_back(fp8_decode(uint8_t(c)));  // 0 .. 448, increasing
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(exponent(rng)) * (i % 2 ? -1.0f : 1.0f);
    const float a = std::fabs(x);
    // The nearest by brute force; a tie goes to the even code (mantissa's last bit 0).
    int best = 0;
    for (int c = 1; c < int(codes.size()); ++c) {
      const float dc = std::fabs(codes[size_t(c)] - a), db = std::fabs(codes[size_t(best)] - a);
      if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
    const uint8_t got = fp8_encode(x);
    ASSERT_EQ(got & 0x7f, best) << x;
    ASSERT_EQ(bool(got & 0x80), x < 0) << x;
  }
  EXPECT_EQ(fp8_encode(1e6f), 0x7e);
  EXPECT_EQ(fp8_encode(-INFINITY), 0xfe);
  EXPECT_EQ(fp8_encode(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_EQ(fp8_encode(1e-30f), 0x00);
}

TEST(Fp8, BlocksKeepEachValueWithinHalfAStepAndSplitsQuantizeAlike) {
  const int64_t rows = 6, row = 96;  // three blocks per row
  std::vector<float> x(size_t(rows * row));
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = n(rng) * std::exp2(float(int(i / 32) % 9 - 4) * 3.0f);
  for (int64_t i = 0; i < row; ++i) x[size_t(row + i)] = 0.0f;  // an all-zero row
  std::vector<uint8_t> codes(x.size()), scales(size_t(fp8_scale_count(rows * row, row)));
  fp8_compress(x.data(), rows * row, row, codes.data(), scales.data());
  EXPECT_EQ(fp8_bytes(rows * row, row), rows * row + rows * 3);
  std::vector<float> back(x.size());
  fp8_expand(codes.data(), scales.data(), rows * row, row, back.data());
  for (size_t i = 0; i < x.size(); ++i) {
    // e4m3 keeps 3 mantissa bits: within 2^-4 of the value, or (tiny against its block's largest)
    // within half the block's subnormal step.
    float amax = 0;
    for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float tol = std::max(std::fabs(x[i]) / 16.0f, amax / 448.0f * std::ldexp(1.0f, -10) * 2.0f);
    ASSERT_LE(std::fabs(back[i] - x[i]), tol) << i;
  }
  // A tensor-parallel rank holds 32-aligned column blocks of each row: compressing its part alone
  // gives the same codes and values as the whole tensor's.
  const int64_t part = 32;
  for (int64_t first = 0; first < row; first += part) {
    std::vector<float> mine;
    for (int64_t r = 0; r < rows; ++r) mine.insert(mine.end(), x.begin() + r * row + first, x.begin() + r * row + first + part);
    std::vector<uint8_t> c(mine.size()), s(size_t(fp8_scale_count(rows * part, part)));
    fp8_compress(mine.data(), rows * part, part, c.data(), s.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < part; ++i) ASSERT_EQ(c[size_t(r * part + i)], codes[size_t(r * row + first + i)]);
  }
}
