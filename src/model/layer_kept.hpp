#pragma once
// Exactly the tensors one transformer layer keeps for its backward (docs/design.md §3), each allocated
// through the tracking allocator under this layer's tag.
#include <cstdint>
#include <stdexcept>

#include "kernels/gemm.hpp"
#include "kernels/kept_mask.hpp"
#include "moe/moe_layer.hpp"
#include "tensor/memory_tracker.hpp"
#include "tensor/stored.hpp"

namespace lattice {

// A kept tensor as the GEMMs read it (its storage dtype is the compute dtype).
inline GemmOperand stored_operand(const Stored& t) {
  if (t.compressed()) throw std::logic_error("an 8-bit kept tensor is read through compute_operand");
  return {t.data(), t.dtype()};
}
// A kept tensor a bf16 pass (kernels/bf16_fused.hpp) reads or writes as it is stored: bf16 storage,
// not 8-bit; its bits.
inline bool direct_bf16(const Stored& t) { return t.dtype() == DType::bf16 && !t.compressed(); }
inline uint16_t* bf16_of(Stored& t) { return static_cast<uint16_t*>(t.data()); }
inline const uint16_t* bf16_of(const Stored& t) { return static_cast<const uint16_t*>(t.data()); }
// A kept tensor as a GEMM reads it: itself, or (8-bit) expanded into `scratch` in the compute dtype.
inline GemmOperand compute_operand(const Stored& t, void* scratch) {
  if (!t.compressed()) return stored_operand(t);
  t.load_as(scratch);
  return {scratch, t.dtype()};
}

struct LayerKept {
  Stored ln1_in;              // LN1 input = the layer input               sbh
  TrackedBuffer ln1_stats;    // LN1 mean, rstd (small, fp32)              2sb·4
  Stored qkv_in;              // LN1 output                                sbh
  Stored q, k, v;             // heads split [b, a, s, dh]                 3sbh
  Stored qkv;                 // or the QKV rows [b·s, 3·hl] as the GEMM wrote them (bf16, where the
                              // fused attention reads them there: FlashOperands::qkv_rows)  3sbh
  Stored probs;               // softmax output                            as²b   (not under selective)
  KeptMask attn_mask;         // attention dropout mask, 1 byte (1 bit)    as²b   (not under selective)
  Stored attn_dropped;        // attention dropout output                  as²b   (not under selective)
  TrackedBuffer attn_lse;     // fused attention: per-row log-sum-exp, fp32 4asb   (instead of the three above)
  Stored proj_in;             // context, heads merged                     sbh
  KeptMask resid1_mask;       // residual dropout mask (attention branch)  sbh    (sbh/8 with --pack-masks)
  Stored ln2_in;              // LN2 input                                 sbh
  TrackedBuffer ln2_stats;    //                                           2sb·4
  Stored fc1_in;              // LN2 output (an MoE layer's router input)   sbh
  Stored gelu_in;             // FC1 output                                4sbh
  Stored fc2_in;              // GeLU output                               4sbh
  KeptMask resid2_mask;       // residual dropout mask (MLP branch)        sbh    (sbh/8 with --pack-masks)
  moe::MoEKept moe;           // an MoE layer's block instead of gelu_in, fc2_in (analysis/moe_formulas.hpp)

  bool has_attention_s2() const { return bool(probs); }
  void release_attention_s2() { probs.reset(), attn_mask.reset(), attn_dropped.reset(); }
  // Full recompute keeps only the layer input.
  void release_all_but_input() {
    release_attention_s2();
    attn_lse.reset(), ln1_stats.reset(), qkv_in.reset(), q.reset(), k.reset(), v.reset(), qkv.reset(), proj_in.reset();
    resid1_mask.reset();
    ln2_in.reset(), ln2_stats.reset(), fc1_in.reset(), gelu_in.reset(), fc2_in.reset(), resid2_mask.reset();
    moe.release();
  }
  void release() {
    release_all_but_input();
    ln1_in.reset();
  }
};

// What a split backward's input pass (B) keeps of one layer and micro-batch for its weight pass (W)
// (docs/design.md §6): each linear's input and output gradient as its weight-gradient GEMM reads them
// (the kept input itself, moved, or its sequence-parallel re-gather), its bias's column sums, and
// each LayerNorm's per-thread partial sums; all tracked as activations under the layer's tag.
struct LayerWeightPending {
  struct Linear {
    Stored x, dy;            // [N, in] and [N, out] in the compute dtype (x may be 8-bit: compute_operand)
    TrackedBuffer bias_sums;  // [out] fp32
    int64_t N = 0, in = 0, out = 0;
  };
  Linear fc2, fc1, proj, qkv;  // in the order the fused backward computes them
  TrackedBuffer ln2_partials, ln1_partials;
  bool empty() const { return !qkv.dy; }
  void release() { *this = LayerWeightPending{}; }
};

}  // namespace lattice
