#include "kernels/dropout.hpp"

#include <algorithm>
#include <cmath>

namespace lattice {

uint32_t dropout_keep_threshold(float p) { return uint32_t(std::min(double(p) * 4294967296.0, 4294967295.0)); }

void dropout_mask_fill(uint8_t* mask, const DropoutStream& st, uint64_t first_index, int64_t n, float p) {
  const uint32_t threshold = dropout_keep_threshold(p);
  const uint64_t first_block = first_index >> 2, last_block = (first_index + uint64_t(n) + 3) >> 2;
  const PhiloxWords words = philox_words(st);
#pragma omp parallel for schedule(static) if (n > 16384)
  for (uint64_t blk = first_block; blk < last_block; ++blk) {
    const auto r = philox_block(words, blk);
    for (int lane = 0; lane < 4; ++lane) {
      const uint64_t idx = (blk << 2) + uint64_t(lane);
      if (idx < first_index || idx >= first_index + uint64_t(n)) continue;
      mask[idx - first_index] = r[size_t(lane)] >= threshold ? 1 : 0;
    }
  }
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
