// One pre-LN layer's forward and backward (model/transformer_layer.hpp). Past the usual length on
// purpose: the forward, the backward and its input and weight halves must keep and release the same
// kept tensors in the same order (docs/design.md §3), which reads best in one file.
#include "model/transformer_layer.hpp"

#include <cstring>
#include <stdexcept>

#include "backend/device_ops.hpp"
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

// Residual dropout mask over this rank's [b, s_local, h] rows, so sequence shards (SP, CP) draw the
// one-rank mask.
void fill_residual_mask(uint8_t* mask, DropoutSite site, const LayerContext& c) {
  DropoutStream st = c.stream;
  st.site = site;
  fill_sequence_mask(mask, st, c.first_row, c.b, c.split(), c.pos0, c.seq_local(), c.h, c.dropout);
}

// x += Dropout(y + bias) over the local rows, with the mask kept in `mask_buf`.
void residual_dropout_add(float* x, float* y, const float* bias, KeptMask& kept_mask, DropoutSite site,
                          const char* tag, const LayerContext& c, Workspace& ws) {
  const int64_t n = c.N_local() * c.h, h = c.h;
  if (bias) dev::bias_add_rows(y, bias, c.N_local(), h);
  if (c.dropout > 0.0f) {
    uint8_t* mask = kept_mask.begin(n, c.pack_masks, int(c.stream.layer), tag, ws.mask_bytes.data());
    fill_residual_mask(mask, site, c);
    dev::dropout_forward(y, y, mask, n, c.dropout);
    kept_mask.finish();
  }
  dev::residual_add(x, y, n);
}


// LayerNorm of the local rows into `out` (kept); returns the fp32 result.
const float* layernorm_kept(Stored& out, TrackedBuffer& stats, const float* x, const float* w, const float* b,
                            const LayerContext& c, Workspace& ws, const char* tag) {
  const int64_t N = c.N_local();
  stats = TrackedBuffer(size_t(2 * N) * 4, c.stream.layer, tag);
  float* mean = static_cast<float*>(stats.data());
  float* y = staging(out, ws.ln.data());
  dev::layernorm_forward(y, mean, mean + N, x, w, b, N, c.h);
  out.store(y);
  return y;
}

// The LayerNorm's input x kept in `in` and its output in `out`: in one bf16 pass where both are bf16
// and nothing reads the fp32 output (returns null then), else the store and layernorm_kept (returns the
// fp32 output). `fp32_read`: a reader of the fp32 output besides the sequence-parallel gather (MoE).
const float* layernorm_pair(Stored& in, Stored& out, TrackedBuffer& stats, const float* x, const float* w,
                            const float* b, bool fp32_read, const LayerContext& c, Workspace& ws, const char* tag) {
  if (fp32_read || (c.tp.active() && c.tp.sequence_parallel) || !direct_bf16(in) || !direct_bf16(out)) {
    in.store(x);
    return layernorm_kept(out, stats, x, w, b, c, ws, tag);
  }
  const int64_t N = c.N_local();
  stats = TrackedBuffer(size_t(2 * N) * 4, c.stream.layer, tag);
  float* mean = static_cast<float*>(stats.data());
  dev::layernorm_forward_bf16(bf16_of(in), bf16_of(out), mean, mean + N, x, w, b, N, c.h);
  return nullptr;
}

// The operand a column-parallel GEMM reads: the kept input itself, or (sequence parallel) its
// all-gather along the sequence (g) in the compute dtype.
GemmOperand column_input(const Stored& kept, const float* local32, const LayerContext& c, Workspace& ws,
                         uint16_t* half, bool regather = false) {
  if (!(c.tp.active() && c.tp.sequence_parallel)) return stored_operand(kept);
  const float* full = parallel::enter_forward(c.tp, local32, ws.full1.data(), c.seq(), regather);
  return dev::as_operand(full, c.N() * c.h, c.dtype, half);
}

// A row-parallel GEMM's output: y = x·W (+ bias), summed over the TP group (f̄, or ḡ under SP)
// into the local rows `out`; the bias is added by residual_dropout_add when the output is reduced.
const float* row_parallel_forward(float* out, GemmOperand x, GemmOperand w, const float* bias, int64_t in,
                                  const LayerContext& c, Workspace& ws, const float** bias_after) {
  if (!c.tp.active()) {
    dev::linear_forward(out, x, w, bias, c.N(), in, c.h);
    *bias_after = nullptr;
    return out;
  }
  dev::linear_forward(ws.full2.data(), x, w, nullptr, c.N(), in, c.h);
  parallel::leave_forward(c.tp, ws.full2.data(), out, c.seq());
  *bias_after = bias;
  return out;
}

