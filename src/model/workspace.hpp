#pragma once
// Transient fp32/bf16 buffers reused by every layer (ZeRO-R's "constant-size buffers"): not
// activations kept for backward, so counted apart, under MemoryCategory::workspaces.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "analysis/memory_categories.hpp"
#include "moe/moe_layer.hpp"
#include "tensor/device_memory.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

struct Workspace {
  template <class T>
  using buffer = DeviceVector<T, MemoryCategory::workspaces>;
  buffer<float> ln, g1, g2;              // [N, h]
  buffer<float> big1, big2, widen;       // [N, 4h] (widen also holds bf16 tensors read back)
  buffer<float> q, k, v, dq, dk, dv, ctx;  // [b, a, s, dh] staging
  buffer<float> att1, att2;              // [b, a, s, s]
  buffer<uint16_t> half;                 // bf16 staging of the largest operand
  buffer<float> resid, dresid;           // the residual stream and its gradient [N, h]
  buffer<float> full1, full2;            // full-sequence [N, h] inside the TP region (sequence parallel)
  buffer<uint8_t> mask_bytes;                 // --pack-masks: a mask's bytes before packing / after unpacking
  moe::MoEWorkspace moe;                      // the MoE block's, sized by its routing

  // attention_s2 = false: fused attention (docs/design.md §3.1) needs no [b, a, s, s] buffers. s: the
  // positions inside the TP region (S/c under context parallelism, whose attention runs a/c heads over S).
  void ensure(int64_t b, int64_t s, int64_t h, int64_t a, int64_t vocab_padded, bool attention_s2 = true,
              bool pack_masks = false, int cp = 1) {
    // Sized by the formula module, so the planner predicts exactly these bytes.
    const analysis::LayerWorkspace w =
        analysis::layer_workspace(b, s, h, a, vocab_padded, attention_s2, pack_masks, cp);
    auto grow = [](auto& buf, int64_t n) {
      if (int64_t(buf.size()) < n) buf.resize(size_t(n));
    };
    for (auto* buf : {&ln, &g1, &g2, &q, &k, &v, &dq, &dk, &dv, &ctx, &resid, &dresid, &full1, &full2}) grow(*buf, w.nh);
    grow(big1, w.n4h), grow(big2, w.n4h);
    grow(widen, w.widen);
    grow(att1, w.att), grow(att2, w.att);
    grow(half, w.half);
    grow(mask_bytes, w.mask_bytes);
  }
};

}  // namespace lattice
