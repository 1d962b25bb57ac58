#include "model/gpt.hpp"

#include <algorithm>

#include "analysis/formulas.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dropout.hpp"
#include "kernels/embedding.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "model/transformer_layer.hpp"
#include "tensor/bf16.hpp"

namespace lattice {

GPT::GPT(const ModelConfig& model, const LayoutConfig& layout, uint64_t seed)
    : model_(model),
      layout_(layout),
      table_(model),
      seed_(seed),
      params_(table_.total(), "params"),
      grads_(table_.total(), "grads"),
      kept_(size_t(model.layers)),
      kept_bytes_per_layer_(size_t(model.layers), 0) {
  if (layout_.activation_dtype == DType::bf16) params16_ = TrackedArray<uint16_t>(table_.total(), "bf16_weights");
  init_params(table_, params_.data(), seed, model.vocab);
  refresh_compute_weights();
}

void GPT::zero_grads() { std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f); }

void GPT::refresh_compute_weights() {
  if (params16_.size()) to_bf16(params_.data(), params16_.data(), params_.size());
}

GemmOperand GPT::weight_operand(int64_t offset) const {
  if (params16_.size()) return {params16_.data() + offset, DType::bf16};
  return {params_.data() + offset, DType::fp32};
}

LayerWeights GPT::layer_weights(int l) const {
  const auto p = table_.layer(params_.data(), l);
  auto off = [&](const float* ptr) { return int64_t(ptr - params_.data()); };
  return {p.ln1_w, p.ln1_b, p.qkv_b, p.proj_b, p.ln2_w, p.ln2_b, p.fc1_b, p.fc2_b,
          weight_operand(off(p.qkv_w)), weight_operand(off(p.proj_w)), weight_operand(off(p.fc1_w)),
          weight_operand(off(p.fc2_w))};
}

LayerGrads GPT::layer_grads(int l) {
  const auto g = table_.layer(grads_.data(), l);
  return {g.ln1_w, g.ln1_b, g.qkv_w, g.qkv_b, g.proj_w, g.proj_b, g.ln2_w, g.ln2_b, g.fc1_w, g.fc1_b, g.fc2_w, g.fc2_b};
}

LayerContext GPT::layer_context(int l, uint64_t step, bool training, int64_t rows, int64_t first_row,
                                int64_t s) const {
  LayerContext c;
  c.b = rows, c.s = s, c.h = model_.hidden, c.a = model_.heads;
  c.dtype = layout_.activation_dtype;
  c.dropout = training ? float(model_.dropout) : 0.0f;
  c.stream = DropoutStream{seed_, step, l, DropoutSite::attention};
  c.first_row = first_row;
  c.heads_total = model_.heads, c.head0 = 0;
  c.seq_total = s, c.pos0 = 0;
  return c;
}

void GPT::run_head_gemm(float* logits, const Stored& head_in, int64_t N) const {
  GemmShape g;  // logits[N, Vp] = head_in[N, h] · wteᵀ, wte stored [Vp, h]
  g.M = N, g.N = model_.padded_vocab(), g.K = model_.hidden, g.trans_b = true;
  gemm(g, {head_in.data(), head_in.dtype()}, weight_operand(table_.wte()), logits);
}

double GPT::forward(const MicroBatch& mb, uint64_t step, bool training, int64_t s, OutsideKept& out) {
  const int64_t b = mb.rows, h = model_.hidden, N = b * s, Vp = model_.padded_vocab();
  const DType dt = layout_.activation_dtype;
  const float dropout = training ? float(model_.dropout) : 0.0f;
  ws_.ensure(b, s, h, model_.heads, Vp);
  float* x = ws_.resid.data();

  out.tokens = TrackedBuffer(size_t(N) * 4, kEmbeddingLayer, "tokens");
  std::copy(mb.inputs, mb.inputs + N, static_cast<int32_t*>(out.tokens.data()));
  embedding_forward(x, mb.inputs, params_.data() + table_.wte(), params_.data() + table_.wpe(), b, s, h);
  if (dropout > 0.0f) {
    out.emb_mask = TrackedBuffer(size_t(N * h), kEmbeddingLayer, "emb_mask");
    auto* mask = static_cast<uint8_t*>(out.emb_mask.data());
    const DropoutStream st{seed_, step, -1, DropoutSite::embedding};
    for (int64_t r = 0; r < b; ++r)
      dropout_mask_fill(mask + r * s * h, st, uint64_t((mb.first_row + r) * s * h), s * h, dropout);
    dropout_forward(x, x, mask, N * h, dropout);
  }

  for (int l = 0; l < model_.layers; ++l) {
    const LayerContext c = layer_context(l, step, training, b, mb.first_row, s);
    const bool full = analysis::layer_fully_recomputed(layout_, l, model_.layers);
    const bool keep_s2 = full || layout_.recompute != Recompute::selective;
    layer_forward(x, kept_[size_t(l)], keep_s2, layer_weights(l), c, ws_);
    if (!training) {
      kept_[size_t(l)].release();
      continue;
    }
    if (full) kept_[size_t(l)].release_all_but_input();
    kept_bytes_per_layer_[size_t(l)] = MemoryTracker::activations().live_bytes_of_layer(l);
  }

  out.lnf_in = Stored(N * h, dt, kHeadLayer, "lnf_input");
  out.lnf_in.store(x);
  out.lnf_stats = TrackedBuffer(size_t(2 * N) * 4, kHeadLayer, "lnf_stats");
  auto* mean = static_cast<float*>(out.lnf_stats.data());
  layernorm_forward(ws_.ln.data(), mean, mean + N, x, params_.data() + table_.lnf_w(),
                    params_.data() + table_.lnf_b(), N, h);
  out.head_in = Stored(N * h, dt, kHeadLayer, "head_input");
  out.head_in.store(ws_.ln.data());
  out.logits = TrackedBuffer(size_t(N * Vp) * 4, kHeadLayer, "logits");
  auto* logits = static_cast<float*>(out.logits.data());
  run_head_gemm(logits, out.head_in, N);
  std::vector<float> losses(static_cast<size_t>(N));
  cross_entropy_forward(logits, losses.data(), mb.targets, N, model_.vocab, Vp);
  if (training) {
    const MemoryTracker& tracker = MemoryTracker::activations();
    kept_bytes_outside_ = tracker.live_bytes_of_layer(kEmbeddingLayer) + tracker.live_bytes_of_layer(kHeadLayer);
    kept_bytes_by_op_.clear();
    for (const auto& [tag, bytes] : tracker.live_by_op())
      if (tag.rfind("layer0/", 0) == 0 || tag.rfind("embedding/", 0) == 0 || tag.rfind("head/", 0) == 0)
        kept_bytes_by_op_[tag] = bytes;
  }
  double sum = 0.0;
  for (float v : losses) sum += double(v);
  return sum;
}

