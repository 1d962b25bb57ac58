#pragma once
// The Philox4x32-10 core and the way a dropout stream enters it, in plain 32-bit words so that the one
// text compiles for the host (g++) and for the device (nvcc): a mask bit is the same function of
// (seed, step, layer, site, global index) on both. random/philox.hpp builds the CPU's interface
// (std::array, the eight-lane AVX-512 drawer) on these functions; src/cuda's kernels call them
// directly. Known-answer vectors (Random123's kat_vectors) are pinned in tests/unit/test_philox.cpp.
#include <cstdint>

#include "core/host_device.hpp"

namespace lattice {

// The round multipliers and key increments (Salmon et al. 2011).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// Ten rounds of Philox4x32 on counter c[0..3] (in place) under key (k0, k1).
LATTICE_HOST_DEVICE inline void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kPhiloxM0) * c[0];
    const uint64_t p1 = uint64_t(kPhiloxM1) * c[2];
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k0, n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c[3] ^ k1, n3 = uint32_t(p0);
    c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

// A stream's Philox words: key (k0, k1) and the counter's upper words (c2, c3), from (seed, step,
// layer, site) (docs/design.md §10). Global element `index` is word index & 3 of the block with
// counter {index >> 2 (low, high word), c2, c3}.
struct PhiloxStreamWords {
  uint32_t k0, k1, c2, c3;
};
LATTICE_HOST_DEVICE inline PhiloxStreamWords philox_stream_words(uint64_t seed, uint64_t step, int layer,
                                                                 uint32_t site) {
  return {uint32_t(seed), uint32_t(seed >> 32) ^ uint32_t(step >> 32), uint32_t(step),
          (uint32_t(layer + 2) << 8) | site};
}

// 32 random bits of global element `index` of the stream `w`.
LATTICE_HOST_DEVICE inline uint32_t philox_element_bits(const PhiloxStreamWords& w, uint64_t index) {
  const uint64_t block = index >> 2;
  uint32_t c[4] = {uint32_t(block), uint32_t(block >> 32), w.c2, w.c3};
  philox4x32_10(c, w.k0, w.k1);
  return c[index & 3];
}

// The dropout decision: element kept when its bits are >= threshold (p · 2^32, capped).
LATTICE_HOST_DEVICE inline bool philox_keep(const PhiloxStreamWords& w, uint32_t threshold, uint64_t index) {
  return philox_element_bits(w, index) >= threshold;
}

}  // namespace lattice
