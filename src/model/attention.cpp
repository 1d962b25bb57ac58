#include "model/attention.hpp"

#include <cmath>

#include "backend/device_ops.hpp"
#include "tensor_parallel/ring_attention.hpp"

namespace lattice {

HeadShape head_shape(const LayerContext& c) { return {c.b, c.s, c.a, c.dh()}; }

void split_heads(float* q, float* k, float* v, const float* qkv, const LayerContext& c) {
  dev::split_heads(q, k, v, qkv, head_shape(c));
}
void merge_heads(float* out, const float* heads, const LayerContext& c) { dev::merge_heads(out, heads, head_shape(c)); }
void unmerge_heads(float* heads, const float* rows, const LayerContext& c) {
  dev::unmerge_heads(heads, rows, head_shape(c));
}
void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const LayerContext& c) {
  dev::merge_qkv_grads(dqkv, dq, dk, dv, head_shape(c));
}

namespace {

// Under bf16 activations Q, K, V are bf16 values: a device may multiply them in bf16.
FlashShape flash_shape(const LayerContext& c) { return {c.b, c.a, c.s, c.dh(), c.dtype == DType::bf16}; }
// The ring's view (context parallelism, p2p): this rank's s = S/c positions of its a heads in S.
parallel::HeadBlocks ring_blocks(const LayerContext& c) { return {c.b, c.a, c.seq_total, c.dh()}; }

// Where this micro-batch's attention dropout mask lives (each (row, head) block of s×s contiguous in
// the global index, docs/design.md §10); both the unfused and the fused attention draw from it.
AttentionDropout attention_dropout(const LayerContext& c) {
  AttentionDropout d;
  d.stream = c.stream;  // the mask's draw sets site = attention (AttentionMaskDraw)
  d.p = c.dropout;
  d.first_row = c.first_row, d.heads_total = c.heads_total, d.head0 = c.head0;
  return d;
}

// Q, K, V as kept, for the seam's fused attention: bf16 bits as they are, in the heads or the QKV rows
// (a device's bf16 kernels read them; the CPU widens them into q32, k32, v32), else fp32 (8-bit storage
// expanded there first).
FlashOperands flash_operands(const LayerKept& kept, const LayerContext& c, float* q32, float* k32, float* v32) {
  if (kept.qkv) {
    const uint16_t* rows = bf16_of(kept.qkv);
    return {rows, rows + c.hl(), rows + 2 * c.hl(), true, q32, k32, v32, /*qkv_rows=*/true};
  }
  if (direct_bf16(kept.q) && direct_bf16(kept.k) && direct_bf16(kept.v))
    return {kept.q.data(), kept.k.data(), kept.v.data(), true, q32, k32, v32};
  return {kept.q.load(q32), kept.k.load(k32), kept.v.load(v32), false, q32, k32, v32};
}

// The fused forward's one kept tensor of the s² part: the log-sum-exp, 4 bytes a row (docs/design.md §3.1).
float* keep_lse(LayerKept& kept, const LayerContext& c) {
  kept.attn_lse = TrackedBuffer(size_t(c.b * c.a * c.s) * sizeof(float), c.stream.layer, "attn_lse");
  return static_cast<float*>(kept.attn_lse.data());
}

// Fused forward: the context into ctx_out, the log-sum-exp kept.
// The ring (context parallelism) computes from fp32: bf16 Q, K, V widened once into fp32 staging.
void fused_forward(LayerKept& kept, float* ctx_out, const LayerContext& c, Workspace& ws) {
  float* lse = keep_lse(kept, c);
  if (c.cp.ring()) {
    const float* q = kept.q.load(ws.dq.data());
    const float* k = kept.k.load(ws.dk.data());
    const float* v = kept.v.load(ws.dv.data());
    parallel::ring_attention_forward(c.cp, ctx_out, lse, q, k, v, ring_blocks(c), attention_dropout(c));
  } else {
    dev::flash_attention_forward(ctx_out, lse, flash_operands(kept, c, ws.dq.data(), ws.dk.data(), ws.dv.data()),
                                 flash_shape(c), attention_dropout(c));
  }
}

// Fused backward: O is the kept context (proj_in, heads merged) split back into heads; kept as bf16
// bits, widened in the same pass.
void fused_backward(float* dq, float* dk, float* dv, const float* dctx, const LayerKept& kept, const LayerContext& c,
                    Workspace& ws, const float* o_heads) {
  if (!o_heads) {
    if (direct_bf16(kept.proj_in))
      dev::unmerge_heads_bf16(ws.big2.data(), bf16_of(kept.proj_in), head_shape(c));
    else
      unmerge_heads(ws.big2.data(), kept.proj_in.load(ws.widen.data()), c);
    o_heads = ws.big2.data();
  }
  const float* lse = static_cast<const float*>(kept.attn_lse.data());
  if (c.cp.ring()) {
    const float* q = kept.q.load(ws.q.data());
    const float* k = kept.k.load(ws.k.data());
    const float* v = kept.v.load(ws.v.data());
    parallel::ring_attention_backward(c.cp, dq, dk, dv, dctx, q, k, v, o_heads, lse, ring_blocks(c),
                                      attention_dropout(c));
  } else {
    dev::flash_attention_backward(dq, dk, dv, dctx, flash_operands(kept, c, ws.q.data(), ws.k.data(), ws.v.data()),
                                  o_heads, lse, flash_shape(c), attention_dropout(c));
  }
}

}  // namespace