// x += Dropout(y·W + bias) for a row-parallel linear (the projection, FC2) whose input operand is y:
// where nothing comes between the GEMM and the sum (one rank, no dropout) one call, whose device may
// add into x in the GEMM's epilogue; otherwise the GEMM into big1, reduced over TP, and
// residual_dropout_add.
void row_parallel_residual(float* x, GemmOperand y, GemmOperand w, const float* bias, int64_t in, KeptMask& mask,
                           DropoutSite site, const char* tag, const LayerContext& c, Workspace& ws) {
  if (!c.tp.active() && c.dropout == 0.0f && c.N() == c.N_local()) {
    dev::linear_forward_residual(x, y, w, bias, c.N(), in, c.h, ws.big1.data());
    return;
  }
  const float* bias_after = nullptr;
  row_parallel_forward(ws.big1.data(), y, w, bias, in, c, ws, &bias_after);
  residual_dropout_add(x, ws.big1.data(), bias_after, mask, site, tag, c, ws);
}

// A bf16 run's linear output where an fp32 pass reads it next (context parallel's QKV split, the 8-bit
// kept tensors' GeLU): linear_forward_bf16's values (the bias rounded to bf16), widened into y, so that
// every path of the run computes what the direct path keeps. y16 is N·out bf16 of staging; y is the
// operation's fp32 room too, written last.
void linear_forward_widened(float* y, uint16_t* y16, GemmOperand x, GemmOperand w, const float* bias, int64_t N,
                            int64_t in, int64_t out) {
  dev::linear_forward_bf16(y16, x, w, bias, N, in, out, y);
  device_memory().from_bf16(y16, y, N * out);
}

// Ulysses' exchanges (tensor_parallel/context_parallel.hpp) for this layer's head blocks.
parallel::HeadBlocks head_blocks(const LayerContext& c) { return {c.b, c.a, c.seq_total, c.dh()}; }

}  // namespace

void fill_sequence_mask(uint8_t* mask, const DropoutStream& stream, int64_t first_row, int64_t b,
                        const parallel::SequenceSplit& split, int64_t pos0, int64_t n, int64_t h, float p) {
  for (int64_t bi = 0; bi < b; ++bi)
    split.runs(pos0, n, [&](int64_t local, int64_t global, int64_t len) {
      const uint64_t first = uint64_t(((first_row + bi) * split.S + global) * h);
      dev::dropout_mask_fill(mask + (bi * n + local - pos0) * h, stream, first, len * h, p);
    });
}

