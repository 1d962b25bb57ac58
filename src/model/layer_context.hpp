#pragma once
// What one transformer layer needs to know about the micro-batch it runs and where that
// micro-batch sits in the global picture (so dropout masks are drawn by global position).
#include <cstdint>

#include "core/config.hpp"
#include "kernels/gemm.hpp"
#include "moe/moe_layer.hpp"
#include "tensor_parallel/conjugate.hpp"
#include "tensor_parallel/context_parallel.hpp"
#include "random/philox.hpp"

namespace lattice {

struct LayerContext {
  // Micro-batch rows, the sequence inside the TP region (the S/c positions this CP rank holds), hidden,
  // heads on this rank. Inside attention under CP (attention_context) s is S and a is a/c.
  int64_t b = 0, s = 0, h = 0, a = 0;
  DType dtype = DType::fp32;           // activation storage and GEMM input dtype
  float dropout = 0.0f;
  DropoutStream stream;                // seed, step, layer (site set per use)
  int64_t first_row = 0;               // global batch row of local row 0
  int64_t heads_total = 0, head0 = 0;  // global heads and the first local one (tensor parallel)
  int64_t seq_total = 0, pos0 = 0;     // global sequence length S; first local position under SP (of the s)
  int64_t s_local = 0;                 // positions this rank holds outside the TP region (s/t under SP; 0 = s)
  parallel::TensorParallel tp;         // the tensor-parallel group (none = one rank)
  parallel::ContextParallel cp;        // the context-parallel group (none = whole sequences, docs/design.md §5.1)
  bool fused_attention = false;        // tiled attention keeping the log-sum-exp (docs/design.md §3.1)
  bool pack_masks = false;             // dropout masks kept at one bit an element (docs/design.md §4)
  bool fp8_kept = false;               // GeLU input, FC2 input, s² tensors kept in 8 bits (docs/design.md §4)
  bool is_moe = false;                 // the MLP is an MoE block (docs/design.md §12)
  moe::MoEContext moe;
  double moe_aux_weight = 0;           // backward: d loss / d (each routing group's auxiliary loss)

  int64_t N() const { return b * s; }               // tokens inside the TP region
  int64_t seq_local() const { return s_local ? s_local : s; }
  int64_t N_local() const { return b * seq_local(); }  // tokens of the residual stream on this rank
  int64_t dh() const { return h / (heads_total ? heads_total : a); }
  int64_t hl() const { return a * dh(); }           // this rank's share of the hidden size (its heads)
  parallel::SequenceShape seq() const { return {b, s, h}; }
  parallel::SequenceSplit split() const { return cp.split(seq_total); }  // where the s positions sit in S
};

// The context attention's s² part runs in: this one (the ring's too: its blocks place themselves by
// global position), or under Ulysses (after the all-to-all) the whole sequence S for a/c heads
// starting at head0 + cp_rank·a/c, so masks and dropout are one rank's.
inline LayerContext attention_context(const LayerContext& c) {
  if (!c.cp.ulysses()) return c;
  LayerContext x = c;
  x.a = c.a / c.cp.size(), x.s = c.seq_total, x.head0 = c.head0 + c.cp.rank() * x.a;
  x.pos0 = 0, x.s_local = 0;
  return x;
}

// The weights of one layer as the kernels take them: fp32 for LayerNorm and biases, GEMM operands
// (fp32 or a bf16 copy) for the four matrices; an MoE layer's MLP is `moe` instead of fc1, fc2.
struct LayerWeights {
  const float *ln1_w, *ln1_b, *qkv_b, *proj_b, *ln2_w, *ln2_b, *fc1_b, *fc2_b;
  GemmOperand qkv, proj, fc1, fc2;
  moe::MoEWeights moe;
};
struct LayerGrads {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
  moe::MoEGrads moe;
};

}  // namespace lattice