bool fused_context_in_rows(const LayerContext& c) {
  return c.fused_attention && c.dtype == DType::bf16 && !c.cp.ring() && !c.cp.ulysses();
}
void attention_fused_forward_rows(LayerKept& kept, const LayerContext& c, Workspace& ws) {
  float* lse = keep_lse(kept, c);
  dev::flash_attention_forward_rows_bf16(bf16_of(kept.proj_in), lse,
                                         flash_operands(kept, c, ws.dq.data(), ws.dk.data(), ws.dv.data()),
                                         flash_shape(c), attention_dropout(c), ws.ctx.data());
}
void attention_fused_backward_rows(float* dq, float* dk, float* dv, const float* dctx_rows, const LayerKept& kept,
                                   const LayerContext& c, Workspace& ws) {
  // Rooms for a head-layout implementation: ctx, and big2 past the N·h floats dctx_rows may occupy.
  dev::flash_attention_backward_rows_bf16(dq, dk, dv, dctx_rows,
                                          flash_operands(kept, c, ws.q.data(), ws.k.data(), ws.v.data()),
                                          bf16_of(kept.proj_in), static_cast<const float*>(kept.attn_lse.data()),
                                          flash_shape(c), attention_dropout(c), ws.ctx.data(),
                                          ws.big2.data() + c.b * c.s * c.a * c.dh());
}

void attention_fused_backward_qkv_rows(uint16_t* dqkv16, float* db, const float* dctx_rows, const LayerKept& kept,
                                       const LayerContext& c, Workspace& ws) {
  // Rooms for a head-layout implementation: dq, dk, dv, ctx, and big2 past the N·h floats dctx_rows may occupy.
  const FlashRowsRooms rooms{ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.ctx.data(),
                             ws.big2.data() + c.b * c.s * c.a * c.dh()};
  dev::flash_attention_backward_qkv_rows_bf16(dqkv16, db, dctx_rows,
                                              flash_operands(kept, c, ws.q.data(), ws.k.data(), ws.v.data()),
                                              bf16_of(kept.proj_in), static_cast<const float*>(kept.attn_lse.data()),
                                              flash_shape(c), attention_dropout(c), rooms);
}