void layer_forward(float* x, LayerKept& kept, bool keep_s2, const LayerWeights& w, const LayerContext& c,
                   Workspace& ws) {
  const int64_t N = c.N(), Nl = c.N_local(), h = c.h, hl = c.hl();
  const DType dt = c.dtype;
  const int l = int(c.stream.layer);

  // Attention block.
  if (!kept.ln1_in) kept.ln1_in = Stored(Nl * h, dt, l, "ln1_input");
  kept.qkv_in = Stored(Nl * h, dt, l, "qkv_input");
  const float* ln1 =
      layernorm_pair(kept.ln1_in, kept.qkv_in, kept.ln1_stats, x, w.ln1_w, w.ln1_b, false, c, ws, "ln1_stats");
  const GemmOperand qkv_x = column_input(kept.qkv_in, ln1, c, ws, ws.half.data());
  // The fused attention reading the token rows reads Q, K, V there too: the QKV rows are kept as the
  // GEMM writes them, in bf16 (FlashOperands::qkv_rows); otherwise Q, K, V are kept split into heads.
  const bool qkv_rows = fused_context_in_rows(c);
  if (qkv_rows) {
    // big2: the fp32 room of an implementation that needs one.
    kept.qkv = Stored(N * 3 * hl, dt, l, "qkv");
    dev::linear_forward_bf16(bf16_of(kept.qkv), qkv_x, w.qkv, w.qkv_b, N, h, 3 * hl, ws.big2.data());
  } else {
    kept.q = Stored(N * hl, dt, l, "q"), kept.k = Stored(N * hl, dt, l, "k"), kept.v = Stored(N * hl, dt, l, "v");
    if (!c.cp.ulysses() && direct_bf16(kept.q) && direct_bf16(kept.k) && direct_bf16(kept.v)) {
      // The GEMM writes the rows in bf16 (in big1's room; big2 the fp32 room of an implementation that
      // needs one) and the split copies them: the bits of the fp32 rows split and narrowed.
      uint16_t* rows16 = reinterpret_cast<uint16_t*>(ws.big1.data());
      dev::linear_forward_bf16(rows16, qkv_x, w.qkv, w.qkv_b, N, h, 3 * hl, ws.big2.data());
      dev::split_heads16(bf16_of(kept.q), bf16_of(kept.k), bf16_of(kept.v), rows16, head_shape(c));
    } else {
      if (dt == DType::bf16) {
        linear_forward_widened(ws.big1.data(), reinterpret_cast<uint16_t*>(ws.big2.data()), qkv_x, w.qkv, w.qkv_b, N,
                               h, 3 * hl);
      } else {
        dev::linear_forward(ws.big1.data(), qkv_x, w.qkv, w.qkv_b, N, h, 3 * hl);
      }
      float *q = staging(kept.q, ws.q.data()), *k = staging(kept.k, ws.k.data()), *v = staging(kept.v, ws.v.data());
      if (c.cp.ulysses()) {
        // Ulysses: this rank's positions of its heads → a/c heads at every position (kept so: backward
        // and selective recompute read them there). dq, dk, dv are free until backward.
        split_heads(ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.big1.data(), c);
        parallel::sequence_to_heads(c.cp, ws.dq.data(), q, head_blocks(c));
        parallel::sequence_to_heads(c.cp, ws.dk.data(), k, head_blocks(c));
        parallel::sequence_to_heads(c.cp, ws.dv.data(), v, head_blocks(c));
      } else {
        split_heads(q, k, v, ws.big1.data(), c);
      }
      kept.q.store(q), kept.k.store(k), kept.v.store(v);
    }
  }
  if (qkv_rows) {  // the attention writes the projection's input itself
    kept.proj_in = Stored(N * hl, dt, l, "proj_input");
    attention_fused_forward_rows(kept, c, ws);
  } else {
    attention_core_forward(kept, keep_s2, ws.ctx.data(), attention_context(c), ws);
    const float* context = ws.ctx.data();
    if (c.cp.ulysses()) {  // back to this rank's positions of its a heads (the fused forward is done with dq)
      parallel::heads_to_sequence(c.cp, ws.ctx.data(), ws.dq.data(), head_blocks(c));
      context = ws.dq.data();
    }
    kept.proj_in = Stored(N * hl, dt, l, "proj_input");
    if (direct_bf16(kept.proj_in)) {
      dev::merge_heads_bf16(bf16_of(kept.proj_in), context, head_shape(c));
    } else {
      float* merged = staging(kept.proj_in, ws.ln.data());
      merge_heads(merged, context, c);
      kept.proj_in.store(merged);
    }
  }
  row_parallel_residual(x, stored_operand(kept.proj_in), w.proj, w.proj_b, hl, kept.resid1_mask,
                        DropoutSite::attention_residual, "resid1_mask", c, ws);

  // MLP block.
  kept.ln2_in = Stored(Nl * h, dt, l, "ln2_input");
  kept.fc1_in = Stored(Nl * h, dt, l, c.is_moe ? "router_input" : "fc1_input");
  const float* ln2 =
      layernorm_pair(kept.ln2_in, kept.fc1_in, kept.ln2_stats, x, w.ln2_w, w.ln2_b, c.is_moe, c, ws, "ln2_stats");
  if (c.is_moe) {  // the block's output is partial over TP, reduced like a row-parallel GEMM's
    const float* full = parallel::enter_forward(c.tp, ln2, ws.full1.data(), c.seq());
    float* partial = c.tp.active() ? ws.full2.data() : ws.big1.data();
    moe::moe_forward(partial, full, kept.moe, w.moe, c.moe, ws.moe);
    if (c.tp.active()) parallel::leave_forward(c.tp, partial, ws.big1.data(), c.seq());
    residual_dropout_add(x, ws.big1.data(), nullptr, kept.resid2_mask, DropoutSite::mlp_residual, "resid2_mask", c, ws);
    return;
  }
  kept.gelu_in = kept_tensor(c.fp8_kept, N * 4 * hl, 4 * hl, dt, l, "gelu_input");
  kept.fc2_in = kept_tensor(c.fp8_kept, N * 4 * hl, 4 * hl, dt, l, "fc2_input");
  const GemmOperand fc1_x = column_input(kept.fc1_in, ln2, c, ws, ws.half.data());
  float* act = staging(kept.fc2_in, ws.big2.data());
  if (direct_bf16(kept.gelu_in) && direct_bf16(kept.fc2_in)) {
    // The GEMM writes the kept bf16 input of the GeLU, pre, and its output act (big1 the fp32 room of an
    // implementation that needs one): act = bf16(gelu(bf16(pre))), or of pre unrounded where the
    // device's GEMM does the GeLU in its epilogue.
    dev::linear_gelu_forward_bf16(bf16_of(kept.fc2_in), bf16_of(kept.gelu_in), fc1_x, w.fc1, w.fc1_b, N, h, 4 * hl,
                                  ws.big1.data());
  } else {
    float* pre = staging(kept.gelu_in, ws.big1.data());
    if (dt == DType::bf16) {  // (8-bit kept) the same forward: the GeLU of the bf16-rounded input
      linear_forward_widened(pre, reinterpret_cast<uint16_t*>(ws.widen.data()), fc1_x, w.fc1, w.fc1_b, N, h, 4 * hl);
    } else {
      dev::linear_forward(pre, fc1_x, w.fc1, w.fc1_b, N, h, 4 * hl);
    }
    kept.gelu_in.store(pre);
    dev::gelu_forward(act, pre, N * 4 * hl);
    kept.fc2_in.store(act);
  }
  // The forward reads the full-precision values; only what backward reads is compressed.
  const GemmOperand fc2_x =
      kept.fc2_in.compressed() ? dev::as_operand(act, N * 4 * hl, dt, ws.half.data()) : stored_operand(kept.fc2_in);
  row_parallel_residual(x, fc2_x, w.fc2, w.fc2_b, 4 * hl, kept.resid2_mask, DropoutSite::mlp_residual, "resid2_mask",
                        c, ws);
}

