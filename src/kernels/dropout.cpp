#include "kernels/dropout.hpp"

#include <algorithm>
#include <cmath>

namespace lattice {

uint32_t dropout_keep_threshold(float p) { return uint32_t(std::min(double(p) * 4294967296.0, 4294967295.0)); }

void dropout_keep_flags(uint8_t* keep, const PhiloxWords& words, uint32_t threshold, uint64_t first, int64_t n) {
  const uint64_t last = first + uint64_t(n);
  PhiloxLanes r[4];
  for (uint64_t blk0 = first >> 2; (blk0 << 2) < last; blk0 += 8) {  // 8 blocks = 32 elements per draw
    philox_blocks8(words, blk0, r);
    if ((blk0 << 2) >= first && (blk0 << 2) + 32 <= last) {  // the whole group inside: no range tests
      uint8_t* out = keep + ((blk0 << 2) - first);
      for (int w = 0; w < 4; ++w) {
        const PhiloxLanes kept = r[w] >= uint64_t(threshold);  // all ones where kept
        for (int l = 0; l < 8; ++l) out[4 * l + w] = uint8_t(kept[l] & 1);
      }
      continue;
    }
    for (int l = 0; l < 8; ++l)
      for (int w = 0; w < 4; ++w) {
        const uint64_t idx = ((blk0 + uint64_t(l)) << 2) + uint64_t(w);
        if (idx >= first && idx < last) keep[idx - first] = r[w][l] >= threshold ? 1 : 0;
      }
  }
}

MaskDraw::MaskDraw(const DropoutStream& stream, float p)
    : words(philox_words(stream)), threshold(dropout_keep_threshold(p)) {}

namespace {
DropoutStream at_attention_site(DropoutStream stream) {
  stream.site = DropoutSite::attention;
  return stream;
}
}  // namespace

AttentionMaskDraw::AttentionMaskDraw(const AttentionDropout& d) : MaskDraw(at_attention_site(d.stream), d.p) {}

void dropout_mask_fill(uint8_t* mask, const DropoutStream& st, uint64_t first_index, int64_t n, float p) {
  const MaskDraw draw(st, p);
  constexpr int64_t kChunk = 1 << 14;  // elements per task, a multiple of the 32 one draw gives
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) draw.row(mask + c0, first_index + uint64_t(c0), std::min(kChunk, n - c0));
}

void dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p) {
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = mask[i] ? inp[i] * scale : 0.0f;
}

void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p) {
  dropout_forward(dinp, dout, mask, n, p);
}

}  // namespace lattice
