#include "analysis/memory_categories.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "analysis/moe_formulas.hpp"

#include "core/error.hpp"
#include "core/offload_layout.hpp"
#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"

namespace lattice::analysis {

LayerWorkspace layer_workspace(int64_t b, int64_t s, int64_t h, int64_t a_local, int64_t v_local, bool attention_s2,
                               bool pack_masks, int cp) {
  const int64_t N = b * s, att = attention_s2 ? b * a_local * s * s * cp : 0;
  LayerWorkspace w;
  w.nh = N * h;
  w.n4h = N * 4 * h;
  w.widen = std::max(N * 4 * h, att);
  w.att = att;
  // Two staging areas: a gradient operand and, under sequence parallelism, a re-gathered input.
  w.half = std::max({N * 4 * h, att, N * v_local}) + N * 4 * h;
  w.mask_bytes = pack_masks ? std::max(N * h, att) : 0;
  return w;
}

namespace {

// The tied embedding's bucket on a rank, the vocabulary shard, in elements.
int64_t vocab_bucket(const ModelConfig& model, int tp) { return int64_t(model.padded_vocab(tp)) / tp * model.hidden; }

// The largest bucket a rank of `stage` keeps (a transformer layer, or the vocabulary shard of the
// embedding), in elements.
int64_t largest_bucket(const ModelConfig& model, int tp, int pp, int stage) {
  int64_t largest = layer_shard_parameters(model, tp);
  if (stage == 0 || stage == pp - 1) largest = std::max(largest, vocab_bucket(model, tp));
  return largest;
}

// A rank's fp32 piece of a bucket of `elements` reduce-scattered over `ranks`.
int64_t piece_bytes(int64_t elements, int64_t ranks) { return 4 * ((elements + ranks - 1) / ranks); }

// The piece of a ZeRO-2/3 reduction still in flight when a micro-batch's backward ends, with
// accumulation (m > 1): that of the stage's last bucket, the tied embedding on the first stage, the
// bottom layer elsewhere. The next micro-batch's first reduction completes it.
int64_t pending_piece_bytes(const MemoryCase& c, int stage) {
  const LayoutConfig& l = c.layout;
  if (l.zero < 2 || l.dp_cp() <= 1 || c.micro_batches <= 1) return 0;
  const int64_t last = stage == 0 ? vocab_bucket(c.model, c.x.t) : layer_shard_parameters(c.model, c.x.t);
  return piece_bytes(last, l.dp_cp());
}

// ZeRO's transient buffers (docs/design.md §8), fp32 weights, B the largest bucket, N_d ranks (N_d·c under
// context parallelism, whose ranks hold the same weights: the trainer shards over DP with CP): stage 1
// keeps the reduced shard all step and up to three reduced pieces; stage 2 two gradient buckets in
// flight with their pieces; stage 3 also the gathered weights (the bucket in use, the prefetched
// one, less this rank's own piece of one). `at_activation_peak`: what is live at the end of a
// forward — the reduced shard (stage 1), the previous micro-batch's pending piece (stages 2–3).
int64_t zero_transient_bytes(const MemoryCase& c, int stage, int64_t psi, int64_t bucket, bool at_activation_peak) {
  const LayoutConfig& l = c.layout;
  const int64_t nd = l.dp_cp(), piece = piece_bytes(bucket, nd), shard = piece_bytes(psi, nd);
  if (nd <= 1 || l.zero == 0) return 0;
  if (at_activation_peak) {
    if (l.zero == 1) return shard;
    // --offload-params: the prefetched gather's piece, read from disk into its own buffer.
    // Stage 3's gathered buckets are backward's (activation_costs' extras).
    return pending_piece_bytes(c, stage) + (l.zero == 3 && c.offload_params ? piece : 0);
  }
  if (l.zero == 1) return shard + 3 * piece;
  // --offload-params: a gather's piece is read into its own buffer first.
  return 2 * 4 * bucket + 2 * piece + (l.zero == 3 ? 2 * 4 * bucket - piece : 0) + (c.offload_params ? piece : 0);
}

// What a checkpoint's writer stages (train/checkpoint_stream): the largest tensor of the file (fp32,
// the embedding unpadded) and one message, at most 2^20 floats and never more than the tensor.
int64_t checkpoint_writer_bytes(const ModelConfig& model) {
  const int64_t h = model.hidden, largest = 4 * std::max(4 * h * h, int64_t(model.vocab) * h);
  return largest + std::min<int64_t>(largest, 4 << 20);
}


// Micro-batches whose kept tensors stage `stage` holds at once: 1F1B keeps p − stage in flight (eq. 5
// for the first); GPipe runs every forward before any backward, so all of them.
int64_t micro_batches_in_flight(const MemoryCase& c, int stage) {
  const int p = c.layout.pp;
  if (p == 1) return 1;
  return c.gpipe ? c.micro_batches : std::min<int64_t>(p - stage, c.micro_batches);
}

// The activations' terms around the layers: the costs by mode, the head's tensors H (last stage,
// freed before any layer's backward), the in-flight factor f, and as `fixed` the embedding's masks and
// token ids E (first stage).
StageRecomputeCosts activation_costs(const MemoryCase& c, int stage) {
  const ActivationShape& x = c.x;
  const int p = c.layout.pp;
  // This rank's positions: s/c of each sequence under context parallelism.
  const int64_t N = x.positions() * x.b, N_l = N / (x.sp ? x.t : 1);
  StageRecomputeCosts costs;
  for (LayerRecompute mode : {LayerRecompute::none, LayerRecompute::selective, LayerRecompute::checkpoint,
                              LayerRecompute::in_segment})
    costs.mode[size_t(mode)] = {double(layer_kept_bytes(x, mode)), double(layer_live_bytes(x, mode)),
                                layer_recompute_flops(x, mode)};
  // Interleaved: stage r runs 2(p − r − 1) + (m − 1)p warm-up forwards of chunks (the executor's
  // schedule, docs/design.md §6), so that many chunks plus one are kept at once.
  const int64_t in_flight = micro_batches_in_flight(c, stage);
  const int64_t m_chunks = c.layout.virtual_stages;
  const int64_t chunks_in_flight =
      std::min<int64_t>(2 * (p - stage - 1) + (m_chunks - 1) * p + 1, c.micro_batches * m_chunks);
  costs.in_flight = p > 1 && m_chunks > 1 ? double(chunks_in_flight) / double(m_chunks) : double(in_flight);
  if (stage == p - 1) costs.head = double(extra_activation_bytes(x, 1, 0) + 8 * N_l);  // head, lnf stats
  if (stage == 0) costs.fixed = double(extra_activation_bytes(x, 2, int(in_flight)) + 4 * N * in_flight);
  // GPipe's last stage also holds the other in-flight micro-batches' head tensors until their backwards.
  if (c.gpipe && stage == p - 1) costs.fixed += (costs.in_flight - 1) * costs.head;
  // Backward's transient model states (engine/model_states.cpp). The fp32 bucket backward writes when
  // the whole fp32 gradient is not kept (ZeRO-2/3, 16-bit gradients), and with 16-bit weights (below
  // ZeRO-3) the bucket's weights widened to fp32. Under ZeRO-2/3 the previous bucket and its piece stay
  // while that reduction is in flight (one in flight; above the top layer only the final LayerNorm's),
  // and the head hands its tied embedding bucket over while its tensors are still live, so that piece is
  // there too; the first reduction of a micro-batch completes the previous one's pending piece (in
  // `fixed`), so on the last stage it is gone once the layers' backward starts.
  const LayoutConfig& l = c.layout;
  const bool scattered = l.zero >= 2 && l.dp_cp() > 1, widened = l.mixed_precision() && l.zero < 3;
  if (!c.model.moe.enabled() && (scattered || l.mixed_precision())) {
    auto piece = [&](int64_t elements) { return scattered ? piece_bytes(elements, l.dp_cp()) : 0; };
    const int64_t layer = layer_shard_parameters(c.model, x.t), vocab = vocab_bucket(c.model, x.t);
    const int64_t unit = 4 * layer * (widened ? 2 : 1);
    const int64_t gone = stage == p - 1 ? pending_piece_bytes(c, stage) : 0;
    // ZeRO-3 also holds a layer's gathered weights and the next layer's, prefetched, through its backward;
    // it releases the head's gathered embedding before making that gradient bucket, and a stage without
    // the head ends its forward with its top layer's weights gathered again for backward.
    const int64_t gathered = l.zero >= 3 && l.dp_cp() > 1 ? 2 * 4 * layer : 0;
    costs.head_extra = stage == p - 1 ? double(4 * vocab * (widened ? 2 : 1) + piece(vocab)) : double(gathered / 2);
    costs.top_extra = double(unit + gathered - gone);
    costs.rest_extra = double(unit + (scattered ? 4 * layer + piece(layer) : 0) + gathered - pending_piece_bytes(c, stage));
  }
  return costs;
}

}  // namespace

std::vector<LayerRecompute> stage_modes(const MemoryCase& c, int stage) {
  const int L = c.model.layers;
  const std::vector<LayerRecompute> all = layer_recompute(c.layout, L);
  std::vector<LayerRecompute> mine;
  for (int layer : StagePartition::of(c.layout, L).layers_of_rank(stage, c.layout.pp)) mine.push_back(all[size_t(layer)]);
  return mine;
}

CategoryBytes rank_memory(const MemoryCase& c, int stage) { return rank_memory(c, stage, {stage_modes(c, stage)}); }

StageRecomputeCosts stage_recompute_costs(const MemoryCase& c, int stage) {
  StageRecomputeCosts costs = activation_costs(c, stage);
  costs.fixed += double(rank_memory(c, stage).beside_activations);
  return costs;
}

namespace {
// A category's bytes, computed in double, as the int64 the report counts in: a model past any machine
// (the 1e21 bytes of a 10,000-layer, 2^20-wide plan) is refused in one line, not wrapped negative.
// The message is formatted only when it is needed: `plan --search` asks this of millions of stages, and
// formatting it every time was a sixth of the search's time.
int64_t counted_bytes(double bytes, const char* what) {
  if (!(std::isfinite(bytes) && bytes < 0x1p62)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", bytes);
    fail(std::string("the ") + what + " of a rank would be " + text + " bytes, past the 2^62 a size is counted in: lower --layers, --hidden, --seq-len or --micro-batch");
  }
  return int64_t(bytes);
}
}  // namespace

CategoryBytes rank_memory(const MemoryCase& c, int stage, const StageLayers& mine) {
  const ActivationShape& x = c.x;
  const LayoutConfig& l = c.layout;
  const int p = l.pp;
  // N: this rank's positions of a micro-batch (s/c of each sequence under context parallelism).
  const int64_t N = x.positions() * x.b, shard = x.sp ? x.t : 1, N_l = N / shard;
  const int64_t sbh = N * x.h;
  CategoryBytes m;

  // Activations (docs/design.md §4): (f − 1)·K + max(K + H, the largest backward unit over the kept
  // bytes below it) + E, K the stage's kept bytes under its layers' modes.
  const StageRecomputeCosts costs = activation_costs(c, stage);
  const int64_t in_flight = micro_batches_in_flight(c, stage);
  const int64_t per_stage = int64_t(mine.modes.size());
  const bool moe = c.model.moe.enabled();
  double layers = 0, extras = 0;  // the activations' own peak, and what backward's model states add beside them
  if (moe) {
    // MoE layers keep other bytes than dense ones; without recompute a stage holds f·K + H + E, K its
    // layers' kept bytes (plan/memory_model.cpp predicts MoE ranks only so).
    double K = 0;
    for (int layer : StagePartition::of(l, c.model.layers).layers_of_rank(stage, p))
      K += c.model.moe.is_moe_layer(layer) ? double(c.moe_layer_kept) : double(layer_kept_bytes(x, LayerRecompute::none));
    layers = costs.in_flight * K + costs.head + costs.fixed;
  } else {
    StageRecomputeCosts kept_only = costs;
    kept_only.head_extra = kept_only.top_extra = kept_only.rest_extra = 0;
    layers = stage_activation_peak(kept_only, mine.modes);
    extras = stage_activation_peak(costs, mine.modes) - layers;
  }
  // ZB-H1 (docs/design.md §6.1): stage r defers each weight pass by r, so min(p, n) − min(p − r, n)
  // micro-batches' weight-pass operands (M_W) of its split layers (those whose forward is not re-run)
  // are held too; and one input pass at a time holds more than its layer kept while it runs (its
  // operands are made before the kept tensors are freed: layer_input_pass_bytes).
  if (c.zero_bubble && p > 1) {
    const int64_t deferred = std::min<int64_t>(p, c.micro_batches) - in_flight;
    const double m_w = double(layer_weight_pending_bytes(x) + layer_weight_pending_small_bytes(x, c.threads));
    const int64_t split = std::count_if(mine.modes.begin(), mine.modes.end(),
                                        [](LayerRecompute r) { return !forward_recomputed(r); });
    layers += double(split) * double(deferred) * m_w;
    // The stage's input pass runs its layers one after another: after j of them it holds j·net more,
    // then the next one's peak. The last stage has freed its head's tensors by then.
    const InputPassBytes pass = layer_input_pass_bytes(x, c.threads);
    int64_t excess = split > 0 ? pass.peak + std::max<int64_t>(0, (split - 1) * pass.net) : 0;
    if (stage == p - 1) excess = std::max<int64_t>(0, excess - int64_t(costs.head));
    layers += double(excess);
  }
  m.activations = counted_bytes(layers, "activations");

  // Model states: the formula's steady bytes, the bf16 copy fp32 weights keep for bf16 GEMMs, and
  // ZeRO's transient buffers.
  const bool offloaded = c.offload_optimizer || c.offload_params;
  const MoEShardParameters moe_psi = moe ? moe_shard_parameters(c.model, l) : MoEShardParameters{};
  const int64_t psi = moe ? moe_psi.total() : stage_parameters(c.model, x.t, p, stage, int(per_stage));
  const ModelStateBytes steady =
      moe ? moe_model_state_bytes(moe_psi, l.dp_cp(), l.ep, l.zero, l.mixed_precision(), offloaded ? 0 : 8, c.weight_versions)
          : model_state_bytes(psi, l.dp_cp(), l.zero, l.mixed_precision(), offloaded ? 0 : 8, c.weight_versions);
  m.model_states_steady = steady.total() - (c.offload_params ? steady.params : 0);
  if (l.activation_dtype == DType::bf16 && !l.mixed_precision() && l.zero < 3)
    m.model_states_steady += 2 * psi * c.weight_versions;
  const int64_t bucket = largest_bucket(c.model, x.t, p, stage);
  m.model_states_transient = zero_transient_bytes(c, stage, psi, bucket, false);
  m.model_states = m.model_states_steady + m.model_states_transient;
  const int64_t transient_at_peak = zero_transient_bytes(c, stage, psi, bucket, true);

  // Workspaces: the layer's (sized by layer_workspace), the GEMMs' scratchpads, and the largest of the
  // kernels' transient buffers, which are never held at once: the head's losses with the rows'
  // maximum, sum and target logit (tensor_parallel/vocab_parallel.cpp; under bf16 activations the
  // first two are kept with the logits, and a block of rows is widened: c.head_scratch), a
  // LayerNorm backward's per-thread parameter sums (kernels/layernorm.cpp), the unfused softmax's
  // row, output row and mask row per thread (kernels/softmax.cpp; s the attention's rows: the whole
  // sequence, also under Ulysses), the fused attention's tiles (c.attention_scratch), and under bf16
  // activations a bias gradient's running column sums as its gradient is narrowed (kernels/
  // bf16_fused.cpp narrow_columns: the threads' stretches together one float a column, FC1's 4h/t
  // the widest).
  const int64_t a_local = x.a / x.t, v_local = x.v / x.t, threads = std::max<int64_t>(1, c.threads);
  // LayerNorm's sums: dγ and dβ a thread; under bf16 activations also its widened input row
  // (kernels/bf16_fused.cpp layernorm_backward_bf16).
  const int64_t losses = x.d == 2 ? 8 * N + c.head_scratch : 16 * N;
  const int64_t layernorm_sums = (x.d == 2 ? 12 : 8) * x.h * threads;
  const int64_t softmax_rows = x.fused_attention ? 0 : (8 * x.s + (x.dropout ? x.s : 0)) * threads;
  const int64_t bias_sums = x.d == 2 ? 4 * (4 * x.h / x.t) : 0;
  m.workspaces = layer_workspace(x.b, x.positions(), x.h, a_local, v_local, !x.fused_attention, x.packed_masks, x.cp)
                     .bytes() + std::max({losses, layernorm_sums, softmax_rows, bias_sums, c.attention_scratch}) +
                 (stage == p - 1 ? c.gemm_scratchpad_last : c.gemm_scratchpad) + c.moe_workspace;

  // Communication: each reduce-scatter's ring scratch (one chunk with two ranks, two beyond) per
  // group that runs one, and SP's rank-major staging.
  auto ring = [](int64_t chunk, int64_t ranks) { return ranks <= 1 ? 0 : 4 * chunk * (ranks > 2 ? 2 : 1); };
  if (x.sp) m.communication += ring(N_l * x.h, x.t) + 4 * sbh;
  if (l.zero >= 1) m.communication += ring((bucket + l.dp_cp() - 1) / l.dp_cp(), l.dp_cp());
  // Context parallelism, grown once and kept: Ulysses' rank-major send and receive staging, b·(s/c)·h/t
  // floats each (tensor_parallel/context_parallel.cpp); the ring's two K, V pairs, two dK, dV partial
  // sums and the one arriving, ten tensors of that size (tensor_parallel/ring_attention.hpp).
  if (x.cp > 1) m.communication += (l.cp_comm == CpComm::p2p ? 10 : 2) * 4 * N * (x.h / x.t);

  // Pipeline: the sends 1F1B has in flight and the receive buffer, a micro-batch's boundary each.
  // Interleaved: at most p·m sends (the schedule's bound) and the receive buffer.
  const int64_t m_chunks = l.virtual_stages;
  if (p > 1) m.pipeline = (m_chunks > 1 ? p * m_chunks + 1 : in_flight + 1) * 4 * N_l * x.h;

  m.data = c.data_bytes + 8 * x.s * x.b;  // token files, one micro-batch's ids (whole rows, also under CP)
  // Offloaded moments: kOffloadSlots staging units of two moments in memory, two versions of 8 bytes
  // per owned parameter on disk (core/offload_layout.hpp, optim/offloaded_states.hpp).
  // With --offload-params the fp32 weights of the shard are a third state of the same file.
  if (offloaded) {
    const int64_t owned = l.zero >= 1 && l.dp_cp() > 1 ? (psi + l.dp_cp() - 1) / l.dp_cp() : psi,
                  states = c.offload_params ? 3 : 2;
    m.offload_io = kOffloadSlots * states * 4 * std::min(owned, kOffloadUnit);
    m.offload_disk_bytes = 2 * 4 * states * owned;
  }
  // Checkpoint I/O: the writer's whole tensor and one message no larger (docs/design.md §14).
  if (c.save && c.writer) m.checkpoint_io = checkpoint_writer_bytes(c.model);
  // PipeDream-2BW with 16-bit weights: the previous version widened to fp32 while it is saved, on
  // each DP group's rank 0 (ModelStates::previous_save_pieces), alongside the writer's buffers.
  if (c.save && c.weight_versions == 2 && l.mixed_precision()) m.checkpoint_io += 4 * psi;

  // All at one instant: the end of a forward (every category but checkpoint I/O at its peak, ZeRO's
  // transient as it is then), or the save after training (no activations left).
  const int64_t rest = m.workspaces + m.communication + m.pipeline + m.data + m.offload_io;
  m.beside_activations = m.model_states_steady + transient_at_peak + rest;
  counted_bytes(layers + extras + double(m.beside_activations), "accounted peak");  // the sum below fits
  m.accounted_peak = std::max(m.activations + int64_t(extras) + m.beside_activations,
                              m.model_states_steady + rest + m.checkpoint_io);
  return m;
}

}  // namespace lattice::analysis