void layer_recompute_attention(LayerKept& kept, const LayerContext& c, Workspace& ws) {
  if (c.fused_attention) return;  // its forward kept the log-sum-exp whatever the mode: nothing to re-create
  attention_core_forward(kept, /*keep_s2=*/true, /*ctx_out=*/nullptr, attention_context(c), ws);
}

namespace {

// Where a layer's backward puts its parameter gradients (docs/design.md §6): straight into the
// gradient buffers (the fused backward: `grads`), or, for a backward split into an input pass (B)
// and a weight pass (W), their operands into `pending` for layer_backward_weight. A split
// backward also moves or releases each kept tensor once it has been read, so B never holds more
// than the kept tensors it started with plus one gradient (ZB-H1's peak is 1F1B's).
struct GradSink {
  const LayerGrads* grads = nullptr;
  LayerWeightPending* pending = nullptr;
  LayerKept* kept = nullptr;  // the split backward's kept tensors, writable
  template <class T>
  void release(T LayerKept::*member) {
    if (kept) (kept->*member).reset();
  }
};

// A copy of a GEMM operand's bytes as a tracked tensor of the layer.
Stored copy_operand(GemmOperand op, int64_t numel, const LayerContext& c, const char* tag) {
  Stored t(numel, op.dtype, int(c.stream.layer), tag);
  dev::copy(static_cast<uint8_t*>(t.data()), static_cast<const uint8_t*>(op.ptr), numel * int64_t(bytes_of(op.dtype)));
  return t;
}

// The weight and bias gradients of a linear whose input operand is x (read from the kept tensor
// `kept_x`, or its re-gather) and whose output gradient is dy (fp32, and dy_op as the GEMM reads it).
void linear_weight_grads(GradSink& sink, float* LayerGrads::*dw, float* LayerGrads::*db,
                         LayerWeightPending::Linear LayerWeightPending::*slot, Stored LayerKept::*kept_x, GemmOperand x,
                         const float* dy, GemmOperand dy_op, int64_t N, int64_t in, int64_t out, const LayerContext& c,
                         bool read_again = false) {
  if (sink.grads) {
    dev::linear_backward_weight(sink.grads->*dw, x, dy_op, N, in, out);
    if (dy) dev::bias_backward(sink.grads->*db, dy, N, out);  // null: summed with dy's narrowing
    return;
  }
  LayerWeightPending::Linear& p = sink.pending->*slot;
  Stored& kept = sink.kept->*kept_x;
  // The kept input itself (8-bit ones are expanded again by W), or a copy of its re-gather or of a
  // kept tensor the backward reads again (fused attention's output).
  const bool move = !read_again && (kept.compressed() || x.ptr == kept.data());
  p.x = move ? std::move(kept) : copy_operand(x, N * in, c, "w_input");
  if (!read_again) kept.reset();
  p.dy = copy_operand(dy_op, N * out, c, "w_output_grad");
  p.bias_sums = TrackedBuffer(size_t(out) * 4, int(c.stream.layer), "w_bias_sums");
  dev::bias_column_sums(static_cast<float*>(p.bias_sums.data()), dy, N, out);
  p.N = N, p.in = in, p.out = out;
}

// Backward of one residual branch's output: dy_local = Dropout'(dx_local), then the full-sequence
// gradient the row-parallel GEMM's backward reads (ḡ's backward all-gathers it under SP).
const float* branch_output_grad(const float* dx, const KeptMask& mask, const LayerContext& c, Workspace& ws) {
  const int64_t n = c.N_local() * c.h;
  // No dropout on one rank: dx itself (every reader of dy is done before the block's input gradient is
  // added into dx).
  if (c.dropout == 0.0f && !c.tp.active()) return dx;
  float* dy = ws.g1.data();
  if (c.dropout > 0.0f)
    dev::dropout_backward(dy, dx, mask.unpacked(ws.mask_bytes.data()), n, c.dropout);
  else
    dev::copy(dy, dx, n);
  return parallel::leave_backward(c.tp, dy, ws.full2.data(), c.seq());
}

// The column-parallel GEMM's input for its weight gradient: the kept input, or (SP) re-gathered.
GemmOperand column_input_again(const Stored& kept, const LayerContext& c, Workspace& ws, uint16_t* half) {
  if (!(c.tp.active() && c.tp.sequence_parallel)) return stored_operand(kept);
  const float* local = kept.load(ws.widen.data());
  return column_input(kept, local, c, ws, half, /*regather=*/true);
}

// Backward of a LayerNorm whose output fed the TP region: the partial full-sequence gradient of its
// output, summed over TP (f, or g under SP), then the LayerNorm's input gradient added to dx and its
// parameter gradients to the sink.
void ln_backward(float* dx, float* dout_full, const Stored& ln_in, const TrackedBuffer& ln_stats, const float* ln_w,
                 float* LayerGrads::*dln_w, float* LayerGrads::*dln_b, TrackedBuffer LayerWeightPending::*partials,
                 GradSink& sink, const LayerContext& c, Workspace& ws) {
  const int64_t Nl = c.N_local(), h = c.h;
  // One rank: f's backward is a copy, so the gradient is read where it is.
  const float* dout = dout_full;
  if (c.tp.active()) parallel::enter_backward(c.tp, dout_full, ws.g2.data(), c.seq()), dout = ws.g2.data();
  const auto* stats = static_cast<const float*>(ln_stats.data());
  if (sink.grads && direct_bf16(ln_in)) {  // the input read as bf16: no widened copy
    dev::layernorm_backward_bf16(dx, sink.grads->*dln_w, sink.grads->*dln_b, dout, bf16_of(ln_in), ln_w, stats,
                                 stats + Nl, Nl, h);
    return;
  }
  const float* in = ln_in.load(ws.widen.data());
  if (sink.grads) {
    dev::layernorm_backward(dx, sink.grads->*dln_w, sink.grads->*dln_b, dout, in, ln_w, stats, stats + Nl, Nl, h);
    return;
  }
  const int64_t floats = dev::layernorm_partial_floats(h);
  TrackedBuffer& kept = sink.pending->*partials;
  kept = TrackedBuffer(size_t(floats) * 4, int(c.stream.layer), "w_layernorm_partials");
  dev::layernorm_backward_input(dx, static_cast<float*>(kept.data()), floats, dout, in, ln_w, stats, stats + Nl, Nl, h);
}

// Backward of LayerNorm → column-parallel linear (LN1 → QKV, LN2 → FC1): from the linear's
// output gradient dout [N, out], its input gradient, weight and bias gradients, then the
// LayerNorm's, whose input gradient is added to dx (the residual stream).
struct LnColumn {
  Stored LayerKept::*linear_in;
  float* LayerGrads::*dw;
  float* LayerGrads::*db;
  LayerWeightPending::Linear LayerWeightPending::*slot;
  Stored LayerKept::*ln_in;
  TrackedBuffer LayerKept::*ln_stats;
  float* LayerGrads::*dln_w;
  float* LayerGrads::*dln_b;
  TrackedBuffer LayerWeightPending::*partials;
};
// dout null: the gradient came narrowed into dout16 (null: ws.half) with the bias gradient summed
// (bf16_backward).
void ln_column_backward(float* dx, float* dout, int64_t out, const LnColumn& u, const LayerKept& kept, GemmOperand w,
                        const float* ln_w, GradSink& sink, const LayerContext& c, Workspace& ws,
                        const uint16_t* dout16 = nullptr) {
  const int64_t N = c.N(), h = c.h;
  uint16_t* half_input = ws.half.data() + std::max(N * out, N * h);  // beside dout's bf16 copy
  const GemmOperand in = column_input_again(kept.*u.linear_in, c, ws, half_input);
  const GemmOperand dout_op = dout ? dev::as_operand(dout, N * out, c.dtype, ws.half.data())
                                   : GemmOperand{dout16 ? dout16 : ws.half.data(), DType::bf16};
  // The input gradient goes to full2 (a spent dy under SP); a re-gathered input sits in full1.
  dev::linear_backward_input(ws.full2.data(), dout_op, w, N, h, out);
  linear_weight_grads(sink, u.dw, u.db, u.slot, u.linear_in, in, dout, dout_op, N, h, out, c);
  ln_backward(dx, ws.full2.data(), kept.*u.ln_in, kept.*u.ln_stats, ln_w, u.dln_w, u.dln_b, u.partials, sink, c, ws);
  sink.release(u.ln_in), sink.release(u.ln_stats);
}

constexpr LnColumn kLn2Fc1{&LayerKept::fc1_in, &LayerGrads::fc1_w, &LayerGrads::fc1_b, &LayerWeightPending::fc1,
                           &LayerKept::ln2_in, &LayerKept::ln2_stats, &LayerGrads::ln2_w, &LayerGrads::ln2_b,
                           &LayerWeightPending::ln2_partials};
constexpr LnColumn kLn1Qkv{&LayerKept::qkv_in, &LayerGrads::qkv_w, &LayerGrads::qkv_b, &LayerWeightPending::qkv,
                           &LayerKept::ln1_in, &LayerKept::ln1_stats, &LayerGrads::ln1_w, &LayerGrads::ln1_b,
                           &LayerWeightPending::ln1_partials};

// bf16 GEMM operands and the parameter gradients summed by this backward (not a split one's weight
// pass): each output gradient is narrowed with its bias's column sums in one pass (kernels/bf16_fused.hpp).
bool bf16_backward(const LayerContext& c, const GradSink& sink) { return c.dtype == DType::bf16 && sink.grads; }

// A row-parallel linear's output gradient as its GEMMs read it: narrowed with the bias gradient summed
// into db (fuse), or as_operand's copy (the bias summed by linear_weight_grads).
GemmOperand output_grad_operand(const float* dy, float* db, bool fuse, int64_t N, int64_t out, const LayerContext& c,
                                uint16_t* half) {
  if (!fuse) return dev::as_operand(dy, N * out, c.dtype, half);
  dev::narrow_bias_backward(half, db, dy, N, out);
  return {half, DType::bf16};
}

// The layer's backward in its one order, its parameter gradients going to `sink`.
void backward(float* dx, const LayerKept& kept, const LayerWeights& w, GradSink& sink, const LayerContext& c,
              Workspace& ws) {
  const int64_t N = c.N(), h = c.h, hl = c.hl();
  uint16_t* half = ws.half.data();
  // bf16 with the gradients summed here: each gradient is narrowed with its bias's sums in one pass.
  const bool fuse = bf16_backward(c, sink);

  // MLP block: FC2 (row-parallel), GeLU, then LN2 → FC1 (column-parallel); or the MoE block.
  const float* dy = branch_output_grad(dx, kept.resid2_mask, c, ws);
  sink.release(&LayerKept::resid2_mask);
  if (c.is_moe) {
    if (!sink.grads) throw std::logic_error("an MoE layer's backward is not split (docs/design.md §6)");
    const float* full = parallel::enter_forward(c.tp, kept.fc1_in.load(ws.widen.data()), ws.full1.data(), c.seq(),
                                                /*regather=*/true);
    moe::moe_backward(ws.big1.data(), dy, full, kept.moe, w.moe, sink.grads->moe, c.moe, c.moe_aux_weight, ws.moe);
    ln_backward(dx, ws.big1.data(), kept.ln2_in, kept.ln2_stats, w.ln2_w, &LayerGrads::ln2_w, &LayerGrads::ln2_b,
                &LayerWeightPending::ln2_partials, sink, c, ws);
  } else {
    const GemmOperand dy_op = output_grad_operand(dy, sink.grads ? sink.grads->fc2_b : nullptr, fuse, N, h, c, half);
    // Under bf16 the GEMM writes the GeLU's output gradient in bf16, which the GeLU's backward reads
    // (fused: the GeLU's input gradient in big1's room with fc1's bias sums, in one call whose device may
    // do the GeLU's backward in the GEMM's epilogue; big2 the fp32 room of an implementation that needs
    // one. Otherwise in big2's, widened into big1 for the fp32 pass: the same values either way).
    const bool gelu16 = fuse && direct_bf16(kept.gelu_in);
    uint16_t* dact16 = reinterpret_cast<uint16_t*>((gelu16 ? ws.big1 : ws.big2).data());
    if (gelu16) {
      dev::linear_backward_input_gelu_bf16(dact16, sink.grads->fc1_b, dy_op, w.fc2, bf16_of(kept.gelu_in), N, 4 * hl,
                                           h, ws.big2.data());
    } else if (c.dtype == DType::bf16) {
      dev::linear_backward_input_bf16(dact16, dy_op, w.fc2, N, 4 * hl, h, ws.big1.data());
      device_memory().from_bf16(dact16, ws.big1.data(), N * 4 * hl);
    } else {
      dev::linear_backward_input(ws.big1.data(), dy_op, w.fc2, N, 4 * hl, h);
    }
    linear_weight_grads(sink, &LayerGrads::fc2_w, &LayerGrads::fc2_b, &LayerWeightPending::fc2, &LayerKept::fc2_in,
                        compute_operand(kept.fc2_in, ws.big2.data()), fuse ? nullptr : dy, dy_op, N, 4 * hl, h, c);
    if (gelu16) {
      ln_column_backward(dx, nullptr, 4 * hl, kLn2Fc1, kept, w.fc1, w.ln2_w, sink, c, ws, dact16);
    } else {
      const float* pre = kept.gelu_in.load(ws.widen.data());
      dev::gelu_backward(ws.big1.data(), pre, ws.big1.data(), N * 4 * hl);
      sink.release(&LayerKept::gelu_in);
      ln_column_backward(dx, ws.big1.data(), 4 * hl, kLn2Fc1, kept, w.fc1, w.ln2_w, sink, c, ws);
    }
  }

  // Attention block: projection (row-parallel), attention core, then LN1 → QKV (column-parallel).
  dy = branch_output_grad(dx, kept.resid1_mask, c, ws);
  sink.release(&LayerKept::resid1_mask);
  const GemmOperand dy_op = output_grad_operand(dy, sink.grads ? sink.grads->proj_b : nullptr, fuse, N, h, c, half);
  dev::linear_backward_input(ws.big2.data(), dy_op, w.proj, N, hl, h);
  linear_weight_grads(sink, &LayerGrads::proj_w, &LayerGrads::proj_b, &LayerWeightPending::proj, &LayerKept::proj_in,
                      stored_operand(kept.proj_in), fuse ? nullptr : dy, dy_op, N, hl, h, c,
                      /*read_again=*/c.fused_attention);
  // Fused under bf16 with the bias summed here (fuse): the attention reads dO (big2) and O in the
  // token rows and writes the QKV gradient rows and bias sums itself; without fuse, dq, dk, dv.
  const bool qkv_rows = fuse && fused_context_in_rows(c);
  if (qkv_rows) {
    attention_fused_backward_qkv_rows(half, sink.grads->qkv_b, ws.big2.data(), kept, c, ws);
  } else if (fused_context_in_rows(c)) {
    attention_fused_backward_rows(ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.big2.data(), kept, c, ws);
  } else {
    unmerge_heads(ws.ctx.data(), ws.big2.data(), c);
    if (c.cp.ulysses()) {
      // Ulysses backward: each all-to-all's backward is the other one. The context gradient and (fused)
      // the kept context go to head blocks; big2's first N·hl floats stage the context, the next hold it
      // as head blocks; dq, dk, dv come back to this rank's positions in q, k, v (free once read).
      parallel::sequence_to_heads(c.cp, ws.ctx.data(), ws.g2.data(), head_blocks(c));
      const float* o_heads = nullptr;
      if (c.fused_attention) {
        unmerge_heads(ws.big2.data(), kept.proj_in.load(ws.widen.data()), c);
        parallel::sequence_to_heads(c.cp, ws.big2.data(), ws.big2.data() + N * hl, head_blocks(c));
        o_heads = ws.big2.data() + N * hl;
      }
      attention_core_backward(ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.g2.data(), kept, attention_context(c), ws,
                              o_heads);
      parallel::heads_to_sequence(c.cp, ws.dq.data(), ws.q.data(), head_blocks(c));
      parallel::heads_to_sequence(c.cp, ws.dk.data(), ws.k.data(), head_blocks(c));
      parallel::heads_to_sequence(c.cp, ws.dv.data(), ws.v.data(), head_blocks(c));
    } else {
      attention_core_backward(ws.dq.data(), ws.dk.data(), ws.dv.data(), ws.ctx.data(), kept, c, ws);
    }
  }
  if (sink.kept) {  // the attention's kept tensors are spent
    sink.kept->release_attention_s2();
    sink.kept->attn_lse.reset(), sink.kept->q.reset(), sink.kept->k.reset(), sink.kept->v.reset();
    sink.kept->qkv.reset();
    sink.kept->proj_in.reset();
  }
  const bool cp = c.cp.ulysses();
  const float *dq = (cp ? ws.q : ws.dq).data(), *dk = (cp ? ws.k : ws.dk).data(), *dv = (cp ? ws.v : ws.dv).data();
  if (fuse) {
    if (!qkv_rows) dev::merge_qkv_grads_narrow(half, sink.grads->qkv_b, dq, dk, dv, head_shape(c));
    ln_column_backward(dx, nullptr, 3 * hl, kLn1Qkv, kept, w.qkv, w.ln1_w, sink, c, ws);
  } else {
    merge_qkv_grads(ws.big1.data(), dq, dk, dv, c);
    ln_column_backward(dx, ws.big1.data(), 3 * hl, kLn1Qkv, kept, w.qkv, w.ln1_w, sink, c, ws);
  }
}

}  // namespace

