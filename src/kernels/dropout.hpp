#pragma once
// Dropout with masks drawn from the counter-based generator: element `first_index + i` of a
// stream gets the same keep/drop decision wherever and whenever it is computed.
#include <cstdint>

#include "random/philox.hpp"

namespace lattice {

// An element is kept when its 32 random bits are >= this, p · 2^32 (capped).
uint32_t dropout_keep_threshold(float p);
// Where an attention dropout mask comes from: element (row bi, head hd, query i, key j) of the local
// [b, a, s, s] scores is global index ((global_row · heads_total + global_head) · s + i) · s + j of
// `stream` (site = attention), with global_row = first_row + bi, global_head = head0 + hd (tensor
// parallelism splits heads). The unfused and the fused attention draw the same mask from it.
struct AttentionDropout {
  DropoutStream stream;
  float p = 0.0f;  // 0: no dropout
  int64_t first_row = 0, heads_total = 0, head0 = 0;
};
// Global index of (local batch·head bh, query 0, key 0), for `local_heads` heads on this rank.
inline uint64_t attention_mask_first(const AttentionDropout& d, int64_t local_heads, int64_t s, int64_t bh) {
  const int64_t bi = bh / local_heads, hd = bh % local_heads;
  const int64_t heads = d.heads_total ? d.heads_total : local_heads;
  return uint64_t((d.first_row + bi) * heads + d.head0 + hd) * uint64_t(s) * uint64_t(s);
}

// keep[i] = 1 (keep) or 0 (drop) for global elements first .. first + n - 1 of the stream `words`, on the
// calling thread.
void dropout_keep_flags(uint8_t* keep, const PhiloxWords& words, uint32_t threshold, uint64_t first, int64_t n);

// A mask's draw (docs/design.md §10), set up once per call of a kernel: the stream's Philox words and
// the keep threshold of p.
struct MaskDraw {
  PhiloxWords words;
  uint32_t threshold;
  MaskDraw(const DropoutStream& stream, float p);
  // Keep flags of global elements first .. first + n - 1 (a row of the mask or part of one).
  void row(uint8_t* keep, uint64_t first, int64_t n) const { dropout_keep_flags(keep, words, threshold, first, n); }
};
// The attention mask's draw: site = attention whatever the caller's stream says. The unfused one-pass
// softmax/dropout and the fused attention draw their rows through it.
struct AttentionMaskDraw : MaskDraw {
  explicit AttentionMaskDraw(const AttentionDropout& d);
};
// mask[i] = 1 (keep) or 0 (drop) for global elements first_index .. first_index + n - 1.
void dropout_mask_fill(uint8_t* mask, const DropoutStream& stream, uint64_t first_index, int64_t n, float p);
// out = inp · mask / (1 - p)   (out may alias inp)
void dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p);
// dinp = dout · mask / (1 - p)   (dinp may alias dout)
void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p);

}  // namespace lattice
