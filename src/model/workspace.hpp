#pragma once
// Transient fp32/bf16 buffers reused by every layer (ZeRO-R's "constant-size buffers"): not
// activations kept for backward, so counted apart, under MemoryCategory::workspaces.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "moe/moe_layer.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

struct Workspace {
  template <class T>
  using buffer = tracked_vector<T, MemoryCategory::workspaces>;
  buffer<float> ln, g1, g2;              // [N, h]
  buffer<float> big1, big2, widen;       // [N, 4h] (widen also holds bf16 tensors read back)
  buffer<float> q, k, v, dq, dk, dv, ctx;  // [b, a, s, dh] staging
  buffer<float> att1, att2;              // [b, a, s, s]
  buffer<uint16_t> half;                 // bf16 staging of the largest operand
  buffer<float> resid, dresid;           // the residual stream and its gradient [N, h]
  buffer<float> full1, full2;            // full-sequence [N, h] inside the TP region (sequence parallel)
  buffer<uint8_t> mask_bytes;                 // --pack-masks: a mask's bytes before packing / after unpacking
  moe::MoEWorkspace moe;                      // the MoE block's, sized by its routing

  // attention_s2 = false: fused attention (docs/design.md §3.1) needs no [b, a, s, s] buffers.
  void ensure(int64_t b, int64_t s, int64_t h, int64_t a, int64_t vocab_padded, bool attention_s2 = true,
              bool pack_masks = false) {
    const int64_t N = b * s, att = attention_s2 ? b * a * s * s : 0;
    auto grow = [](auto& buf, int64_t n) {
      if (int64_t(buf.size()) < n) buf.resize(size_t(n));
    };
    for (auto* buf : {&ln, &g1, &g2, &q, &k, &v, &dq, &dk, &dv, &ctx, &resid, &dresid, &full1, &full2}) grow(*buf, N * h);
    grow(big1, N * 4 * h), grow(big2, N * 4 * h);
    grow(widen, std::max(N * 4 * h, att));
    grow(att1, att), grow(att2, att);
    // Two staging areas: a gradient operand and, under sequence parallelism, a re-gathered input.
    grow(half, std::max({N * 4 * h, att, N * vocab_padded}) + N * 4 * h);
    if (pack_masks) grow(mask_bytes, std::max(N * h, att));
  }
};

}  // namespace lattice