void layer_backward(float* dx, const LayerKept& kept, const LayerWeights& w, const LayerGrads& g,
                    const LayerContext& c, Workspace& ws) {
  GradSink sink{&g, nullptr, nullptr};
  backward(dx, kept, w, sink, c, ws);
}

void layer_backward_input(float* dx, LayerKept& kept, const LayerWeights& w, const LayerContext& c, Workspace& ws,
                          LayerWeightPending& pending) {
  GradSink sink{nullptr, &pending, &kept};
  backward(dx, kept, w, sink, c, ws);
  kept.release();
}

void layer_backward_weight(LayerWeightPending& p, const LayerGrads& g, Workspace& ws) {
  auto linear = [&](LayerWeightPending::Linear& l, float* dw, float* db) {
    dev::linear_backward_weight(dw, compute_operand(l.x, ws.big2.data()), stored_operand(l.dy), l.N, l.in, l.out);
    dev::bias_add(db, static_cast<const float*>(l.bias_sums.data()), l.out);
  };
  auto layernorm = [](const TrackedBuffer& partials, float* dw, float* db, int64_t h) {
    dev::layernorm_reduce_partials(dw, db, static_cast<const float*>(partials.data()), int64_t(partials.bytes() / 4), h);
  };
  const int64_t h = p.fc2.out;
  linear(p.fc2, g.fc2_w, g.fc2_b);
  linear(p.fc1, g.fc1_w, g.fc1_b);
  layernorm(p.ln2_partials, g.ln2_w, g.ln2_b, h);
  linear(p.proj, g.proj_w, g.proj_b);
  linear(p.qkv, g.qkv_w, g.qkv_b);
  layernorm(p.ln1_partials, g.ln1_w, g.ln1_b, h);
  p.release();
}

}  // namespace lattice
