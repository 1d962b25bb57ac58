#include "model/transformer_layer.hpp"

#include "kernels/dropout.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"

namespace lattice {

namespace {

GemmOperand stored_operand(const Stored& t) { return {t.data(), t.dtype()}; }

// Where fp32 results go before being stored: straight into the kept tensor when it is fp32.
float* staging(Stored& t, float* scratch) { return t.dtype() == DType::fp32 ? t.f32() : scratch; }

// Residual dropout mask over [b, s, h] rows: global index (global_row · S + pos) · H + col.
void fill_residual_mask(uint8_t* mask, DropoutSite site, const LayerContext& c) {
  DropoutStream st = c.stream;
  st.site = site;
  const int64_t row = c.s * c.h;
  for (int64_t bi = 0; bi < c.b; ++bi) {
    const uint64_t first = uint64_t(((c.first_row + bi) * c.seq_total + c.pos0) * c.h);
    dropout_mask_fill(mask + bi * row, st, first, row, c.dropout);
  }
}

// x += Dropout(y) with the mask kept in `mask_buf`.
void residual_dropout_add(float* x, float* y, TrackedBuffer& mask_buf, DropoutSite site, const char* tag,
                          const LayerContext& c) {
  const int64_t n = c.N() * c.h;
  if (c.dropout > 0.0f) {
    mask_buf = TrackedBuffer(size_t(n), c.stream.layer, tag);
    auto* mask = static_cast<uint8_t*>(mask_buf.data());
    fill_residual_mask(mask, site, c);
    dropout_forward(y, y, mask, n, c.dropout);
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void layernorm_kept(Stored& out, TrackedBuffer& stats, const float* x, const float* w, const float* b,
                    const LayerContext& c, Workspace& ws, const char* tag) {
  const int64_t N = c.N();
  stats = TrackedBuffer(size_t(2 * N) * 4, c.stream.layer, tag);
  float* mean = static_cast<float*>(stats.data());
  float* y = staging(out, ws.ln.data());
  layernorm_forward(y, mean, mean + N, x, w, b, N, c.h);
  out.store(y);
}

}  // namespace

void layer_forward(float* x, LayerKept& kept, bool keep_s2, const LayerWeights& w, const LayerContext& c,
                   Workspace& ws) {
  const int64_t N = c.N(), h = c.h, layer = c.stream.layer;
  const DType dt = c.dtype;
  const int l = int(layer);

  // Attention block.
  if (!kept.ln1_in) kept.ln1_in = Stored(N * h, dt, l, "ln1_input");
  kept.ln1_in.store(x);
  kept.qkv_in = Stored(N * h, dt, l, "qkv_input");
  layernorm_kept(kept.qkv_in, kept.ln1_stats, x, w.ln1_w, w.ln1_b, c, ws, "ln1_stats");
  linear_forward(ws.big1.data(), stored_operand(kept.qkv_in), w.qkv, w.qkv_b, N, h, 3 * h);
  kept.q = Stored(N * h, dt, l, "q"), kept.k = Stored(N * h, dt, l, "k"), kept.v = Stored(N * h, dt, l, "v");
  float *q = staging(kept.q, ws.q.data()), *k = staging(kept.k, ws.k.data()), *v = staging(kept.v, ws.v.data());
  split_heads(q, k, v, ws.big1.data(), c);
  kept.q.store(q), kept.k.store(k), kept.v.store(v);
  attention_core_forward(kept, keep_s2, ws.ctx.data(), c, ws);
  kept.proj_in = Stored(N * h, dt, l, "proj_input");
  float* merged = staging(kept.proj_in, ws.ln.data());
  merge_heads(merged, ws.ctx.data(), c);
  kept.proj_in.store(merged);
  linear_forward(ws.big1.data(), stored_operand(kept.proj_in), w.proj, w.proj_b, N, h, h);
  residual_dropout_add(x, ws.big1.data(), kept.resid1_mask, DropoutSite::attention_residual, "resid1_mask", c);

  // MLP block.
  kept.ln2_in = Stored(N * h, dt, l, "ln2_input");
  kept.ln2_in.store(x);
  kept.fc1_in = Stored(N * h, dt, l, "fc1_input");
  layernorm_kept(kept.fc1_in, kept.ln2_stats, x, w.ln2_w, w.ln2_b, c, ws, "ln2_stats");
  kept.gelu_in = Stored(N * 4 * h, dt, l, "gelu_input");
  float* pre = staging(kept.gelu_in, ws.big1.data());
  linear_forward(pre, stored_operand(kept.fc1_in), w.fc1, w.fc1_b, N, h, 4 * h);
  kept.gelu_in.store(pre);
  kept.fc2_in = Stored(N * 4 * h, dt, l, "fc2_input");
  float* act = staging(kept.fc2_in, ws.big2.data());
  gelu_forward(act, pre, N * 4 * h);
  kept.fc2_in.store(act);
  linear_forward(ws.big1.data(), stored_operand(kept.fc2_in), w.fc2, w.fc2_b, N, 4 * h, h);
  residual_dropout_add(x, ws.big1.data(), kept.resid2_mask, DropoutSite::mlp_residual, "resid2_mask", c);
}

void layer_recompute_attention(LayerKept& kept, const LayerContext& c, Workspace& ws) {
  attention_core_forward(kept, /*keep_s2=*/true, /*ctx_out=*/nullptr, c, ws);
}

void layer_backward(float* dx, const LayerKept& kept, const LayerWeights& w, const LayerGrads& g,
                    const LayerContext& c, Workspace& ws) {
  const int64_t N = c.N(), h = c.h;
  const DType dt = c.dtype;
  uint16_t* half = ws.half.data();
  const auto* ln1_stats = static_cast<const float*>(kept.ln1_stats.data());
  const auto* ln2_stats = static_cast<const float*>(kept.ln2_stats.data());

  // MLP block: dy = Dropout'(dx); FC2, GeLU, FC1, LN2; dx += LN2'(...).
  float* dy = ws.g1.data();
  if (c.dropout > 0.0f)
    dropout_backward(dy, dx, static_cast<const uint8_t*>(kept.resid2_mask.data()), N * h, c.dropout);
  else
    std::copy(dx, dx + N * h, dy);
  linear_backward(ws.big1.data(), g.fc2_w, g.fc2_b, dy, as_operand(dy, N * h, dt, half),
                  stored_operand(kept.fc2_in), w.fc2, N, 4 * h, h);
  const float* pre = kept.gelu_in.load(ws.widen.data());
  gelu_backward(ws.big1.data(), pre, ws.big1.data(), N * 4 * h);
  linear_backward(ws.g2.data(), g.fc1_w, g.fc1_b, ws.big1.data(), as_operand(ws.big1.data(), N * 4 * h, dt, half),
                  stored_operand(kept.fc1_in), w.fc1, N, h, 4 * h);
  const float* ln2_in = kept.ln2_in.load(ws.widen.data());
  layernorm_backward(dx, g.ln2_w, g.ln2_b, ws.g2.data(), ln2_in, w.ln2_w, ln2_stats, ln2_stats + N, N, h);

  // Attention block.
  if (c.dropout > 0.0f)
    dropout_backward(dy, dx, static_cast<const uint8_t*>(kept.resid1_mask.data()), N * h, c.dropout);
  else
    std::copy(dx, dx + N * h, dy);
  linear_backward(ws.g2.data(), g.proj_w, g.proj_b, dy, as_operand(dy, N * h, dt, half),
                  stored_operand(kept.proj_in), w.proj, N, h, h);
  unmerge_heads(ws.ctx.data(), ws.g2.data(), c);
  attention_core_backward(ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.ctx.data(), kept, c, ws);
  merge_qkv_grads(ws.big1.data(), ws.dq.data(), ws.dk.data(), ws.dv.data(), c);
  linear_backward(ws.g2.data(), g.qkv_w, g.qkv_b, ws.big1.data(), as_operand(ws.big1.data(), N * 3 * h, dt, half),
                  stored_operand(kept.qkv_in), w.qkv, N, h, 3 * h);
  const float* ln1_in = kept.ln1_in.load(ws.widen.data());
  layernorm_backward(dx, g.ln1_w, g.ln1_b, ws.g2.data(), ln1_in, w.ln1_w, ln1_stats, ln1_stats + N, N, h);
}

}  // namespace lattice