void attention_core_forward(LayerKept& kept, bool keep_s2, float* ctx_out, const LayerContext& c, Workspace& ws) {
  if (c.fused_attention) {
    if (ctx_out) fused_forward(kept, ctx_out, c, ws);
    return;
  }
  const int64_t n_att = c.b * c.a * c.s * c.s, dh = c.dh();
  const int layer = c.stream.layer;
  const bool fp32 = c.dtype == DType::fp32, drop = c.dropout > 0.0f;

  GemmShape qk;
  qk.batch = c.b * c.a, qk.M = c.s, qk.N = c.s, qk.K = dh, qk.trans_b = true;
  qk.alpha = 1.0f / std::sqrt(float(dh));
  dev::gemm(qk, stored_operand(kept.q), stored_operand(kept.k), ws.att1.data());

  // One pass per row: the kept tensors when s² is kept (none, or selective's recompute), else only what
  // the P·V GEMM reads, in its operand dtype, in the workspace.
  // --activation-compression fp8: the kept s² tensors go to 8 bits after the forward used them at
  // full precision (not selective's recompute in backward: it keeps nothing across the step).
  void* operand = fp32 ? static_cast<void*>(ws.att2.data()) : static_cast<void*>(ws.half.data());
  const bool compress = keep_s2 && ctx_out && c.fp8_kept;
  if (keep_s2) {
    kept.probs = compress ? Stored::fp8(n_att, c.s, c.dtype, layer, "softmax") : Stored(n_att, c.dtype, layer, "softmax");
    if (drop)
      kept.attn_dropped = compress ? Stored::fp8(n_att, c.s, c.dtype, layer, "attn_dropout")
                                   : Stored(n_att, c.dtype, layer, "attn_dropout");
  }
  void* probs_full = compress ? static_cast<void*>(ws.widen.data()) : nullptr;  // full precision, for the forward
  void* probs = keep_s2 ? (compress ? probs_full : kept.probs.data()) : drop ? nullptr : operand;
  uint8_t* mask = keep_s2 && drop ? kept.attn_mask.begin(n_att, c.pack_masks, layer, "attn_mask", ws.mask_bytes.data())
                                  : nullptr;
  void* dropped = !drop ? nullptr : keep_s2 && !compress ? kept.attn_dropped.data() : operand;
  dev::softmax_dropout_forward(probs, mask, dropped, c.dtype, ws.att1.data(), c.a, c.b * c.a, c.s, attention_dropout(c));
  if (mask) kept.attn_mask.finish();
  if (compress) {
    kept.probs.store_compressed(probs);
    if (drop) kept.attn_dropped.store_compressed(dropped);
  }
  if (!ctx_out) return;
  const GemmOperand dropped_op = keep_s2 && !compress ? stored_operand(drop ? kept.attn_dropped : kept.probs)
                                                      : GemmOperand{drop ? dropped : probs, c.dtype};

  GemmShape pv;
  pv.batch = c.b * c.a, pv.M = c.s, pv.N = dh, pv.K = c.s;
  dev::gemm(pv, dropped_op, stored_operand(kept.v), ctx_out);
}

void attention_core_backward(float* dq, float* dk, float* dv, const float* dctx, const LayerKept& kept,
                             const LayerContext& c, Workspace& ws, const float* o_heads) {
  if (c.fused_attention) return fused_backward(dq, dk, dv, dctx, kept, c, ws, o_heads);
  const int64_t n_att = c.b * c.a * c.s * c.s, dh = c.dh(), nh = c.b * c.a * c.s * dh;
  const bool drop = c.dropout > 0.0f;
  const Stored& dropped = drop ? kept.attn_dropped : kept.probs;

  const GemmOperand dctx_op = dev::as_operand(dctx, nh, c.dtype, ws.half.data());
  GemmShape dp;  // dDropped = dctx · Vᵀ
  dp.batch = c.b * c.a, dp.M = c.s, dp.N = c.s, dp.K = dh, dp.trans_b = true;
  dev::gemm(dp, dctx_op, stored_operand(kept.v), ws.att1.data());
  GemmShape dvs;  // dV = droppedᵀ · dctx
  dvs.batch = c.b * c.a, dvs.M = c.s, dvs.N = dh, dvs.K = c.s, dvs.trans_a = true;
  dev::gemm(dvs, compute_operand(dropped, ws.widen.data()), dctx_op, dv);

  if (drop)
    dev::dropout_backward(ws.att1.data(), ws.att1.data(), kept.attn_mask.unpacked(ws.mask_bytes.data()), n_att, c.dropout);
  GemmOperand ds_op{ws.half.data(), DType::bf16};
  if (c.dtype == DType::bf16 && !kept.probs.compressed()) {  // bf16 probs read and dS written in one pass
    dev::softmax_causal_backward_bf16(ws.half.data(), ws.att1.data(), static_cast<const uint16_t*>(kept.probs.data()),
                                      c.b * c.a, c.s);
  } else {
    const float* probs32 = kept.probs.load(ws.att2.data());
    dev::softmax_causal_backward(ws.att1.data(), ws.att1.data(), probs32, c.b * c.a, c.s);
    ds_op = dev::as_operand(ws.att1.data(), n_att, c.dtype, ws.half.data());
  }
  GemmShape dqs;  // dQ = dS · K / √dh
  dqs.batch = c.b * c.a, dqs.M = c.s, dqs.N = dh, dqs.K = c.s, dqs.alpha = 1.0f / std::sqrt(float(dh));
  dev::gemm(dqs, ds_op, stored_operand(kept.k), dq);
  GemmShape dks = dqs;  // dK = dSᵀ · Q / √dh
  dks.trans_a = true;
  dev::gemm(dks, ds_op, stored_operand(kept.q), dk);
}

}  // namespace lattice
