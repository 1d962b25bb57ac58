#pragma once
// Dropout with masks drawn from the counter-based generator: element `first_index + i` of a
// stream gets the same keep/drop decision wherever and whenever it is computed.
#include <cstdint>

#include "random/philox.hpp"

namespace lattice {

// An element is kept when its 32 random bits are >= this, p · 2^32 (capped).
uint32_t dropout_keep_threshold(float p);
// mask[i] = 1 (keep) or 0 (drop) for global elements first_index .. first_index + n - 1.
void dropout_mask_fill(uint8_t* mask, const DropoutStream& stream, uint64_t first_index, int64_t n, float p);
// out = inp · mask / (1 - p)   (out may alias inp)
void dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p);
// dinp = dout · mask / (1 - p)   (dinp may alias dout)
void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p);

}  // namespace lattice
