#pragma once
// How offloaded optimizer states move (optim/offloaded_states.hpp): in units of at most
// kOffloadUnit owned elements, kOffloadSlots units staged at once. Here, below both the optimizer
// that moves them and the formula module that counts the staging, so the two cannot disagree.
#include <cstdint>

namespace lattice {

inline constexpr int64_t kOffloadUnit = int64_t(1) << 20;
inline constexpr int kOffloadSlots = 3;  // the unit being updated, the one read ahead, the one written behind

}  // namespace lattice
