// The Philox4x32-10 core shared by the CPU and the CUDA kernels (random/philox_core.hpp): Random123's
// known-answer vectors, and the CPU's interfaces (philox_bits, the eight-lane drawer) drawing the
// same bits as the core's philox_element_bits, which the CUDA dropout kernels call.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "random/philox.hpp"
#include "random/philox_core.hpp"

namespace lattice {
namespace {

TEST(Philox, KnownAnswerVectors) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (A4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (A4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, StreamBitsPinned) {
  // Values of this stream before the core moved to philox_core.hpp (b093723): masks stay bit-identical.
  const DropoutStream st{0x123456789abcdefull, 77, 3, DropoutSite::attention};
  EXPECT_EQ(philox_bits(st, 0), 0x8e8110e1u);
  EXPECT_EQ(philox_bits(st, 5), 0xf9920b58u);
  EXPECT_EQ(philox_bits(st, 1000003), 0x89e26f4au);
  EXPECT_EQ(philox_bits(st, (1ull << 33) + 7), 0x53a6b165u);
  EXPECT_FLOAT_EQ(philox_normal(st, 12345), -0.488049537f);
}

TEST(Philox, CoreMatchesCpuDrawers) {
  const DropoutStream st{0xfeedfacecafebeefull, (1ull << 32) + 9, -1, DropoutSite::embedding};
  const PhiloxStreamWords core = philox_stream_words(st.seed, st.step, st.layer, uint32_t(st.site));
  const PhiloxWords words = philox_words(st);
  const uint64_t first_block = (1ull << 31) - 3;  // crosses the counter's low word
  PhiloxLanes lanes[4];
  philox_blocks8(words, first_block, lanes);
  for (int l = 0; l < 8; ++l)
    for (int w = 0; w < 4; ++w) {
      const uint64_t index = ((first_block + uint64_t(l)) << 2) + uint64_t(w);
      ASSERT_EQ(philox_element_bits(core, index), philox_bits(st, index)) << index;
      ASSERT_EQ(uint64_t(philox_element_bits(core, index)), lanes[w][l]) << index;
      ASSERT_EQ(philox_keep(core, 0x80000000u, index), philox_bits(st, index) >= 0x80000000u);
    }
}

}  // namespace
}  // namespace lattice
