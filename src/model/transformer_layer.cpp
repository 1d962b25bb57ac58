#include "model/transformer_layer.hpp"

#include "kernels/dropout.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "moe/moe_layer.hpp"

namespace lattice {

namespace {

// Where fp32 results go before being stored: straight into the kept tensor when it is fp32.
float* staging(Stored& t, float* scratch) { return t.dtype() == DType::fp32 && !t.compressed() ? t.f32() : scratch; }

// A kept tensor of `numel` elements in rows of `row`: in the activation dtype, or in 8 bits when the
// layout compresses it (--activation-compression fp8: the GeLU input, the FC2 input and the
// attention's s² tensors; docs/design.md §4).
Stored kept_tensor(bool compress, int64_t numel, int64_t row, DType dtype, int layer, const char* op) {
  return compress ? Stored::fp8(numel, row, dtype, layer, op) : Stored(numel, dtype, layer, op);
}

// Residual dropout mask over this rank's [b, s_local, h] rows: global index
// (global_row · S + pos0 + i) · H + col, so sequence shards draw the one-rank mask.
void fill_residual_mask(uint8_t* mask, DropoutSite site, const LayerContext& c) {
  DropoutStream st = c.stream;
  st.site = site;
  const int64_t row = c.seq_local() * c.h;
  for (int64_t bi = 0; bi < c.b; ++bi) {
    const uint64_t first = uint64_t(((c.first_row + bi) * c.seq_total + c.pos0) * c.h);
    dropout_mask_fill(mask + bi * row, st, first, row, c.dropout);
  }
}

// x += Dropout(y + bias) over the local rows, with the mask kept in `mask_buf`.
void residual_dropout_add(float* x, float* y, const float* bias, KeptMask& kept_mask, DropoutSite site,
                          const char* tag, const LayerContext& c, Workspace& ws) {
  const int64_t n = c.N_local() * c.h, h = c.h;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < c.N_local(); ++r)
      for (int64_t i = 0; i < h; ++i) y[r * h + i] += bias[i];
  }
  if (c.dropout > 0.0f) {
    uint8_t* mask = kept_mask.begin(n, c.pack_masks, int(c.stream.layer), tag, ws.mask_bytes.data());
    fill_residual_mask(mask, site, c);
    dropout_forward(y, y, mask, n, c.dropout);
    kept_mask.finish();
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// LayerNorm of the local rows into `out` (kept); returns the fp32 result.
const float* layernorm_kept(Stored& out, TrackedBuffer& stats, const float* x, const float* w, const float* b,
                            const LayerContext& c, Workspace& ws, const char* tag) {
  const int64_t N = c.N_local();
  stats = TrackedBuffer(size_t(2 * N) * 4, c.stream.layer, tag);
  float* mean = static_cast<float*>(stats.data());
  float* y = staging(out, ws.ln.data());
  layernorm_forward(y, mean, mean + N, x, w, b, N, c.h);
  out.store(y);
  return y;
}

// The operand a column-parallel GEMM reads: the kept input itself, or (sequence parallel) its
// all-gather along the sequence (g) in the compute dtype.
GemmOperand column_input(const Stored& kept, const float* local32, const LayerContext& c, Workspace& ws,
                         uint16_t* half, bool regather = false) {
  if (!(c.tp.active() && c.tp.sequence_parallel)) return stored_operand(kept);
  const float* full = parallel::enter_forward(c.tp, local32, ws.full1.data(), c.seq(), regather);
  return as_operand(full, c.N() * c.h, c.dtype, half);
}

// A row-parallel GEMM's output: y = x·W (+ bias), summed over the TP group (f̄, or ḡ under SP)
// into the local rows `out`; the bias is added by residual_dropout_add when the output is reduced.
const float* row_parallel_forward(float* out, GemmOperand x, GemmOperand w, const float* bias, int64_t in,
                                  const LayerContext& c, Workspace& ws, const float** bias_after) {
  if (!c.tp.active()) {
    linear_forward(out, x, w, bias, c.N(), in, c.h);
    *bias_after = nullptr;
    return out;
  }
  linear_forward(ws.full2.data(), x, w, nullptr, c.N(), in, c.h);
  parallel::leave_forward(c.tp, ws.full2.data(), out, c.seq());
  *bias_after = bias;
  return out;
}

}  // namespace

void layer_forward(float* x, LayerKept& kept, bool keep_s2, const LayerWeights& w, const LayerContext& c,
                   Workspace& ws) {
  const int64_t N = c.N(), Nl = c.N_local(), h = c.h, hl = c.hl();
  const DType dt = c.dtype;
  const int l = int(c.stream.layer);
  const float* bias_after = nullptr;

  // Attention block.
  if (!kept.ln1_in) kept.ln1_in = Stored(Nl * h, dt, l, "ln1_input");
  kept.ln1_in.store(x);
  kept.qkv_in = Stored(Nl * h, dt, l, "qkv_input");
  const float* ln1 = layernorm_kept(kept.qkv_in, kept.ln1_stats, x, w.ln1_w, w.ln1_b, c, ws, "ln1_stats");
  linear_forward(ws.big1.data(), column_input(kept.qkv_in, ln1, c, ws, ws.half.data()), w.qkv, w.qkv_b, N, h,
                 3 * hl);
  kept.q = Stored(N * hl, dt, l, "q"), kept.k = Stored(N * hl, dt, l, "k"), kept.v = Stored(N * hl, dt, l, "v");
  float *q = staging(kept.q, ws.q.data()), *k = staging(kept.k, ws.k.data()), *v = staging(kept.v, ws.v.data());
  split_heads(q, k, v, ws.big1.data(), c);
  kept.q.store(q), kept.k.store(k), kept.v.store(v);
  attention_core_forward(kept, keep_s2, ws.ctx.data(), c, ws);
  kept.proj_in = Stored(N * hl, dt, l, "proj_input");
  float* merged = staging(kept.proj_in, ws.ln.data());
  merge_heads(merged, ws.ctx.data(), c);
  kept.proj_in.store(merged);
  row_parallel_forward(ws.big1.data(), stored_operand(kept.proj_in), w.proj, w.proj_b, hl, c, ws, &bias_after);
  residual_dropout_add(x, ws.big1.data(), bias_after, kept.resid1_mask, DropoutSite::attention_residual,
                       "resid1_mask", c, ws);

  // MLP block.
  kept.ln2_in = Stored(Nl * h, dt, l, "ln2_input");
  kept.ln2_in.store(x);
  kept.fc1_in = Stored(Nl * h, dt, l, c.is_moe ? "router_input" : "fc1_input");
  const float* ln2 = layernorm_kept(kept.fc1_in, kept.ln2_stats, x, w.ln2_w, w.ln2_b, c, ws, "ln2_stats");
  if (c.is_moe) {  // the block's output is partial over TP, reduced like a row-parallel GEMM's
    const float* full = parallel::enter_forward(c.tp, ln2, ws.full1.data(), c.seq());
    float* partial = c.tp.active() ? ws.full2.data() : ws.big1.data();
    moe::moe_forward(partial, full, kept.moe, w.moe, c.moe, ws.moe);
    if (c.tp.active()) parallel::leave_forward(c.tp, partial, ws.big1.data(), c.seq());
    residual_dropout_add(x, ws.big1.data(), nullptr, kept.resid2_mask, DropoutSite::mlp_residual, "resid2_mask", c, ws);
    return;
  }
  kept.gelu_in = kept_tensor(c.fp8_kept, N * 4 * hl, 4 * hl, dt, l, "gelu_input");
  float* pre = staging(kept.gelu_in, ws.big1.data());
  linear_forward(pre, column_input(kept.fc1_in, ln2, c, ws, ws.half.data()), w.fc1, w.fc1_b, N, h, 4 * hl);
  kept.gelu_in.store(pre);
  kept.fc2_in = kept_tensor(c.fp8_kept, N * 4 * hl, 4 * hl, dt, l, "fc2_input");
  float* act = staging(kept.fc2_in, ws.big2.data());
  gelu_forward(act, pre, N * 4 * hl);
  kept.fc2_in.store(act);
  // The forward reads the full-precision values; only what backward reads is compressed.
  const GemmOperand fc2_x =
      kept.fc2_in.compressed() ? as_operand(act, N * 4 * hl, dt, ws.half.data()) : stored_operand(kept.fc2_in);
  row_parallel_forward(ws.big1.data(), fc2_x, w.fc2, w.fc2_b, 4 * hl, c, ws, &bias_after);
  residual_dropout_add(x, ws.big1.data(), bias_after, kept.resid2_mask, DropoutSite::mlp_residual, "resid2_mask",
                       c, ws);
}

void layer_recompute_attention(LayerKept& kept, const LayerContext& c, Workspace& ws) {
  if (c.fused_attention) return;  // its forward kept the log-sum-exp whatever the mode: nothing to re-create
  attention_core_forward(kept, /*keep_s2=*/true, /*ctx_out=*/nullptr, c, ws);
}

namespace {

// Backward of one residual branch's output: dy_local = Dropout'(dx_local), then the full-sequence
// gradient the row-parallel GEMM's backward reads (ḡ's backward all-gathers it under SP).
const float* branch_output_grad(const float* dx, const KeptMask& mask, const LayerContext& c, Workspace& ws) {
  const int64_t n = c.N_local() * c.h;
  float* dy = ws.g1.data();
  if (c.dropout > 0.0f)
    dropout_backward(dy, dx, mask.unpacked(ws.mask_bytes.data()), n, c.dropout);
  else
    std::copy(dx, dx + n, dy);
  return parallel::leave_backward(c.tp, dy, ws.full2.data(), c.seq());
}

// The column-parallel GEMM's input for its weight gradient: the kept input, or (SP) re-gathered.
GemmOperand column_input_again(const Stored& kept, const LayerContext& c, Workspace& ws, uint16_t* half) {
  if (!(c.tp.active() && c.tp.sequence_parallel)) return stored_operand(kept);
  const float* local = kept.load(ws.widen.data());
  return column_input(kept, local, c, ws, half, /*regather=*/true);
}

// Backward of a LayerNorm whose output fed the TP region: the partial full-sequence gradient of its
// output, summed over TP (f, or g under SP), then the LayerNorm's input gradient added to dx.
void ln_backward(float* dx, float* dout_full, const Stored& ln_in, const TrackedBuffer& ln_stats, const float* ln_w,
                 float* dln_w, float* dln_b, const LayerContext& c, Workspace& ws) {
  const int64_t Nl = c.N_local(), h = c.h;
  parallel::enter_backward(c.tp, dout_full, ws.g2.data(), c.seq());
  const auto* stats = static_cast<const float*>(ln_stats.data());
  layernorm_backward(dx, dln_w, dln_b, ws.g2.data(), ln_in.load(ws.widen.data()), ln_w, stats, stats + Nl, Nl, h);
}

// Backward of LayerNorm → column-parallel linear (LN1 → QKV, LN2 → FC1): from the linear's
// output gradient dout [N, out], its weight and bias gradients, then the LayerNorm's, whose input
// gradient is added to dx (the residual stream).
void ln_column_backward(float* dx, float* dout, int64_t out, const Stored& linear_in, GemmOperand w, float* dw,
                        float* db, const Stored& ln_in, const TrackedBuffer& ln_stats, const float* ln_w, float* dln_w,
                        float* dln_b, const LayerContext& c, Workspace& ws) {
  const int64_t N = c.N(), h = c.h;
  uint16_t* half_input = ws.half.data() + std::max(N * out, N * h);  // beside dout's bf16 copy
  const GemmOperand in = column_input_again(linear_in, c, ws, half_input);
  // The input gradient goes to full2 (a spent dy under SP); a re-gathered input sits in full1.
  linear_backward(ws.full2.data(), dw, db, dout, as_operand(dout, N * out, c.dtype, ws.half.data()), in, w, N, h,
                  out);
  ln_backward(dx, ws.full2.data(), ln_in, ln_stats, ln_w, dln_w, dln_b, c, ws);
}

}  // namespace

void layer_backward(float* dx, const LayerKept& kept, const LayerWeights& w, const LayerGrads& g,
                    const LayerContext& c, Workspace& ws) {
  const int64_t N = c.N(), h = c.h, hl = c.hl();
  const DType dt = c.dtype;
  uint16_t* half = ws.half.data();

  // MLP block: FC2 (row-parallel), GeLU, then LN2 → FC1 (column-parallel); or the MoE block.
  const float* dy = branch_output_grad(dx, kept.resid2_mask, c, ws);
  if (c.is_moe) {
    const float* full = parallel::enter_forward(c.tp, kept.fc1_in.load(ws.widen.data()), ws.full1.data(), c.seq(),
                                                /*regather=*/true);
    moe::moe_backward(ws.big1.data(), dy, full, kept.moe, w.moe, g.moe, c.moe, c.moe_aux_weight, ws.moe);
    ln_backward(dx, ws.big1.data(), kept.ln2_in, kept.ln2_stats, w.ln2_w, g.ln2_w, g.ln2_b, c, ws);
  } else {
  linear_backward(ws.big1.data(), g.fc2_w, g.fc2_b, dy, as_operand(dy, N * h, dt, half),
                  compute_operand(kept.fc2_in, ws.big2.data()), w.fc2, N, 4 * hl, h);
  const float* pre = kept.gelu_in.load(ws.widen.data());
  gelu_backward(ws.big1.data(), pre, ws.big1.data(), N * 4 * hl);
  ln_column_backward(dx, ws.big1.data(), 4 * hl, kept.fc1_in, w.fc1, g.fc1_w, g.fc1_b, kept.ln2_in, kept.ln2_stats,
                     w.ln2_w, g.ln2_w, g.ln2_b, c, ws);
  }

  // Attention block: projection (row-parallel), attention core, then LN1 → QKV (column-parallel).
  dy = branch_output_grad(dx, kept.resid1_mask, c, ws);
  linear_backward(ws.big2.data(), g.proj_w, g.proj_b, dy, as_operand(dy, N * h, dt, half),
                  stored_operand(kept.proj_in), w.proj, N, hl, h);
  unmerge_heads(ws.ctx.data(), ws.big2.data(), c);
  attention_core_backward(ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.ctx.data(), kept, c, ws);
  merge_qkv_grads(ws.big1.data(), ws.dq.data(), ws.dk.data(), ws.dv.data(), c);
  ln_column_backward(dx, ws.big1.data(), 3 * hl, kept.qkv_in, w.qkv, g.qkv_w, g.qkv_b, kept.ln1_in, kept.ln1_stats,
                     w.ln1_w, g.ln1_w, g.ln1_b, c, ws);
}

}  // namespace lattice
