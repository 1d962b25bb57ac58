// core/fast_divisor.hpp against the hardware's division: every dividend below 2^16 for every divisor
// up to 256 (the attention's head dimension is at most 128), the dividends either side of each
// multiple near 2^31 for those divisors, and random pairs over the whole promised range. A wrong
// magic number or shift fails at the first quotient that crosses a multiple the wrong way.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "core/fast_divisor.hpp"

namespace lattice {
namespace {

TEST(FastDivisor, EveryDividendBelow2To16ForEveryDivisorTo256) {
  for (uint32_t d = 1; d <= 256; ++d) {
    const FastDivisor f{int64_t(d)};
    for (uint32_t x = 0; x < (1u << 16); ++x) {
      const uint32_t q = f.div(x);
      if (q != x / d || f.mod(x, q) != x % d) FAIL() << x << " / " << d << ": got " << q << ", want " << x / d;
    }
  }
}

TEST(FastDivisor, AroundTheMultiplesNearTheTopOfTheRange) {
  constexpr uint32_t kTop = 0x7fffffffu;
  for (uint32_t d = 1; d <= 256; ++d) {
    const FastDivisor f{int64_t(d)};
    for (uint32_t m = kTop / d; m + 64 > kTop / d && m > 0; --m)  // the last 64 multiples below 2^31
      for (const uint32_t x : {m * d - 1, m * d, m * d + 1}) {
        if (x > kTop) continue;
        ASSERT_EQ(f.div(x), x / d) << x << " / " << d;
      }
    ASSERT_EQ(f.div(kTop), kTop / d) << d;
  }
}

TEST(FastDivisor, RandomPairsOverTheWholeRange) {
  std::mt19937 rng(20261127);
  std::uniform_int_distribution<uint32_t> any(0, 0x7fffffffu), divisor(1, 0x7fffffffu);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t d = (i & 1) ? divisor(rng) : (divisor(rng) >> (rng() % 31)) | 1u, x = any(rng);
    const FastDivisor f{int64_t(d)};
    ASSERT_EQ(f.div(x), x / d) << x << " / " << d;
  }
}

TEST(FastDivisor, RefusesADivisorOutsideItsRange) {
  EXPECT_THROW(FastDivisor{0}, std::invalid_argument);
  EXPECT_THROW(FastDivisor{-3}, std::invalid_argument);
  EXPECT_THROW(FastDivisor{int64_t(1) << 31}, std::invalid_argument);
  EXPECT_NO_THROW(FastDivisor{int64_t(0x7fffffff)});
}

}  // namespace
}  // namespace lattice
