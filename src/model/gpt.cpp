// The GPT model: embedding, layers and head, as whole forward/backward passes and as pipeline chunks
// (forward, whole backward, and a backward split into input and weight passes). Past 400 lines because
// the chunk entry points share the per-layer loops they drive; splitting them apart would copy those.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "analysis/formulas.hpp"
#include "analysis/moe_formulas.hpp"
#include "core/error.hpp"
#include "backend/device_ops.hpp"
#include "model/transformer_layer.hpp"
#include "tensor_parallel/vocab_parallel.hpp"
#include "core/region.hpp"
#include "core/trace.hpp"
#include "tensor/bf16.hpp"

namespace lattice {

GPT::GPT(const ModelConfig& model, const LayoutConfig& layout, uint64_t seed, parallel::TensorParallel tp,
         const StageParams& stage, bool materialize)
    : model_(model),
      layout_(layout),
      recompute_(layer_recompute(layout, model.layers)),
      tp_(tp),
      table_(model, tp.size(), tp.rank(), stage),
      seed_(seed),
      params_(materialize ? table_.total() : 0, "params"),
      buckets_(model_buckets(table_, model.layers)) {
  if (!materialize) return;
  if (layout_.activation_dtype == DType::bf16) params16_ = TrackedArray<uint16_t>(table_.total(), "bf16_weights");
  if (device_memory().host_addressable) {
    init_params(table_, params_.data(), seed, model.vocab);
  } else {  // drawn on the host, then copied once (a transient the size of the weights, before any step)
    std::vector<float> host(size_t(table_.total()));
    init_params(table_, host.data(), seed, model.vocab);
    dev::upload(params_.data(), host.data(), table_.total());
  }
  refresh_compute_weights();
}

void GPT::zero_grads() {
  if (!grads_.size()) grads_ = TrackedArray<float>(table_.total(), "grads");  // made zeroed
  else dev::fill_zero(grads_.data(), int64_t(grads_.size()));
}

void GPT::add_tied_input_grads() {
  if (!tied_input_grads_.size()) return;
  // One rank, ZeRO 0, fp32 (train/validate.cpp): the tied bucket's whole fp32 gradient, the same
  // pointer the head and embedding backward accumulate into, with nothing left to reduce.
  float* dwte = bucket_grads(wte_bucket(model_.layers));
  float* apart = tied_input_grads_.data();
  for (int64_t i = 0; i < tied_input_grads_.size(); ++i) dwte[i] += apart[i], apart[i] = 0.0f;
}

void GPT::release_weights() {
  params_ = TrackedArray<float>();
  params16_ = TrackedArray<uint16_t>();
}

const float* GPT::bucket_params(int b, int next) {
  return store_ ? store_->params(b, next) : params_.data() + buckets_[size_t(b)].begin;
}

void GPT::bucket_params_done(int b) {
  if (store_) store_->params_done(b);
}

float* GPT::bucket_grads(int b) {
  if (store_) return store_->grads(b);
  if (!grads_.size()) zero_grads();
  return grads_.data() + buckets_[size_t(b)].begin;
}

void GPT::bucket_grads_done(int b) {
  if (store_) store_->grads_done(b);
}

void GPT::refresh_compute_weights() {
  if (params16_.size()) dev::to_bf16(params_.data(), params16_.data(), params_.size());
}

// `values` points at the tensor's fp32 values, `offset` is its flat offset in `bucket` (for the
// bf16 copy, or the store's bf16 values when the store keeps the weights).
GemmOperand GPT::weight_operand(const float* values, int64_t offset, int bucket) const {
  if (layout_.activation_dtype != DType::bf16) return {values, DType::fp32};
  if (!store_) return {params16_.data() + offset, DType::bf16};
  const uint16_t* b16 = store_->params_bf16(bucket);
  if (!b16) throw std::logic_error("bf16 GEMMs need the store's bf16 weights");
  return {b16 + (offset - buckets_[size_t(bucket)].begin), DType::bf16};
}

LayerWeights GPT::layer_weights(int l, const float* bucket, const float* experts) const {
  const auto p = table_.layer_at(bucket, l);
  const int64_t begin = buckets_[size_t(l)].begin;
  auto w = [&](const float* ptr) { return weight_operand(ptr, begin + int64_t(ptr - bucket), l); };
  if (!p.router_w)
    return {p.ln1_w, p.ln1_b, p.qkv_b, p.proj_b, p.ln2_w, p.ln2_b, p.fc1_b, p.fc2_b,
            w(p.qkv_w), w(p.proj_w), w(p.fc1_w), w(p.fc2_w), {}};
  LayerWeights lw{p.ln1_w, p.ln1_b, p.qkv_b, p.proj_b, p.ln2_w, p.ln2_b, nullptr, nullptr,
                  w(p.qkv_w), w(p.proj_w), {}, {}, {}};
  lw.moe.router = p.router_w, lw.moe.router_noise = p.router_noise_w;
  const int eb = experts_bucket(model_.layers, l);
  const int64_t e_begin = buckets_[size_t(eb)].begin;
  auto we = [&](const float* ptr) { return weight_operand(ptr, e_begin + int64_t(ptr - experts), eb); };
  for (int j = 0; j < table_.held_experts(l); ++j) {
    const auto e = table_.expert_at(experts, l, j);
    lw.moe.experts.push_back({we(e.fc1_w), we(e.fc2_w), e.fc1_b, e.fc2_b});
  }
  return lw;
}

LayerGrads GPT::layer_grads(int l, float* bucket, float* experts) const {
  const auto g = table_.layer_at(bucket, l);
  LayerGrads lg{g.ln1_w, g.ln1_b, g.qkv_w, g.qkv_b, g.proj_w, g.proj_b, g.ln2_w, g.ln2_b,
                g.fc1_w, g.fc1_b, g.fc2_w, g.fc2_b, {}};
  if (!g.router_w) return lg;
  lg.moe.router = g.router_w, lg.moe.router_noise = g.router_noise_w;
  for (int j = 0; j < table_.held_experts(l); ++j) {
    const auto e = table_.expert_at(experts, l, j);
    lg.moe.experts.push_back({e.fc1_w, e.fc1_b, e.fc2_w, e.fc2_b});
  }
  return lg;
}

LayerContext GPT::layer_context(int l, uint64_t step, bool training, int64_t rows, int64_t first_row,
                                int64_t s) const {
  LayerContext c;
  c.b = rows, c.s = s_cp(s), c.h = model_.hidden, c.a = model_.heads / tp_.size();
  c.dtype = layout_.activation_dtype;
  c.dropout = training ? float(model_.dropout) : 0.0f;
  c.stream = DropoutStream{seed_, step, l, DropoutSite::attention};
  c.first_row = first_row;
  c.heads_total = model_.heads, c.head0 = int64_t(tp_.rank()) * c.a;
  c.seq_total = s, c.pos0 = pos0(s), c.s_local = s_local(s);
  c.tp = tp_;
  c.cp = cp_;
  c.fused_attention = layout_.fused_attention();
  c.pack_masks = layout_.pack_masks;
  c.fp8_kept = layout_.fp8_kept;
  if (!model_.moe.is_moe_layer(l)) return c;
  // The MoE block routes the whole sequence of the micro-batch (docs/design.md §12), under CP too:
  // every CP rank routes all N tokens and keeps its own (docs/design.md §5.1).
  const MoEConfig& m = model_.moe;
  c.is_moe = true;
  moe::MoEContext& x = c.moe;
  const int64_t N = rows * s;
  // Training checks that the groups divide a micro-batch; a shorter sequence (sampling) routes as one.
  const int groups = N % m.groups == 0 ? m.groups : 1;
  x.route = {m.router, m.experts, m.k(), m.drop_policy, N, groups, analysis::expert_capacity(m, N / groups),
             training, DropoutStream{seed_, step, l, DropoutSite::moe_noise}, s, first_row};
  x.h = model_.hidden, x.ffn_local = model_.ffn_hidden() / tp_.size(), x.ffn_total = model_.ffn_hidden();
  x.dtype = layout_.activation_dtype;
  x.tp_rank = tp_.rank(), x.tp = tp_.active() ? tp_.group : nullptr;
  x.cp = cp_;
  x.ep = ep_ && ep_->size() > 1 ? ep_ : nullptr;
  x.expert0 = table_.expert0(), x.local_experts = table_.held_experts(l);
  x.expert_dropout = training ? float(m.expert_dropout) : 0.0f;
  x.pack_masks = layout_.pack_masks;
  x.aux_coeff = m.aux_loss_coeff;
  x.layer = l;
  return c;
}

void GPT::run_head_gemm(float* logits, GemmOperand head_in, const float* wte, int64_t N) const {
  GemmShape g;  // logits[N, V/t] = head_in[N, h] · wte_shardᵀ, the shard stored [V/t, h]
  g.M = N, g.N = vocab_local(), g.K = model_.hidden, g.trans_b = true;
  dev::gemm(g, head_in, weight_operand(wte, table_.wte(), wte_bucket(model_.layers)), logits);
}

void GPT::run_head_gemm_bf16(uint16_t* logits16, GemmOperand head_in, const float* wte, int64_t N) const {
  // logits16[N, V/t] = bf16(head_in[N, h] · wte_shardᵀ): linear_backward_input_bf16's product (x·Wᵀ
  // with W stored [V/t, h]), both operands bf16. No fp32 room: a device that narrows an fp32 product
  // takes its rows in pieces through scratch of its own (backend/device_ops.hpp).
  dev::linear_backward_input_bf16(logits16, head_in, weight_operand(wte, table_.wte(), wte_bucket(model_.layers)), N,
                                  vocab_local(), model_.hidden, nullptr);
}

parallel::VocabShard GPT::vocab_shard() const {
  return {int64_t(tp_.rank()) * vocab_local(), vocab_local(), model_.vocab};
}

// The head GEMM's input: the kept final-LN output, or (sequence parallel) its all-gather (g) from
// local32, the fp32 values (null: widened from head_in here, only when needed).
GemmOperand GPT::head_operand(const Stored& head_in, const float* local32, int64_t b, int64_t s, bool regather) {
  if (!(tp_.active() && tp_.sequence_parallel)) return stored_operand(head_in);
  if (!local32) local32 = head_in.load(ws_.widen.data());
  const float* full = parallel::enter_forward(tp_, local32, ws_.full1.data(), {b, s, model_.hidden}, regather);
  // The tail of the bf16 staging area: its head holds the dlogits operand.
  return dev::as_operand(full, b * s * model_.hidden, layout_.activation_dtype,
                    ws_.half.data() + ws_.half.size() - size_t(b * s * model_.hidden));
}

void GPT::take_positions(const int32_t* ids, int64_t b, int64_t s, int32_t* out) const {
  const parallel::SequenceSplit split = cp_.split(s);
  const int64_t sc = s_cp(s);
  if (!cp_.active()) return dev::upload(out, ids, b * s);
  for (int64_t r = 0; r < b; ++r)
    split.runs(0, sc, [&](int64_t local, int64_t global, int64_t len) {
      dev::upload(out + r * sc + local, ids + r * s + global, len);
    });
}

void GPT::embed_forward(const MicroBatch& mb, uint64_t step, bool training, int64_t s, OutsideKept& out) {
  const int64_t b = mb.rows, h = model_.hidden, sc = s_cp(s), N = b * sc, sl = s_local(s), Nl = b * sl, p0 = pos0(s);
  const float dropout = training ? float(model_.dropout) : 0.0f;
  float* x = ws_.resid.data();
  // Vocabulary-parallel embedding of this rank's positions: each rank's rows, summed over TP (f̄, or ḡ
  // under SP), + positions.
  out.tokens = TrackedBuffer(size_t(N) * 4, kEmbeddingLayer, "tokens");
  take_positions(mb.inputs, b, s, static_cast<int32_t*>(out.tokens.data()));
  const int L = model_.layers;
  parallel::embedding_tokens_forward(ws_.full2.data(), static_cast<const int32_t*>(out.tokens.data()),
                                     bucket_params(wte_bucket(L)), vocab_shard(), N, h);
  bucket_params_done(wte_bucket(L));
  parallel::leave_forward(tp_, ws_.full2.data(), x, {b, sc, h});
  const float* wpe = bucket_params(wpe_bucket(L), 0);
  if (!cp_.active()) {
    dev::add_positions(x, wpe, b, sl, p0, h);
  } else {  // each row's runs of consecutive global positions
    const parallel::SequenceSplit split = cp_.split(s);
    for (int64_t r = 0; r < b; ++r)
      split.runs(p0, sl, [&](int64_t local, int64_t global, int64_t len) {
        dev::add_positions(x + (r * sl + local - p0) * h, wpe, 1, len, global, h);
      });
  }
  bucket_params_done(wpe_bucket(L));
  if (dropout > 0.0f) {
    uint8_t* mask = out.emb_mask.begin(Nl * h, layout_.pack_masks, kEmbeddingLayer, "emb_mask", ws_.mask_bytes.data());
    const DropoutStream st{seed_, step, -1, DropoutSite::embedding};
    fill_sequence_mask(mask, st, mb.first_row, b, cp_.split(s), p0, sl, h, dropout);
    dev::dropout_forward(x, x, mask, Nl * h, dropout);
    out.emb_mask.finish();
  }
}

// The targets of this rank's positions where the device's kernels read them: the host's own array on
// the CPU with whole sequences; else (a device, or CP's positions) a copy, kept with the head's tensors
// until its backward (4·N bytes, N = b·s/c).
const int32_t* GPT::device_targets(const MicroBatch& mb, int64_t s, OutsideKept& out) {
  if (device_memory().host_addressable && !cp_.active()) return mb.targets;
  if (!out.targets) {
    out.targets = TrackedBuffer(size_t(mb.rows * s_cp(s)) * 4, kHeadLayer, "targets");
    take_positions(mb.targets, mb.rows, s, static_cast<int32_t*>(out.targets.data()));
  }
  return static_cast<const int32_t*>(out.targets.data());
}

double GPT::head_forward(const MicroBatch& mb, int64_t s, OutsideKept& out) {
  const int64_t b = mb.rows, h = model_.hidden, sc = s_cp(s), N = b * sc, Nl = b * s_local(s);
  const DType dt = layout_.activation_dtype;
  const parallel::VocabShard vocab = vocab_shard();
  const float* x = ws_.resid.data();
  // Final LayerNorm (on the local rows), tied output projection over this rank's vocabulary shard.
  out.lnf_in = Stored(Nl * h, dt, kHeadLayer, "lnf_input");
  out.lnf_in.store(x);
  out.lnf_stats = TrackedBuffer(size_t(2 * Nl) * 4, kHeadLayer, "lnf_stats");
  auto* mean = static_cast<float*>(out.lnf_stats.data());
  const int L = model_.layers;
  const float* lnf = bucket_params(lnf_bucket(L), wte_bucket(L));
  dev::layernorm_forward(ws_.ln.data(), mean, mean + Nl, x, lnf, lnf + h, Nl, h);
  bucket_params_done(lnf_bucket(L));
  out.head_in = Stored(Nl * h, dt, kHeadLayer, "head_input");
  out.head_in.store(ws_.ln.data());
  const GemmOperand head_x = head_operand(out.head_in, ws_.ln.data(), b, sc, false);
  const int32_t* targets = device_targets(mb, s, out);
  DeviceVector<float, MemoryCategory::workspaces> losses(static_cast<size_t>(N));
  if (dt == DType::bf16) {
    // Under bf16 activations the logits are made in bf16, as the layers' GEMM outputs are (Megatron's
    // too), and kept so for backward, with each row's maximum and sum of exponentials beside them
    // (docs/design.md §4): the cross-entropy writes only those and the losses, and the backward makes
    // each probability again from them, the bits fp32 probabilities kept would have had. 2sbv/t + 8sb
    // bytes where the probabilities took 4sbv/t, and a pass over the step's largest tensor gone.
    out.logits = TrackedBuffer(size_t(N * vocab.v_local) * 2, kHeadLayer, "logits");
    out.logit_stats = TrackedBuffer(size_t(2 * N) * 4, kHeadLayer, "logit_stats");
    auto* logits16 = static_cast<uint16_t*>(out.logits.data());
    run_head_gemm_bf16(logits16, head_x, bucket_params(wte_bucket(L)), N);
    bucket_params_done(wte_bucket(L));
    parallel::cross_entropy_forward_bf16(tp_, static_cast<float*>(out.logit_stats.data()), logits16, losses.data(),
                                         targets, vocab, N);
  } else {
    // The logits' buffer, which the cross-entropy turns into the probabilities that backward reads.
    out.logits = TrackedBuffer(size_t(N * vocab.v_local) * 4, kHeadLayer, "logits");
    auto* logits = static_cast<float*>(out.logits.data());
    run_head_gemm(logits, head_x, bucket_params(wte_bucket(L)), N);
    bucket_params_done(wte_bucket(L));
    parallel::cross_entropy_forward(tp_, logits, losses.data(), targets, vocab, N);
  }
  const float* row_losses = losses.data();
  tracked_vector<float, MemoryCategory::workspaces> host;  // a device's losses come to the host to be summed
  if (!device_memory().host_addressable) host.resize(size_t(N)), dev::download(host.data(), losses.data(), N),
                                         row_losses = host.data();
  double sum = 0.0;
  for (int64_t n = 0; n < N; ++n) sum += double(row_losses[n]);
  return sum;
}

void GPT::head_backward(const MicroBatch& mb, float loss_scale, int64_t s, OutsideKept& out) {
  const int64_t b = mb.rows, h = model_.hidden, sc = s_cp(s), N = b * sc, Nl = b * s_local(s);
  const DType dt = layout_.activation_dtype;
  const parallel::VocabShard vocab = vocab_shard();
  float* dx = ws_.dresid.data();
  // dlogits (in place; under bf16 activations from the kept bf16 logits straight into the bf16 staging
  // the GEMMs read); dx = dlogits · wte_shard summed over TP (f, or g under SP); dwte_shard +=
  // dlogitsᵀ · head input.
  const int32_t* targets = device_targets(mb, s, out);
  GemmOperand dlogits_op{out.logits.data(), DType::fp32};
  if (dt == DType::bf16) {
    parallel::cross_entropy_backward_bf16(ws_.half.data(), static_cast<const uint16_t*>(out.logits.data()),
                                          static_cast<const float*>(out.logit_stats.data()), targets, vocab, N,
                                          loss_scale);
    dlogits_op = {ws_.half.data(), DType::bf16};
  } else {
    auto* probs = static_cast<float*>(out.logits.data());
    parallel::cross_entropy_backward(probs, probs, targets, vocab, N, loss_scale);
  }
  const int L = model_.layers;
  const GemmOperand head_in = head_operand(out.head_in, nullptr, b, sc, /*regather=*/true);
  GemmShape gx;
  gx.M = N, gx.N = h, gx.K = vocab.v_local;
  dev::gemm(gx, dlogits_op, weight_operand(bucket_params(wte_bucket(L), lnf_bucket(L)), table_.wte(), wte_bucket(L)),
       ws_.full2.data());
  bucket_params_done(wte_bucket(L));
  GemmShape gw;
  gw.M = vocab.v_local, gw.N = h, gw.K = N, gw.trans_a = true, gw.accumulate = true;
  dev::gemm(gw, dlogits_op, head_in, bucket_grads(wte_bucket(L)));
  // Handed back now, not at the embedding's backward: a store keeping gradients apart (ZeRO-2/3)
  // reduces the head's part at once instead of holding a vocabulary-sized buffer through backward.
  bucket_grads_done(wte_bucket(L));
  parallel::enter_backward(tp_, ws_.full2.data(), ws_.g1.data(), {b, sc, h});
  out.logits.reset(), out.logit_stats.reset(), out.head_in.reset(), out.targets.reset();

  dev::fill_zero(dx, Nl * h);
  const auto* mean = static_cast<const float*>(out.lnf_stats.data());
  const float* lnf_in = out.lnf_in.load(ws_.widen.data());
  float* dlnf = bucket_grads(lnf_bucket(L));
  dev::layernorm_backward(dx, dlnf, dlnf + h, ws_.g1.data(), lnf_in, bucket_params(lnf_bucket(L)), mean, mean + Nl, Nl, h);
  bucket_params_done(lnf_bucket(L));
  bucket_grads_done(lnf_bucket(L));
  out.lnf_in.reset(), out.lnf_stats.reset();
}

void GPT::embed_backward(const MicroBatch& mb, int64_t s, OutsideKept& out) {
  const int64_t b = mb.rows, h = model_.hidden, sc = s_cp(s), N = b * sc, sl = s_local(s), Nl = b * sl, p0 = pos0(s);
  float* dx = ws_.dresid.data();
  if (model_.dropout > 0.0f)
    dev::dropout_backward(dx, dx, out.emb_mask.unpacked(ws_.mask_bytes.data()), Nl * h, float(model_.dropout));
  const int L = model_.layers;
  float* dwpe = bucket_grads(wpe_bucket(L));
  if (!cp_.active()) {
    dev::position_grads(dwpe, dx, b, sl, p0, h);
  } else {  // each row's runs of consecutive global positions (a rank's rows hold distinct positions)
    const parallel::SequenceSplit split = cp_.split(s);
    for (int64_t r = 0; r < b; ++r)
      split.runs(p0, sl, [&](int64_t local, int64_t global, int64_t len) {
        dev::position_grads(dwpe, dx + (r * sl + local - p0) * h, 1, len, global, h);
      });
  }
  bucket_grads_done(wpe_bucket(L));
  const float* dfull = parallel::leave_backward(tp_, dx, ws_.full2.data(), {b, sc, h});
  float* dwte = bucket_grads(wte_bucket(L));
  if (layout_.tied_grads_apart) {  // summed into dwte at the step's end (add_tied_input_grads)
    if (!tied_input_grads_.size()) tied_input_grads_ = TrackedArray<float>(vocab_local() * h, "grads");
    dwte = tied_input_grads_.data();
  }
  parallel::embedding_tokens_backward(dwte, dfull, static_cast<const int32_t*>(out.tokens.data()), vocab_shard(), N, h);
  bucket_grads_done(wte_bucket(L));  // the embedding's part of the tied gradient
  out.tokens.reset(), out.emb_mask.reset();
}

double GPT::forward_chunk(const MicroBatch& mb, int64_t id, uint64_t step, bool training, int64_t s, int l0, int l1,
                          const float* x_in, float* x_out) {
  const int64_t b = mb.rows, h = model_.hidden, Nl = b * s_local(s);
  ws_.ensure(b, s_cp(s), h, model_.heads / tp_.size(), vocab_local(), !layout_.fused_attention(),  // this rank's heads
             layout_.pack_masks && model_.dropout > 0, cp_.size());
  MicroState& state = in_flight_[id];
  if (state.layers.empty()) state.layers.resize(size_t(model_.layers));
  ++state.chunks;
  float* x = ws_.resid.data();
  if (l0 == 0) {
    const LayerRegion region(kEmbeddingLayer);
    embed_forward(mb, step, training, s, state.outside);
  } else {
    dev::copy(x, x_in, Nl * h);
  }
  for (int l = l0; l < l1; ++l) {
    const LayerRegion region(l);
    LayerContext c = layer_context(l, step, training, b, mb.first_row, s);
    const LayerRecompute mode = recompute_[size_t(l)];
    const bool keep_s2 = mode != LayerRecompute::selective;
    LayerKept& kept = state.layers[size_t(l)];
    const int eb = experts_bucket(model_.layers, l), next = l + 1 < l1 ? l + 1 : -1;
    const bool moe = c.is_moe;
    if (moe && training) c.moe.stats = &moe_stats_;
    const float* dense = bucket_params(l, moe ? eb : next);
    layer_forward(x, kept, keep_s2, layer_weights(l, dense, moe ? bucket_params(eb, next) : nullptr), c, ws_);
    bucket_params_done(l);
    if (moe) bucket_params_done(eb);
    if (!training || mode == LayerRecompute::in_segment) kept.release();
    else if (mode == LayerRecompute::checkpoint) kept.release_all_but_input();
  }
  if (l1 < model_.layers) {
    dev::copy(x_out, x, Nl * h);
    return 0.0;
  }
  const LayerRegion region(kHeadLayer);
  return head_forward(mb, s, state.outside);
}

void GPT::backward_chunk(const MicroBatch& mb, int64_t id, uint64_t step, float loss_scale, int64_t s, int l0,
                         int l1, const float* dx_in, float* dx_out) {
  backward_pass(mb, id, step, loss_scale, s, l0, l1, dx_in, dx_out, false);
}

void GPT::backward_input_chunk(const MicroBatch& mb, int64_t id, uint64_t step, float loss_scale, int64_t s, int l0,
                               int l1, const float* dx_in, float* dx_out) {
  backward_pass(mb, id, step, loss_scale, s, l0, l1, dx_in, dx_out, true);
}

void GPT::backward_weight_chunk(int64_t id, int l0, int l1) {
  const auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;  // every layer's backward ran whole (MoE, full recompute)
  MicroState& state = it->second;
  for (int l = l1 - 1; l >= l0 && !state.pending.empty(); --l) {
    LayerWeightPending& pending = state.pending[size_t(l)];
    if (pending.empty()) continue;
    const LayerRegion region(l);
    layer_backward_weight(pending, layer_grads(l, bucket_grads(l), nullptr), ws_);
    bucket_grads_done(l);
  }
  finish_if_done(id);
}

void GPT::finish_if_done(int64_t id) {
  const MicroState& state = in_flight_.at(id);
  if (state.chunks > 0) return;
  for (const auto& p : state.pending)
    if (!p.empty()) return;
  in_flight_.erase(id);
}

void GPT::rerun_segment_below(MicroState& state, const MicroBatch& mb, uint64_t step, int64_t s, int first, int top) {
  const int64_t b = mb.rows, Nl = b * s_local(s), h = model_.hidden;
  float* x = ws_.resid.data();
  const float* input = state.layers[size_t(first)].ln1_in.load(ws_.widen.data());
  dev::copy(x, input, Nl * h);
  for (int j = first; j < top; ++j) {
    const LayerRegion region(j);
    const LayerContext c = layer_context(j, step, true, b, mb.first_row, s);
    const int eb = experts_bucket(model_.layers, j);
    const float* dense = bucket_params(j, c.is_moe ? eb : j + 1);
    const LayerWeights w = layer_weights(j, dense, c.is_moe ? bucket_params(eb, j + 1) : nullptr);
    layer_forward(x, state.layers[size_t(j)], /*keep_s2=*/true, w, c, ws_);
    bucket_params_done(j);
    if (c.is_moe) bucket_params_done(eb);
  }
}

void GPT::backward_pass(const MicroBatch& mb, int64_t id, uint64_t step, float loss_scale, int64_t s, int l0, int l1,
                        const float* dx_in, float* dx_out, bool split) {
  const int64_t b = mb.rows, h = model_.hidden, Nl = b * s_local(s);
  MicroState& state = in_flight_.at(id);
  float* dx = ws_.dresid.data();
  if (l1 == model_.layers) {
    const LayerRegion region(kHeadLayer);
    head_backward(mb, loss_scale, s, state.outside);
  } else {
    dev::copy(dx, dx_in, Nl * h);
  }
  for (int l = l1 - 1; l >= l0; --l) {
    const LayerRegion region(l);
    LayerKept& kept = state.layers[size_t(l)];
    // A segment (a checkpoint and the in_segment layers above it) is re-run at its top layer; its
    // lower layers then reach their backward holding all they need (docs/design.md §3).
    const bool full = forward_recomputed(recompute_[size_t(l)]);
    const bool top = full && (l + 1 == l1 || recompute_[size_t(l) + 1] != LayerRecompute::in_segment);
    std::optional<TraceSpan> rerun;
    if (top) {
      rerun.emplace(Trace::Kind::recompute);
      int first = l;
      while (recompute_[size_t(first)] == LayerRecompute::in_segment) --first;
      rerun_segment_below(state, mb, step, s, first, l);
    }
    LayerContext c = layer_context(l, step, true, b, mb.first_row, s);
    // Each routing group's auxiliary loss weighs coeff · (its tokens / the global batch's tokens).
    if (model_.moe.load_balancing)
      c.moe_aux_weight = model_.moe.aux_loss_coeff * double(b * s / c.moe.route.groups) * double(loss_scale);
    const int eb = experts_bucket(model_.layers, l), next = l - 1 >= l0 ? l - 1 : -1;
    const float* dense = bucket_params(l, c.is_moe ? eb : next);
    const LayerWeights w = layer_weights(l, dense, c.is_moe ? bucket_params(eb, next) : nullptr);
    if (top) {
      // The top layer's forward from its input in ws_.resid; its output is not needed again.
      layer_forward(ws_.resid.data(), kept, /*keep_s2=*/true, w, c, ws_);
      rerun.reset();
    } else if (!full && !kept.has_attention_s2()) {
      const TraceSpan span(Trace::Kind::recompute);
      layer_recompute_attention(kept, c, ws_);
    }
    // Split: a dense layer's parameter gradients wait for backward_weight_chunk, which alone writes
    // its bucket; an MoE layer's or a re-run segment's backward stays whole (docs/design.md §6).
    if (split && !c.is_moe && !full) {
      if (state.pending.empty()) state.pending.resize(size_t(model_.layers));
      layer_backward_input(dx, kept, w, c, ws_, state.pending[size_t(l)]);
      bucket_params_done(l);
      continue;
    }
    layer_backward(dx, kept, w, layer_grads(l, bucket_grads(l), c.is_moe ? bucket_grads(eb) : nullptr), c, ws_);
    bucket_params_done(l);
    if (c.is_moe) bucket_params_done(eb);
    kept.release();
    bucket_grads_done(l);
    if (c.is_moe) bucket_grads_done(eb);
  }
  if (l0 == 0) {
    const LayerRegion region(kEmbeddingLayer);
    embed_backward(mb, s, state.outside);
  } else {
    dev::copy(dx_out, dx, Nl * h);
  }
  --state.chunks;
  finish_if_done(id);
}

double GPT::forward_backward(const MicroBatch& mb, uint64_t step, float loss_scale) {
  const double loss = forward_chunk(mb, 0, step, true, model_.seq_len, 0, model_.layers, nullptr, nullptr);
  backward_chunk(mb, 0, step, loss_scale, model_.seq_len, 0, model_.layers, nullptr, nullptr);
  return loss;
}

double GPT::forward_loss(const MicroBatch& mb) { return forward_loss_chunk(mb, 0, model_.layers, nullptr, nullptr); }

double GPT::forward_loss_chunk(const MicroBatch& mb, int l0, int l1, const float* x_in, float* x_out) {
  // Id −1 is no training micro-batch's (theirs count from 0), and it is forgotten at once.
  const double loss = forward_chunk(mb, -1, 0, false, model_.seq_len, l0, l1, x_in, x_out);
  in_flight_.erase(-1);
  return loss;
}

std::vector<float> GPT::next_token_probs(const int32_t* ids, int64_t len) {
  require(!tp_.active() && !cp_.active(), "sampling runs on one rank (the logits of a vocabulary shard are partial)");
  // fp32 activations keep the probabilities themselves (bf16 ones keep the logits: head_forward).
  require(layout_.activation_dtype == DType::fp32, "sampling runs with fp32 activations");
  std::vector<int32_t> targets(size_t(len), 0);
  MicroBatch mb{ids, targets.data(), 1, 0};
  forward_chunk(mb, -1, 0, false, len, 0, model_.layers, nullptr, nullptr);
  const auto* probs = static_cast<const float*>(in_flight_.at(-1).outside.logits.data()) + (len - 1) * vocab_local();
  std::vector<float> out(size_t(model_.vocab));
  dev::download(out.data(), probs, model_.vocab);
  in_flight_.erase(-1);
  return out;
}

}  // namespace lattice
