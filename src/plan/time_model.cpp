// The step's time, term by term (plan/time_model.hpp). One file past the usual length on purpose:
// every term reads the same helpers at its top (the preset rates, or --hardware local's measured
// GEMMs, kernels and fused attention), and splitting the terms apart would split those.
#include "plan/time_model.hpp"

#include "core/stage_partition.hpp"

#include <algorithm>
#include <string>

#include "plan/gemm_shapes.hpp"
#include "plan/memory_model.hpp"

namespace lattice::plan {

double attention_elementwise_bytes(const analysis::ActivationShape& x) {
  if (x.fused_attention) return 0.0;  // the score tiles stay in cache (docs/design.md §3.1)
  const double s2 = double(x.a) * x.s * x.s * x.b / x.t / x.cp;  // a/(t·c) heads over s under CP
  // scale-mask-softmax reads and writes the scores; dropout reads them, writes output and mask.
  return x.dropout ? s2 * (4.0 * x.d + 1) : s2 * 2.0 * x.d;
}

double layer_elementwise_bytes(const analysis::ActivationShape& x) {
  const double sbh = double(x.positions()) * x.b * x.h;  // this rank's s/c positions under CP
  const double mask = x.dropout ? 1 : 0;
  // Two LayerNorms (read + write) and two bias-dropout-adds (two reads, a write, a mask) run on
  // the replicated [s, b, h] tensor, or on a 1/t sequence shard under SP.
  const double replicated = sbh * (10.0 * x.d + 2 * mask) / (x.sp ? x.t : 1);
  const double gelu = 8.0 * sbh * x.d / x.t;  // fused bias-GeLU on the 4h/t shard
  return replicated + gelu + attention_elementwise_bytes(x);
}

double moe_mlp_elementwise_bytes(const analysis::MoEKeptShape& m) {
  // N: the micro-batch's tokens, which the router's softmax and routing read on every CP rank; Nl:
  // this rank's, whose rows are dispatched and combined.
  const double N = double(m.s) * m.b, Nl = double(m.local_tokens()), A = double(m.assignments), R = double(m.received);
  const double h = double(m.h), f = double(m.ffn_hidden) / m.t, d = m.d;
  return 8.0 * N * double(m.experts) + 2.0 * A * h * d + (A + Nl) * h * d + 2.0 * R * f * d;
}

namespace {

// --hardware local (plan/local_hardware.hpp): what the engine's ranks get of this machine. GEMMs are
// the engine's calls timed here per shape (plan/gemm_shapes.hpp), slowed by the share of the cores a
// rank gets while every rank computes; element-wise kernels move bytes at the bench's rate for each
// (measured with every rank running when the bench had this many ranks, else slowed the same way);
// the engine communicates fp32 whatever the activation dtype (16-bit gradients are widened first).
double compute_share(const Hardware& hw) { return hw.local.active() ? hw.local.share(hw.local.ranks) : 1.0; }
double elementwise_share(const Hardware& hw) { return hw.local.rates_shared ? 1.0 : compute_share(hw); }
double elementwise_rate(const Hardware& hw) {
  return hw.local.active() ? hw.local.elementwise_bandwidth * elementwise_share(hw) : hw.memory_bandwidth;
}
// Seconds of `bytes` moved by kernel `name` at the bench's rate for it (the element-wise rate when
// the bench did not time that kernel).
double kernel_seconds(const Hardware& hw, const char* name, double bytes) {
  const auto it = hw.local.kernel_rates.find(name);
  const double rate = it != hw.local.kernel_rates.end() && it->second > 0 ? it->second * elementwise_share(hw)
                                                                          : elementwise_rate(hw);
  return bytes / rate;
}
// Elements a layer converts between fp32 and bf16 under bf16 activations (each read in one width and
// written in the other: 6 bytes), as the engine runs it: forward, the QKV and FC1 inputs narrowed for
// their GEMMs; backward, each linear's output gradient and attention's dctx and dS narrowed, and the
// kept bf16 tensors its kernels read widened (LayerNorm and FC1 inputs, the GeLU input, the
// projection input, Q, K, V, the probabilities and, with dropout, the dropped probabilities).
double layer_bf16_conversions(const analysis::ActivationShape& x, bool backward) {
  if (x.d != 2) return 0;
  const double N = double(x.positions()) * x.b, h = double(x.h), t = x.t, local = N / (x.sp ? t : 1);
  const double s2 = x.fused_attention ? 0 : double(x.a) * x.s * x.s * x.b / t / x.cp;
  if (!backward) return 2 * N * h;
  const double narrowed = N * (3 * h / t + h + 4 * h / t + h) + N * h / t + s2;
  const double widened = 2 * local * h + N * h + N * 4 * h / t + N * h / t + 3 * N * h / t + s2 * (x.dropout ? 2 : 1);
  return narrowed + widened;
}

// A layer's element-wise kernels kernel by kernel (the bytes of layer_elementwise_bytes), forward or
// backward (each backward kernel moves twice its forward's bytes).
// The kernels run on fp32 staging buffers whatever the activation dtype (model/transformer_layer.cpp:
// a kept 16-bit tensor is narrowed from, and widened back to, fp32), so they move 4 bytes an element;
// the narrowing and widening are the to_bf16 conversions, and the kept stores are `d` wide.
double layer_elementwise_seconds(const Hardware& hw, const analysis::ActivationShape& x, bool backward) {
  const double sbh = double(x.positions()) * x.b * x.h, replicated = sbh / (x.sp ? x.t : 1), d = 4.0,
               k = backward ? 2 : 1;
  const std::string pass = backward ? "_bwd" : "_fwd";
  double t = 2 * kernel_seconds(hw, ("layernorm" + pass).c_str(), k * 2 * d * replicated);
  t += 2 * (x.dropout ? kernel_seconds(hw, ("bias_dropout_add" + pass).c_str(), k * (3 * d + 1) * replicated)
                      : kernel_seconds(hw, ("residual_add" + pass).c_str(), k * 3 * d * replicated));
  t += kernel_seconds(hw, ("bias_gelu" + pass).c_str(), k * 2 * d * 4 * sbh / x.t);
  if (!x.fused_attention) {
    const double s2 = double(x.a) * x.s * x.s * x.b / x.t / x.cp;
    t += x.dropout ? kernel_seconds(hw, ("softmax_dropout" + pass).c_str(), k * (4 * d + 1) * s2)
                   : kernel_seconds(hw, ("softmax" + pass).c_str(), k * 2 * d * s2);
  }
  // Copies: forward stores the two LayerNorm inputs it keeps (narrowed under bf16) and splits the QKV
  // output into heads (not where the fused attention reads the QKV rows the GEMM wrote: bf16, no
  // context parallelism, model/transformer_layer.cpp) and merges the context back; backward unmerges
  // the context's gradient, merges dQ, dK, dV into one row and sums the QKV bias's columns (the other
  // biases' sums are in the kernels above).
  const double N = double(x.positions()) * x.b, hl = double(x.h) / x.t;
  const double split = x.fused_attention && x.d == 2 && x.cp == 1 ? 0.0 : 8.0 * 3 * N * hl;
  t += backward ? kernel_seconds(hw, "copy", 8.0 * 4 * N * hl + 4.0 * 3 * N * hl)
                : kernel_seconds(hw, "copy", (4.0 + x.d) * 2 * replicated + split + 8.0 * N * hl);
  return t + kernel_seconds(hw, "to_bf16", 6.0 * layer_bf16_conversions(x, backward));
}
double comm_element_bytes(const Hardware& hw, double d) { return hw.local.active() ? 4.0 : d; }
template <class Keep>
double measured_gemms(const Hardware& hw, const std::vector<GemmCall>& calls, bool bf16, Keep keep) {
  double seconds = 0;
  for (const GemmCall& c : calls)
    if (keep(c)) seconds += hw.local.gemm->seconds(c.shape, bf16);
  return seconds / compute_share(hw);
}
// FLOP/s of the GEMMs the time model counts by FLOPs alone (MoE experts, fused attention's
// recompute): the preset's rate, or locally the layer's forward GEMMs' measured mean rate.
double gemm_rate(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x) {
  if (!hw.local.active()) return hw.peak_flops(r.bf16_compute()) * hw.gemm_efficiency;
  // The forward's GEMMs; with fused attention not the s² ones the fused kernel replaces (timing them
  // would allocate the s² scores the fused run never holds).
  auto forward = [&](const GemmCall& c) { return c.pass == GemmPass::forward && !(x.fused_attention && c.attention); };
  double flops = 0;
  const std::vector<GemmCall> calls = layer_gemms(x);
  for (const GemmCall& c : calls)
    if (forward(c)) flops += gemm_flops(c.shape);
  return flops / measured_gemms(hw, calls, r.bf16_compute(), forward);
}

// --hardware local with --attention fused: the fused kernel timed at this rank's share: a/(t·c)
// heads over the whole sequence (one rank, Ulysses), or the ring's blocks of a/t heads over its c
// steps. Its backward recomputes the QKᵀ tiles inside, so nothing else charges that recomputation here.
double fused_attention_seconds(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x,
                               bool backward) {
  const bool ring = x.cp > 1 && r.layout.cp_comm == CpComm::p2p;
  const FlashShape f{x.b, ring ? x.a / x.t : x.a / x.t / x.cp, x.s, x.h / x.a};
  return hw.local.gemm->attention_seconds(f, ring ? x.cp : 0, x.dropout, backward) / compute_share(hw);
}
// The measured seconds of a layer's GEMMs in one pass (`backward`: input and weight passes), those of
// the dense MLP too unless `moe`; with fused attention its s² GEMMs are the fused kernel's time.
double local_layer_gemm_seconds(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x,
                                bool backward, bool moe) {
  const bool fused = x.fused_attention;
  auto keep = [&](const GemmCall& g) {
    return (g.pass != GemmPass::forward) == backward && !(moe && g.mlp) && !(fused && g.attention);
  };
  return measured_gemms(hw, layer_gemms(x), r.bf16_compute(), keep) +
         (fused ? fused_attention_seconds(r, hw, x, backward) : 0.0);
}

// The experts an MoE rank holds (E over the expert-parallel group).
int local_experts(const PlanRequest& r) { return int(r.model.moe.experts / std::max(1, r.layout.ep)); }

// An MoE layer's GEMMs timed here, forward or backward (input and weight passes): the attention
// half's calls and the MoE block's own, which replace the dense MLP's FC1 and FC2.
double moe_layer_gemm_seconds(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x,
                              bool backward) {
  auto in_pass = [backward](const GemmCall& g) { return (g.pass != GemmPass::forward) == backward; };
  return local_layer_gemm_seconds(r, hw, x, backward, true) +
         measured_gemms(hw, moe_block_gemms(moe_kept_shape(r), local_experts(r)), r.bf16_compute(), in_pass);
}

// Forward of one layer for one micro-batch on one rank.
struct LayerCost {
  double gemm = 0, elementwise = 0, comm = 0;
  double all_to_all = 0;  // MoE layers: dispatch + combine over the expert-parallel group
  double cp_comm = 0;     // context parallelism: Ulysses' all-to-alls, or what the ring's transfers leave exposed
  double total() const { return gemm + elementwise + comm + all_to_all + cp_comm; }
};

// One of Ulysses' all-to-alls (docs/design.md §5.1) over the CP group, c ranks t apart (ranks vary
// along TP, then CP): each rank sends (c−1)/c of its b·(s/c)·h/t elements (analysis/formulas.hpp).
double cp_exchange_seconds(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x) {
  if (x.cp <= 1) return 0;
  const double sent = analysis::cp_all_to_all_sent_bytes(x.s, x.b, x.h, x.t, x.cp, 1) * comm_element_bytes(hw, x.d);
  return all_to_all(group_topology(hw, x.cp, r.layout.tp), sent).seconds;
}

// The attention blocks' forward GEMM time of one layer and micro-batch on a rank (QKᵀ and P·V over
// its s/c queries and the whole sequence's keys).
double attention_forward_seconds(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x) {
  if (hw.local.active())
    return x.fused_attention ? fused_attention_seconds(r, hw, x, false)
                             : measured_gemms(hw, layer_gemms(x), r.bf16_compute(),
                                              [](const GemmCall& g) { return g.attention && g.pass == GemmPass::forward; });
  return 4.0 * double(x.b) * double(x.positions()) * double(x.s) * double(x.h) / x.t / gemm_rate(r, hw, x);
}

// Context parallelism's ring (--cp-comm-type p2p, docs/design.md §5.1): the seconds its transfers
// leave exposed in one layer's forward and backward for one micro-batch. Each of the c steps computes
// 1/c of the attention (the split balances them) while the next K and V (forward) — and in backward
// also the last step's dK, dV partial sums — travel to the neighbour, t ranks away; the last partial
// sums' trip home is waited for. On this host (--hardware local) nothing is hidden (below).
struct RingSeconds {
  double forward = 0, backward = 0;
};
RingSeconds cp_ring_seconds(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x,
                            double attention_backward) {
  RingSeconds out;
  const int c = x.cp;
  if (c <= 1 || r.layout.cp_comm != CpComm::p2p) return out;
  const double pair = point_to_point(group_topology(hw, c, r.layout.tp),
                                     analysis::cp_ring_pair_bytes(x.s, x.b, x.h, x.t, c, 1) * comm_element_bytes(hw, x.d))
                          .seconds;
  // What a step's blocks can hide: on this host (--hardware local) none, since MPI over shared memory
  // copies a message inside the wait (no progress thread; measured: the ring's waits are its copies).
  const bool hides = !hw.local.active();
  const double forward_step = hides ? attention_forward_seconds(r, hw, x) / c : 0.0;
  const double backward_step = hides ? attention_backward / c : 0.0;
  for (int t = 0; t < c; ++t) {
    if (t + 1 < c) out.forward += std::max(0.0, pair - forward_step);
    const double in_flight = (t + 1 < c ? pair : 0.0) + (t > 0 ? pair : 0.0);
    out.backward += std::max(0.0, in_flight - backward_step);
  }
  out.backward += pair;
  return out;
}

// `moe`: the layer's MLP is an MoE block (experts on the received rows, the router, two all-to-alls).
LayerCost layer_forward(const PlanRequest& r, const Hardware& hw, const analysis::ActivationShape& x,
                        const GroupTopology& tp_group, Algorithm& tp_algorithm, bool moe) {
  // s: this rank's positions (s/c under CP, whose attention runs a/(t·c) heads over the whole sequence).
  const double s = double(x.positions()), b = x.b, h = x.h, t = x.t;
  const double flops_per_s = gemm_rate(r, hw, x);
  LayerCost c;
  c.gemm = hw.local.active() ? local_layer_gemm_seconds(r, hw, x, false, false)
                             : (24.0 * b * s * h * h + 4.0 * b * s * double(x.s) * h) / t / flops_per_s;
  c.cp_comm = r.layout.cp_comm == CpComm::p2p ? 0 : analysis::kCpAllToAllsForward * cp_exchange_seconds(r, hw, x);
  c.elementwise = hw.local.active() ? layer_elementwise_seconds(hw, x, false) : layer_elementwise_bytes(x) / hw.memory_bandwidth;
  if (moe) {
    // The dense MLP's FC1 and FC2 (16bsh²/t) and bias-GeLU (8sbh·d/t) become the experts' FC1 and FC2
    // on the R received rows (4·R·h·f/t), the router GEMM (2·s·b·router parameters, not split by t)
    // and the MoE block's element-wise work; the rows go out and back by two all-to-alls.
    const analysis::MoEKeptShape m = moe_kept_shape(r);
    const double f = r.model.ffn_hidden();
    if (hw.local.active())
      c.gemm = moe_layer_gemm_seconds(r, hw, x, false);
    else
      c.gemm += (4.0 * double(m.received) * h * f / t - 16.0 * b * s * h * h / t +
                 2.0 * s * b * double(analysis::moe_router_params(r.model))) / flops_per_s;
    c.elementwise += (moe_mlp_elementwise_bytes(m) - 8.0 * s * b * h * x.d / t) / elementwise_rate(hw);
    // EP folds over DP × CP: e consecutive positions cp_rank + c·dp_rank, t ranks apart.
    const GroupTopology ep_group = group_topology(hw, r.layout.ep, r.layout.tp);
    c.all_to_all = 2 * all_to_all(ep_group, analysis::moe_all_to_all_bytes(m.assignments, x.h, r.layout.ep)).seconds;
    // Under CP every rank gathers the micro-batch's router logits over the CP group (fp32).
    if (x.cp > 1)
      c.cp_comm += all_gather(group_topology(hw, x.cp, r.layout.tp),
                              analysis::moe_cp_gather_bytes(r.model.moe, int64_t(x.s) * x.b, x.cp)).seconds;
  }
  // Two conjugate pairs per layer (attention, MLP): all-reduce, or all-gather + reduce-scatter.
  const double bytes = s * b * h * comm_element_bytes(hw, x.d);
  if (x.t > 1) {
    CollectiveCost one = all_reduce(tp_group, bytes);
    if (x.sp) {
      const CollectiveCost rs = reduce_scatter(tp_group, bytes);
      one = {rs.seconds + all_gather(tp_group, bytes).seconds, rs.algorithm};
    }
    c.comm = 2 * one.seconds;
    tp_algorithm = one.algorithm;
  }
  return c;
}

// The forward of one layer and the extra forward work its recomputation adds in each mode.
struct LayerWork {
  LayerCost forward;
  LayerCost recompute_full;       // a checkpoint's or segment layer's forward, re-run
  LayerCost recompute_selective;  // QKᵀ, softmax, dropout and probs×V from the kept Q, K, V
  LayerCost recompute_always;     // fused attention's backward recomputes QKᵀ tile by tile in every mode
  LayerCost recompute(LayerRecompute mode) const {
    LayerCost c = forward_recomputed(mode) ? recompute_full
                  : mode == LayerRecompute::selective ? recompute_selective
                                                      : LayerCost{};
    c.gemm += recompute_always.gemm;
    return c;
  }
  double backward_gemm = 0;  // input and weight gradients: twice the forward's FLOPs, or measured per shape
  double backward_elementwise = 0;  // twice the forward's bytes
  // Under SP the column-parallel inputs are kept as sequence shards, so backward all-gathers
  // them again (QKV and FC1) to form the weight gradients.
  double backward_extra_comm = 0;
  double backward_cp_comm = 0;  // CP: the four gradients' all-to-alls (five with fused attention's context)
  // A split backward's weight pass (ZB-H1): the four dW GEMMs, 24·b·s·h²/t FLOPs, of the layers whose
  // backward is split (not MoE, not fully recomputed).
  double weight_gemm = 0;
  Algorithm tp_algorithm = Algorithm::none;
};

LayerWork layer_work(const PlanRequest& r, const Hardware& hw, bool moe) {
  const LayoutConfig& l = r.layout;
  const analysis::ActivationShape x = activation_shape(r);
  const double flops_per_s = gemm_rate(r, hw, x);
  const bool local = hw.local.active();
  const bool bf16 = r.bf16_compute();
  LayerWork w;
  const GroupTopology tp_group = group_topology(hw, l.tp, 1);
  w.forward = layer_forward(r, hw, x, tp_group, w.tp_algorithm, moe);
  w.backward_gemm = 2 * w.forward.gemm;
  w.backward_elementwise = local && !moe ? layer_elementwise_seconds(hw, x, true) : 2 * w.forward.elementwise;
  if (local && !moe) w.backward_gemm = local_layer_gemm_seconds(r, hw, x, true, false);
  if (local && moe) w.backward_gemm = moe_layer_gemm_seconds(r, hw, x, true);
  const double positions = double(x.positions());  // s/c under CP
  if (x.sp && x.t > 1)
    w.backward_extra_comm = 2 * all_gather(tp_group, positions * x.b * x.h * comm_element_bytes(hw, x.d)).seconds;
  if (l.cp_comm == CpComm::p2p) {
    // The ring's exposed transfers; its blocks' backward is twice the forward's GEMMs plus the
    // fused kernel's recomputed QKᵀ, half the forward's (analysis::fused_attention_recompute_flops).
    const double attention_forward = attention_forward_seconds(r, hw, x);
    const RingSeconds ring = cp_ring_seconds(r, hw, x, 2 * attention_forward + attention_forward / 2);
    w.forward.cp_comm += ring.forward;  // beside an MoE layer's gather of the router logits
    w.backward_cp_comm = ring.backward;
  } else {
    w.backward_cp_comm = analysis::cp_all_to_alls_backward(x.fused_attention) * cp_exchange_seconds(r, hw, x);
  }
  if (!moe)
    w.weight_gemm = local ? measured_gemms(hw, layer_gemms(x), bf16,
                                           [](const GemmCall& g) { return g.pass == GemmPass::backward_weight; })
                          : 24.0 * x.b * positions * x.h * x.h / x.t / flops_per_s;
  w.recompute_full = w.forward;  // a re-run forward exchanges its four all-to-alls again
  // Selective recompute re-runs the unfused attention's QKᵀ, softmax, dropout and P·V; the fused
  // attention keeps its log-sum-exp in every mode and re-creates nothing (model/transformer_layer.cpp).
  if (!x.fused_attention) {
    w.recompute_selective.gemm = attention_forward_seconds(r, hw, x);
    w.recompute_selective.elementwise = attention_elementwise_bytes(x) / elementwise_rate(hw);
  }
  if (x.fused_attention && !local)  // locally it is inside the fused backward's measured time
    w.recompute_always.gemm = analysis::fused_attention_recompute_flops_per_layer(double(x.b), double(x.s), double(x.h)) /
                              x.t / x.cp / flops_per_s;
  return w;
}

}  // namespace

LayerTime layer_time(const PlanRequest& r, const Hardware& hw) {
  const LayerWork w = layer_work(r, hw, false);
  const LayerCost& f = w.forward;
  double recompute = 0;  // the mean over the layers of the plan (block N: N/L of a full re-run)
  const std::vector<LayerRecompute> plan = layer_recompute(r.layout, r.model.layers);
  for (LayerRecompute mode : plan) recompute += w.recompute(mode).total() / double(plan.size());
  return {f.total(),
          w.backward_gemm + w.backward_elementwise + f.comm + w.backward_extra_comm + w.backward_cp_comm + recompute};
}

namespace {

// One micro-batch's seconds on one pipeline stage, by part.
struct StageWork {
  double gemm = 0, elementwise = 0, tp_comm = 0, ep_comm = 0, cp_comm = 0, recompute = 0;
  double weight = 0;  // of which a split backward's weight passes (part of gemm)
  double compute() const { return gemm + elementwise + recompute; }  // what the cores do, not the wires
  double total() const { return compute() + tp_comm + ep_comm + cp_comm; }
  // One layer in recompute mode `mode`; its backward is split (ZB-H1's W) unless `whole` (MoE) or
  // its forward is re-run.
  void add_layer(const LayerWork& w, LayerRecompute mode, bool whole) {
    if (!whole && !forward_recomputed(mode)) weight += w.weight_gemm;
    gemm += w.forward.gemm + w.backward_gemm;
    elementwise += w.forward.elementwise + w.backward_elementwise;
    tp_comm += 2 * w.forward.comm + w.backward_extra_comm;
    ep_comm += 2 * w.forward.all_to_all;
    cp_comm += w.forward.cp_comm + w.backward_cp_comm;
    recompute += w.recompute(mode).total();
  }
};

// The output layer's share of the last stage: logits forward and backward, the cross-entropy's passes
// over them, and under TP the output layer's f / g and the vocabulary-parallel cross-entropy.
StageWork head_work(const PlanRequest& r, const Hardware& hw) {
  const analysis::ActivationShape x = activation_shape(r);
  // s: the positions whose logits this rank computes (s/c under CP).
  const double s = double(x.positions()), b = x.b, h = x.h, t = x.t, v = double(x.v), d = comm_element_bytes(hw, x.d);
  StageWork w;
  w.gemm = hw.local.active() ? measured_gemms(hw, head_gemms(x), r.bf16_compute(), [](const GemmCall&) { return true; })
                             : 6.0 * b * s * h * v / t / (hw.peak_flops(r.bf16_compute()) * hw.gemm_efficiency);
  if (x.d == 2) {
    // bf16 logits (docs/design.md §4): the GEMM writes them, the forward reads them for each row's
    // maximum and sum, the backward reads them and writes the bf16 gradient the GEMMs take: three
    // passes of 2 bytes. The head's input is narrowed for its GEMMs (forward and backward).
    w.elementwise = 3.0 * 2.0 * s * b * v / t / elementwise_rate(hw);
    if (hw.local.active()) w.elementwise += kernel_seconds(hw, "to_bf16", 6.0 * s * b * 2 * h);
  } else {
    w.elementwise = 6.0 * 4.0 * s * b * v / t / elementwise_rate(hw);  // fp32 logits and probabilities, ~6 passes
  }
  if (r.layout.tp > 1) {
    const GroupTopology tp_group = group_topology(hw, r.layout.tp, 1);
    w.tp_comm += all_reduce(tp_group, s * b * h * d).seconds;                             // output layer's f / g
    w.tp_comm += 3 * all_reduce(tp_group, s * b * 4.0).seconds;                           // vocab-parallel cross-entropy
    if (r.layout.pp == 1) w.tp_comm += all_reduce(tp_group, s * b * h * d).seconds;  // vocab-parallel embedding
  }
  return w;
}

// Each pipeline stage's work for one micro-batch, first stage first.
std::vector<StageWork> stage_works(const PlanRequest& r, const Hardware& hw, const LayerWork& dense) {
  const LayoutConfig& l = r.layout;
  const StagePartition partition = StagePartition::of(l, r.model.layers);
  const bool moe = r.model.moe.enabled();
  const LayerWork moe_work = moe ? layer_work(r, hw, true) : LayerWork{};
  const std::vector<LayerRecompute> plan = layer_recompute(l, r.model.layers);
  std::vector<StageWork> stages(size_t(l.pp));
  for (int rank = 0; rank < l.pp; ++rank) {
    StageWork& w = stages[size_t(rank)];
    if (rank == l.pp - 1) w = head_work(r, hw);
    for (int layer : partition.layers_of_rank(rank, l.pp)) {
      const bool is_moe = moe && r.model.moe.is_moe_layer(layer);
      w.add_layer(is_moe ? moe_work : dense, plan[size_t(layer)], is_moe);
    }
  }
  return stages;
}

// The stage that sets the pipeline's pace (the last of equals: it has the output layer).
StageWork slowest_stage(const std::vector<StageWork>& stages) {
  StageWork slowest;
  for (auto it = stages.rbegin(); it != stages.rend(); ++it)
    if (it->total() > slowest.total()) slowest = *it;
  return slowest;
}

// Locally, ranks that wait for a slower stage give their cores to the ranks that compute (they
// sleep while waiting: comm/mpi_communicator.cpp). With R ranks of T threads on C < R·T cores, a
// micro-batch's compute then takes the larger of the slowest stage's own work at the share its
// stage's R/p ranks get alone, and the stages' total work over the cores (the mean stage time at
// the all-ranks-busy share). The factor that scales the slowest stage's compute, at the all-busy
// share, to it; 1 without oversubscription or with equal stages.
double shared_compute_factor(const Hardware& hw, const std::vector<StageWork>& stages, const StageWork& slowest) {
  const LocalHost& host = hw.local;
  const double compute = slowest.compute();
  if (!host.active() || stages.size() < 2 || compute <= 0 || host.share(host.ranks) >= 1) return 1.0;
  double sum = 0, critical = 0;
  const double per_stage = double(host.ranks) / double(stages.size());
  for (const StageWork& w : stages) {
    const double c = w.compute();
    sum += c;
    critical = std::max(critical, c * host.share(host.ranks) / host.share(per_stage));
  }
  return std::max(sum / double(stages.size()), critical) / compute;
}

}  // namespace

namespace {
// Do the measured layer costs describe r's layers: one process (t = 1, c = 1: a CP rank's layer is 1/c of
// it, plus exchanges the bench does not run), a dense model, the same shape, activation dtype, recompute
// mode and attention kernel?
bool costs_fit(const MeasuredLayerCosts& c, const PlanRequest& r) {
  const LayoutConfig& l = r.layout;
  return c.valid() && l.tp == 1 && l.cp == 1 && !r.model.moe.enabled() && c.hidden == r.model.hidden &&
         c.heads == r.model.heads && c.seq_len == r.model.seq_len && c.micro_batch == r.micro_batch &&
         c.vocab == r.model.padded_vocab(1) && c.activation_dtype == to_string(l.activation_dtype) &&
         c.recompute == to_string(l.recompute) && c.attention == to_string(l.attention) &&
         (l.recompute != Recompute::full || l.recompute_layers < 0) && l.recompute_plan.empty();
}
}  // namespace

StageSeconds stage_seconds(const PlanRequest& r, const Hardware& hw) {
  StageSeconds out;
  if (costs_fit(hw.layer_costs, r)) {
    const MeasuredLayerCosts& c = hw.layer_costs;
    out.layer.assign(size_t(r.model.layers), c.forward_s + c.backward_input_s + c.backward_weight_s);
    out.head = c.head_s;
    out.measured = true;
    return out;
  }
  const LayerWork dense = layer_work(r, hw, false);
  const bool moe = r.model.moe.enabled();
  const LayerWork moe_work = moe ? layer_work(r, hw, true) : LayerWork{};
  const LayoutConfig& l = r.layout;
  if (l.recompute == Recompute::full && l.recompute_method == RecomputeMethod::block && l.recompute_layers >= 0 &&
      l.recompute_plan.empty())
    out.block_k = l.recompute_layers;
  const std::vector<LayerRecompute> plan = out.block_k >= 0
                                               ? std::vector<LayerRecompute>(size_t(r.model.layers), LayerRecompute::none)
                                               : layer_recompute(l, r.model.layers);
  for (int layer = 0; layer < r.model.layers; ++layer) {
    const bool is_moe = moe && r.model.moe.is_moe_layer(layer);
    StageWork w;
    w.add_layer(is_moe ? moe_work : dense, plan[size_t(layer)], is_moe);
    out.layer.push_back(w.total());
    if (out.block_k < 0) continue;
    StageWork checkpointed;
    checkpointed.add_layer(is_moe ? moe_work : dense, LayerRecompute::checkpoint, is_moe);
    out.recompute.push_back(checkpointed.total() - w.total());
  }
  out.head = head_work(r, hw).total();
  return out;
}

TimePlan plan_time(const PlanRequest& r, const Hardware& hw) {
  const LayoutConfig& l = r.layout;
  const analysis::ActivationShape x = activation_shape(r);
  const double s = double(x.positions()), b = x.b, h = x.h, t = x.t, v = double(x.v), d = x.d;
  const int p = l.pp, m = l.virtual_stages;
  const double n_mb = r.micro_batches();
  TimePlan out;

  // Ranks vary fastest along TP, then CP, then DP, then PP (docs/design.md §9); the dense gradients are
  // reduced over DP with CP, the N_d·c ranks t apart that hold the same weights.
  const GroupTopology dp_group = group_topology(hw, l.dp_cp(), l.tp);
  const LayerWork work = layer_work(r, hw, false);
  out.tp_algorithm = work.tp_algorithm;

  // One micro-batch through the slowest stage: its layers forward (1x) and backward (2x compute,
  // the same communication), plus the output layer on the last stage (the embedding is a lookup).
  // An MoE layer runs the MoE block (and its all-to-alls, forward and backward). Even stages: the
  // last is the slowest.
  const std::vector<StageWork> stages = stage_works(r, hw, work);
  const StageWork stage = slowest_stage(stages);
  const double shared = shared_compute_factor(hw, stages, stage);
  const double gemm = shared * stage.gemm, elementwise = shared * stage.elementwise, tp_comm = stage.tp_comm,
               ep_comm = stage.ep_comm, cp_comm = stage.cp_comm, recompute = shared * stage.recompute;
  const double weight_pass = shared * stage.weight;
  // Each of the m chunks sends its output forward and receives a gradient back: 1/t of the
  // activation per rank (the scatter-gather optimisation, or the SP shard).
  // Locally, as the engine sends it: fp32, the whole [s, b, h] activation unless SP shards it.
  double pp_comm = 0;
  if (p > 1 && hw.local.active()) {
    pp_comm = 2.0 * m * point_to_point(group_topology(hw, 2, l.tp * l.dp_cp()), s * b * h * 4.0 / (x.sp ? t : 1)).seconds;
  } else if (p > 1) {
    const Link link = group_topology(hw, p, l.tp * l.dp_cp()).flat_link();
    pp_comm = 2.0 * m * (link.alpha + s * b * h * d / t * link.beta);
  }

  const double per_mb = gemm + elementwise + tp_comm + ep_comm + cp_comm + recompute + pp_comm;
  const double slots = double(p - 1) / m;  // idle micro-batch slots of the (interleaved) 1F1B
  out.gemm_s = n_mb * gemm;
  out.elementwise_s = n_mb * elementwise;
  out.tp_comm_s = n_mb * tp_comm;
  out.ep_comm_s = n_mb * ep_comm;
  out.cp_comm_s = n_mb * cp_comm;
  out.recompute_s = n_mb * recompute;
  out.pp_comm_s = n_mb * pp_comm;
  // The ramp: the other stages' work on the first micro-batch's forward and the last one's backward,
  // (p−1)/m of a stage's when they are equal (the others' cores are shared out below).
  std::vector<double> stage_totals;
  for (const StageWork& w : stages) stage_totals.push_back(w.total());
  const double flush_bubble = analysis::pipeline_ramp_seconds(stage_totals, m) + slots * pp_comm;
  out.bubble_s = flush_bubble;
  // Locally, ranks idle in the pipeline's ramp give their cores to the others: about half the ranks
  // compute there, each at the share of the cores that leaves it.
  if (hw.local.active() && p > 1) out.bubble_s *= compute_share(hw) / hw.local.share(std::max(1.0, hw.local.ranks / 2.0));
  out.bubble_fraction = slots / (n_mb + slots);
  // ZB-H1's and 2BW's formulas are for equal stages: their bubbles are scaled, as the ramp is, by the
  // other stages' work over (p−1) slowest stages'.
  const double uneven = p > 1 && per_mb > 0 ? flush_bubble / (slots * per_mb) : 1.0;
  if (r.zero_bubble && p > 1) {
    // ZB-H1 (docs/design.md §6): a third of a micro-batch's stage time is its forward, the weight
    // passes W are the dW GEMMs, the input pass B the rest; the formula module gives the step.
    const analysis::PassTimes t{per_mb / 3, per_mb - per_mb / 3 - weight_pass, weight_pass};
    const double step = analysis::pipeline_step_time(true, p, int(n_mb), t);
    out.bubble_s = (step - n_mb * per_mb) * uneven;
    out.bubble_fraction = analysis::pipeline_bubble_fraction(true, p, int(n_mb), t);
  }
  if (r.pipedream_2bw && p > 1) {
    // PipeDream-2BW (docs/design.md §6.3): a steady step of a long run, no flush; the forward a
    // third of the stage time, as for ZB-H1.
    const analysis::PassTimes t{per_mb / 3, per_mb - per_mb / 3, 0};
    const double step = analysis::pipedream_2bw_steady_step_time(p, int(n_mb), t);
    out.bubble_s = (step - n_mb * per_mb) * uneven;
    out.bubble_fraction = analysis::pipedream_2bw_steady_bubble_fraction(p, int(n_mb), t);
  }

  // Data parallelism and ZeRO (docs/design.md §8), as the engine runs them (analysis::dp_bytes):
  // gradients reduced once per step and parameters gathered back after a sharded update; ZeRO-2
  // reduce-scatters each micro-batch's gradient (no full buffer to accumulate in); ZeRO-3 also
  // gathers parameters for every forward and backward. An MoE model's expert parameters do the same
  // over their expert-data-parallel group (the N_d/e ranks at the same expert-parallel position,
  // stride t·e), the dense ones over the whole data-parallel group.
  // The dense model's collectives go a bucket at a time (each transformer layer, then the embeddings
  // and the final LayerNorm, here one message: engine/model_states.hpp), so each costs what a message
  // of its size costs: a measured table need not be linear (OpenMPI's all-reduce over 2 ranks of the
  // 2-vCPU AMD EPYC: about 4 GB/s up to 24 MiB, 0.4 GB/s from 32 MiB), and the analytic model adds
  // each message's latency. The whole-gradient message is costed for MoE's expert and dense parts.
  const MemoryPlan mem = plan_memory(r);
  const double psi = double(mem.dense_parameters), psi_experts = double(mem.expert_parameters);
  const double w = comm_element_bytes(hw, r.mixed_precision() ? 2 : 4);
  const double bucket_layers =
      r.model.moe.enabled() ? 0 : double(StagePartition::of(l, r.model.layers).layers_of_rank(mem.stage, l.pp).size());
  const double layer_params = double(analysis::layer_shard_parameters(r.model, l.tp));
  auto data_parallel = [&](const GroupTopology& group, double params, double layers) {
    CollectiveCost c;
    if (group.size <= 1 || params <= 0) return c;
    const double rest = params - layers * layer_params;
    auto bucketed = [&](auto collective) {  // collective(bytes) of every bucket
      if (layers <= 0 || rest < 0) return collective(params * w);
      CollectiveCost sum = collective(layer_params * w);
      sum.seconds *= layers;
      if (rest > 0) sum.seconds += collective(rest * w).seconds;
      return sum;
    };
    auto rs = [&](double bytes) { return reduce_scatter(group, bytes); };
    auto ag = [&](double bytes) { return all_gather(group, bytes); };
    if (l.zero == 0) {
      c = bucketed([&](double bytes) { return all_reduce(group, bytes); });
    } else if (l.zero == 1) {
      c = bucketed(rs);
      c.seconds += bucketed(ag).seconds;
    } else if (l.zero == 2) {
      c = bucketed(rs);
      c.seconds = n_mb * c.seconds + bucketed(ag).seconds;
    } else {
      c = bucketed(rs);
      c.seconds = n_mb * (c.seconds + 2 * bucketed(ag).seconds);
    }
    return c;
  };
  const CollectiveCost dp_cost = data_parallel(dp_group, psi, bucket_layers);
  const int expert_dp = l.dp_cp() / l.ep;  // EP folds over DP × CP
  out.expert_dp_comm_s = data_parallel(group_topology(hw, expert_dp, l.tp * l.ep), psi_experts, 0).seconds;
  out.dp_algorithm = dp_cost.algorithm;
  out.dp_comm_s = dp_cost.seconds + out.expert_dp_comm_s;
  if (p > 1) {  // tied embedding gradient summed between first and last stage
    const Link link = group_topology(hw, 2, l.tp * l.dp_cp() * (p - 1)).flat_link();
    out.dp_comm_s += ring_all_reduce(2, link, v / t * h * w);
  }
  // Adam over the owned parameters: read the gradient (fp32 main grads under mixed precision,
  // as Megatron accumulates them), read and write master weights and both moments, write the
  // 16-bit weights, plus the gradient-norm read and the zeroing of the gradient buffer.
  const double owned = l.zero >= 1 ? psi / l.dp_cp() + psi_experts / expert_dp : psi + psi_experts;
  out.optimizer_s = hw.local.active() ? kernel_seconds(hw, "adamw", owned * (r.mixed_precision() ? 38.0 : 36.0))
                                      : owned * (r.mixed_precision() ? 38.0 : 36.0) / hw.memory_bandwidth;
  // Locally under bf16 activations the updated fp32 weights are narrowed to the GEMMs' bf16 copy.
  if (hw.local.active() && r.bf16_compute() && !r.mixed_precision())
    out.optimizer_s += kernel_seconds(hw, "to_bf16", 6.0 * double(mem.shard_parameters));
  // Offloaded moments: 8 bytes a parameter read and 8 written, overlapped with the update (the
  // read-ahead and write-back of optim/offloaded_states.hpp), so the slower of the two counts.
  // Offloaded weight shards move with them (4 bytes each way more), and each bucket's piece is read
  // before its forward and its backward gather, every micro-batch, not overlapped.
  if (r.offload_optimizer || r.offload_params)
    out.optimizer_s = std::max(out.optimizer_s, owned * (r.offload_params ? 24.0 : 16.0) / hw.offload_bandwidth);
  if (r.offload_params) out.offload_s = 2.0 * n_mb * owned * 4.0 / hw.offload_bandwidth;

  out.iteration_s = out.gemm_s + out.elementwise_s + out.recompute_s + out.tp_comm_s + out.ep_comm_s +
                    out.cp_comm_s + out.pp_comm_s + out.bubble_s + out.dp_comm_s + out.optimizer_s + out.offload_s;
  return out;
}

}  // namespace lattice::plan
