// The array conversion to bf16 (VCVTNEPS2BF16 where the CPU has it) against the scalar rule, bit for bit,
// on ordinary values, ties, NaNs, infinities, overflow and subnormals; and the rule itself on known cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/bf16.hpp"

namespace lattice {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, ScalarRuleOnKnownCases) {
  EXPECT_EQ(to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(to_bf16(from_bits(0x3f808000u)), 0x3f80);  // a tie rounds to even (down)
  EXPECT_EQ(to_bf16(from_bits(0x3f818000u)), 0x3f82);  // a tie rounds to even (up)
  EXPECT_EQ(to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above the tie rounds up
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflow to +inf
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(to_bf16(from_bits(0x7f800001u)), 0x7fc0);  // a signalling NaN comes out quiet
  EXPECT_EQ(to_bf16(from_bits(0x00400000u)), 0x0000);  // subnormal: zero
  EXPECT_EQ(to_bf16(from_bits(0x80000001u)), 0x8000);  // negative subnormal: -0
  EXPECT_EQ(to_bf16(from_bits(0x00800000u)), 0x0080);  // the smallest normal stays
}

TEST(Bf16, ArrayEqualsScalarBitForBit) {
  std::mt19937 rng(3);
  std::vector<float> x;
  for (int i = 0; i < 100003; ++i) x.push_back(from_bits(rng()));  // every class of bit pattern
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00001u, 0x00000001u,
                     0x807fffffu, 0x00800000u, 0x7f7fffffu, 0x80000000u, 0x00000000u})
    x.push_back(from_bits(u));
  std::vector<uint16_t> got(x.size());
  to_bf16(x.data(), got.data(), int64_t(x.size()));  // not a multiple of 16: the tail runs the scalar
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    ASSERT_EQ(got[i], to_bf16(x[i])) << "input bits 0x" << std::hex << u;
  }
}

}  // namespace
}  // namespace lattice