void GPT::backward(const MicroBatch& mb, uint64_t step, float loss_scale, int64_t s, OutsideKept& out) {
  const int64_t b = mb.rows, h = model_.hidden, N = b * s, Vp = model_.padded_vocab();
  const DType dt = layout_.activation_dtype;
  float* dx = ws_.dresid.data();
  float* dwte = grads_.data() + table_.wte();

  // Head: dlogits (in place), then dx_head = dlogits · wte and dwte += dlogitsᵀ · head_in.
  auto* dlogits = static_cast<float*>(out.logits.data());
  cross_entropy_backward(dlogits, dlogits, mb.targets, N, Vp, loss_scale);
  const GemmOperand dlogits_op = as_operand(dlogits, N * Vp, dt, ws_.half.data());
  GemmShape gx;
  gx.M = N, gx.N = h, gx.K = Vp;
  gemm(gx, dlogits_op, weight_operand(table_.wte()), ws_.g1.data());
  GemmShape gw;
  gw.M = Vp, gw.N = h, gw.K = N, gw.trans_a = true, gw.accumulate = true;
  gemm(gw, dlogits_op, {out.head_in.data(), out.head_in.dtype()}, dwte);
  out.logits.reset(), out.head_in.reset();

  std::fill(dx, dx + N * h, 0.0f);
  const auto* mean = static_cast<const float*>(out.lnf_stats.data());
  const float* lnf_in = out.lnf_in.load(ws_.widen.data());
  layernorm_backward(dx, grads_.data() + table_.lnf_w(), grads_.data() + table_.lnf_b(), ws_.g1.data(), lnf_in,
                     params_.data() + table_.lnf_w(), mean, mean + N, N, h);
  out.lnf_in.reset(), out.lnf_stats.reset();

  for (int l = model_.layers - 1; l >= 0; --l) {
    LayerKept& kept = kept_[size_t(l)];
    const LayerContext c = layer_context(l, step, true, b, mb.first_row, s);
    const LayerWeights w = layer_weights(l);
    if (analysis::layer_fully_recomputed(layout_, l, model_.layers)) {
      // Re-run the whole layer from its kept input; the output is not needed again.
      float* x = ws_.g2.data();
      const float* input = kept.ln1_in.load(ws_.widen.data());
      std::copy(input, input + N * h, x);
      layer_forward(x, kept, /*keep_s2=*/true, w, c, ws_);
    } else if (!kept.has_attention_s2()) {
      layer_recompute_attention(kept, c, ws_);
    }
    layer_backward(dx, kept, w, layer_grads(l), c, ws_);
    kept.release();
  }

  if (model_.dropout > 0.0f)
    dropout_backward(dx, dx, static_cast<const uint8_t*>(out.emb_mask.data()), N * h, float(model_.dropout));
  embedding_backward(dwte, grads_.data() + table_.wpe(), dx, mb.inputs, b, s, h);
  out.tokens.reset(), out.emb_mask.reset();
}

double GPT::forward_backward(const MicroBatch& mb, uint64_t step, float loss_scale) {
  OutsideKept out;
  const double loss = forward(mb, step, true, model_.seq_len, out);
  backward(mb, step, loss_scale, model_.seq_len, out);
  return loss;
}

double GPT::forward_loss(const MicroBatch& mb) {
  OutsideKept out;
  return forward(mb, 0, false, model_.seq_len, out);
}

std::vector<float> GPT::next_token_probs(const int32_t* ids, int64_t len) {
  std::vector<int32_t> targets(size_t(len), 0);
  MicroBatch mb{ids, targets.data(), 1, 0};
  OutsideKept out;
  forward(mb, 0, false, len, out);
  const auto* probs = static_cast<const float*>(out.logits.data()) + (len - 1) * model_.padded_vocab();
  return std::vector<float>(probs, probs + model_.vocab);
}

}  // namespace lattice
