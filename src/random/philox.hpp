#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A draw is a pure function of
// (key, counter): no state to carry, so a dropout mask element depends only on where it is
// (seed, step, layer, site, global element index) and recomputation or any parallel layout draws
// the same value.
#include <array>
#include <cmath>
#include <cstdint>

#include "random/philox_core.hpp"

namespace lattice {

// One Philox4x32-10 block (the core in random/philox_core.hpp, shared with the CUDA kernels).
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  philox4x32_10(ctr.data(), key[0], key[1]);
  return ctr;
}

// Where a dropout mask lives: the stream of one site of one layer at one optimizer step.
// `init` is the stream of parameter initialisation, kept apart from every dropout site.
// The MoE sites draw a router's noise, GShard's random routing and the experts' dropout.
enum class DropoutSite : uint32_t {
  embedding = 1, attention = 2, attention_residual = 3, mlp_residual = 4, init = 5,
  moe_noise = 6, moe_route = 7, expert_dropout = 8
};

struct DropoutStream {
  uint64_t seed = 0;
  uint64_t step = 0;
  int layer = 0;  // -1 for the embedding
  DropoutSite site = DropoutSite::embedding;
};

// How a stream enters Philox: global element `index` is lane index & 3 of the block with counter
// {index >> 2 (low, high word), c2, c3} under `key` (docs/design.md §10).
struct PhiloxWords {
  std::array<uint32_t, 2> key;
  uint32_t c2, c3;
};
inline PhiloxWords philox_words(const DropoutStream& st) {
  const PhiloxStreamWords w = philox_stream_words(st.seed, st.step, st.layer, uint32_t(st.site));
  return {{w.k0, w.k1}, w.c2, w.c3};
}
// The four 32-bit draws of block `block` (elements 4·block .. 4·block + 3) of a stream.
inline std::array<uint32_t, 4> philox_block(const PhiloxWords& w, uint64_t block) {
  return philox4x32({uint32_t(block), uint32_t(block >> 32), w.c2, w.c3}, w.key);
}

// philox_block of the eight blocks first_block .. first_block + 7 side by side in 64-bit vector lanes
// (one 32×32→64 multiply per lane and round): out[w][l] is word w of block first_block + l. The same
// draws as philox_block, about eight times faster on AVX-512.
typedef uint64_t PhiloxLanes __attribute__((vector_size(64)));
inline void philox_blocks8(const PhiloxWords& w, uint64_t first_block, PhiloxLanes out[4]) {
  constexpr uint64_t kLo = 0xFFFFFFFFu;
  const PhiloxLanes lane = {0, 1, 2, 3, 4, 5, 6, 7};
  const PhiloxLanes blk = first_block + lane;
  PhiloxLanes x0 = blk & kLo, x1 = blk >> 32, x2 = PhiloxLanes{} + uint64_t(w.c2), x3 = PhiloxLanes{} + uint64_t(w.c3);
  uint32_t key0 = w.key[0], key1 = w.key[1];
  for (int round = 0; round < 10; ++round) {
    const PhiloxLanes p0 = x0 * uint64_t(kPhiloxM0), p1 = x2 * uint64_t(kPhiloxM1);  // x0, x2 < 2^32: exact
    x0 = (p1 >> 32) ^ x1 ^ uint64_t(key0);
    x1 = p1 & kLo;
    x2 = (p0 >> 32) ^ x3 ^ uint64_t(key1);
    x3 = p0 & kLo;
    key0 += kPhiloxW0, key1 += kPhiloxW1;
  }
  out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

// 32 random bits for global element `index` of a stream.
inline uint32_t philox_bits(const DropoutStream& st, uint64_t index) {
  return philox_block(philox_words(st), index >> 2)[index & 3];
}

// A standard normal draw for global element `index` (Box–Muller on two 32-bit draws).
inline float philox_normal(const DropoutStream& st, uint64_t index) {
  const uint32_t u1 = philox_bits(st, 2 * index), u2 = philox_bits(st, 2 * index + 1);
  const double a = (double(u1) + 1.0) / 4294967297.0, b = double(u2) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(a)) * std::cos(6.283185307179586 * b));
}

}  // namespace lattice
