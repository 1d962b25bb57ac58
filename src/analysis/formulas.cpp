#include "analysis/formulas.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.hpp"
#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"

namespace lattice::analysis {

namespace {
// The largest product the formulas form before dividing: a layer's sbh terms (at most 66·sbh at
// 4 bytes: 18 replicated, 16 of Q, K, V and the projection input, 32 of the MLP's), its s² terms
// (2d + 1 = 9 bytes an element, before ÷ t and ÷ c), the head's logits (4·s·b·v before ÷ t).
double largest_activation_product(const ActivationShape& x) {
  const double s = double(x.s), b = double(x.b), h = double(x.h), a = double(x.a), v = double(x.v);
  return std::max({66.0 * s * b * h, 9.0 * a * s * s * b, 4.0 * s * b * v});
}
}  // namespace

double kept_activation_bound(const ActivationShape& x, double layers, bool full, bool selective, bool with_head) {
  if (const double largest = largest_activation_product(x); largest >= 0x1p62) return largest;
  return layers * double(layer_activation_bytes(x, full, selective)) +
         (with_head ? double(extra_activation_bytes(x, 1, 1)) : 0.0);
}

void require_countable_activations(const ActivationShape& x) {
  const double largest = largest_activation_product(x);
  if (largest < 0x1p62) return;
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", largest);
  fail(std::string("the activations of a rank would be ") + text +
       " bytes, past the 2^62 a size is counted in: lower --layers, --hidden, --seq-len or --micro-batch");
}

LayerBytes layer_activation_parts(const ActivationShape& x) {
  const int64_t sbh = x.positions() * x.b * x.h;
  const int64_t as2b = x.a * x.s * x.s * x.b / x.cp;  // a/c heads over the whole s under CP
  const int64_t d = x.d;
  const int64_t shard = x.sp ? x.t : 1;  // SP keeps a sequence shard of the replicated part
  LayerBytes r{};
  // Two residual dropout masks of sbh elements (one byte each, or one bit with --pack-masks).
  r.replicated = sbh * 4 * d / shard + (x.dropout ? 2 * mask_bytes(x, sbh / shard) : 0);
  // Q, K, V and the projection input (4sbh·d/t), then the GeLU and FC2 inputs.
  r.tp_divided = sbh * 4 * d / x.t + mlp_4h_kept_bytes(x);
  // softmax output (d, or 8 bits) + mask (1, or 1/8) + dropout output (the same as the softmax
  // output); without dropout the output is the input.
  const int64_t s2 = x.fp8_kept ? fp8_bytes(as2b / x.t, x.s) : as2b * d / x.t;
  r.attention = x.fused_attention ? fused_attention_bytes(x)
                : x.dropout       ? 2 * s2 + mask_bytes(x, as2b / x.t)
                                  : s2;
  return r;
}

int64_t mlp_4h_kept_bytes(const ActivationShape& x) {
  const int64_t n = x.positions() * x.b * 4 * x.h / x.t;  // one [s·b, 4h/t] tensor
  return 2 * (x.fp8_kept ? fp8_bytes(n, 4 * x.h / x.t) : n * x.d);
}

int64_t layer_activation_bytes(const ActivationShape& x, bool full, bool selective) {
  if (full) return x.positions() * x.b * x.h * x.d / (x.sp ? x.t : 1);  // the layer input only
  const LayerBytes p = layer_activation_parts(x);
  return p.replicated + p.tp_divided + (selective && !x.fused_attention ? 0 : p.attention);
}

int64_t fused_attention_bytes(const ActivationShape& x) { return 4 * x.a * x.positions() * x.b / x.t; }

int64_t extra_activation_bytes(const ActivationShape& x, int pp, int in_flight) {
  const int64_t sbh = x.positions() * x.b * x.h;
  const int64_t shard = x.sp ? x.t : 1;
  int64_t bytes = x.dropout ? mask_bytes(x, sbh / shard) * in_flight : 0;  // embedding dropout masks
  if (pp == 1) {
    bytes += 2 * sbh * x.d / shard;                // final LN input, output-projection input
    // The head's: fp32 probabilities (vocabulary-parallel), 4sbv/t as the paper counts them; under bf16
    // activations the bf16 logits and each row's maximum and sum, 2sbv/t + 8sb (the probabilities made
    // again in backward; docs/design.md §4).
    bytes += x.d == 2 ? 2 * x.positions() * x.b * x.v / x.t + 8 * x.positions() * x.b
                      : 4 * x.positions() * x.b * x.v / x.t;
    if (x.cp > 1) bytes += 4 * x.positions() * x.b;  // the targets of this rank's positions (int32)
  }
  return bytes;
}

bool layer_fully_recomputed(const LayoutConfig& layout, int layer, int layers) {
  if (!layout.recompute_plan.empty()) return forward_recomputed(layout.recompute_plan[size_t(layer)]);
  if (layout.recompute != Recompute::full) return false;
  if (layout.recompute_method == RecomputeMethod::uniform) return true;  // every layer is in a segment
  if (layout.recompute_layers < 0) return true;
  // Block: the first k layers of each stage (core/recompute_plan.hpp).
  const StagePartition stages = StagePartition::of(layout, layers);
  int s = 0;
  while (stages.end(s) <= layer) ++s;
  return layer - stages.begin(s) < layout.recompute_layers;
}

int64_t layer_norm_stats_bytes(const ActivationShape& x) { return 16 * x.positions() * x.b / (x.sp ? x.t : 1); }

int64_t layer_kept_bytes(const ActivationShape& x, LayerRecompute mode) {
  switch (mode) {
    case LayerRecompute::none: return layer_activation_bytes(x, false, false) + layer_norm_stats_bytes(x);
    case LayerRecompute::selective: return layer_activation_bytes(x, false, true) + layer_norm_stats_bytes(x);
    case LayerRecompute::checkpoint: return layer_activation_bytes(x, true, false);
    case LayerRecompute::in_segment: return 0;
  }
  return 0;
}

int64_t layer_live_bytes(const ActivationShape& x, LayerRecompute mode) {
  if (mode != LayerRecompute::selective) return layer_kept_bytes(x, LayerRecompute::none);
  ActivationShape full_precision = x;  // the re-made s² tensors are never 8 bits
  full_precision.fp8_kept = false;
  const int64_t remade = x.fused_attention ? 0 : layer_activation_parts(full_precision).attention;
  return layer_kept_bytes(x, LayerRecompute::selective) + remade;
}

double layer_recompute_flops(const ActivationShape& x, LayerRecompute mode) {
  const double sb = double(x.positions()) * double(x.b), h = double(x.h), t = x.t;
  const double attention = 4.0 * sb * double(x.s) * h / t;
  if (forward_recomputed(mode)) return 24.0 * sb * h * h / t + attention;
  return mode == LayerRecompute::selective && !x.fused_attention ? attention : 0.0;
}

double uniform_segment_peak(int n, double I, double A, int k) { return double(n / k - 1) * I + double(k) * A; }

SegmentLength best_segment_length(int n, double I, double A) {
  SegmentLength out;
  out.real = std::sqrt(double(n) * I / A);
  for (int k = 1; k <= n; ++k)
    if (n % k == 0 && uniform_segment_peak(n, I, A, k) < uniform_segment_peak(n, I, A, out.best)) out.best = k;
  return out;
}

int64_t layer_weight_pending_bytes(const ActivationShape& x) {
  const int64_t N = x.positions() * x.b, h = x.h, hl = x.h / x.t;
  const int64_t fc2_in = x.fp8_kept ? fp8_bytes(N * 4 * hl, 4 * hl) : N * 4 * hl * x.d;
  return x.d * N * (4 * h + 8 * hl) + fc2_in;
}

int64_t layer_weight_pending_small_bytes(const ActivationShape& x, int64_t threads) {
  const int64_t h = x.h, hl = x.h / x.t;
  return 4 * (2 * h + 7 * hl) + 2 * threads * 2 * h * 4;
}

InputPassBytes layer_input_pass_bytes(const ActivationShape& x, int64_t threads) {
  const int64_t N = x.positions() * x.b, shard = x.sp ? x.t : 1, N_l = N / shard, h = x.h, hl = x.h / x.t, d = x.d;
  const int64_t mask = x.dropout ? mask_bytes(x, N_l * h) : 0, partials = threads * 2 * h * 4;
  const int64_t regather = x.sp && x.t > 1 ? N * h * d - N_l * h * d : 0;  // SP: a whole-sequence copy for a shard
  const int64_t ln = N_l * h * d + 2 * N_l * 4;                            // a LayerNorm's input and statistics
  const int64_t proj_in_copy = x.fused_attention ? N * hl * d : 0;         // read again by the fused backward
  int64_t held = 0, most = 0;
  auto step = [&](int64_t bytes) { held += bytes, most = std::max(most, held); };
  step(-mask);                                      // the MLP branch's residual mask, read
  step(N * h * d + 4 * h);                          // FC2: its output gradient and bias sums (its input moves)
  step(-(mlp_4h_kept_bytes(x) / 2));                // the GeLU input, read
  step(regather + N * 4 * hl * d + 4 * 4 * hl);     // FC1: its input (re-gathered under SP), output gradient, sums
  step(partials - ln);                              // LN2: partial sums kept, its input and statistics freed
  step(-mask);                                      // the attention branch's residual mask
  step(N * h * d + 4 * h + proj_in_copy);           // projection: output gradient, sums (its input moves or is copied)
  const LayerBytes parts = layer_activation_parts(x);
  step(-(3 * N * hl * d + parts.attention + proj_in_copy));  // the attention's kept tensors, read
  step(regather + N * 3 * hl * d + 4 * 3 * hl);     // QKV: its input, output gradient, sums
  step(partials - ln);                              // LN1
  return {most, held};
}

namespace {
// Table 2's row for a layer in this mode (a segment's inner layer keeps nothing).
int64_t table2_bytes(const ActivationShape& x, LayerRecompute mode) {
  if (mode == LayerRecompute::in_segment) return 0;
  return layer_activation_bytes(x, mode == LayerRecompute::checkpoint, mode == LayerRecompute::selective);
}
}  // namespace

double stage_in_flight(const LayoutConfig& layout, int rank) {
  const int p = layout.pp, m = layout.virtual_stages;
  if (p == 1) return 1;
  if (m == 1) return p - rank;
  return double(2 * (p - rank - 1) + (m - 1) * p + 1) / m;
}

double stage_layer_bytes(const ActivationShape& x, const LayoutConfig& layout, int layers, int rank) {
  double sum = 0;
  const std::vector<LayerRecompute> modes = layer_recompute(layout, layers);
  for (int l : StagePartition::of(layout, layers).layers_of_rank(rank, layout.pp))
    sum += double(table2_bytes(x, modes[size_t(l)]));
  return sum * stage_in_flight(layout, rank);
}

double first_stage_layer_bytes(const ActivationShape& x, const LayoutConfig& layout, int layers) {
  if (!layout.stage_layers.empty()) return stage_layer_bytes(x, layout, layers, 0);
  double sum = 0;
  const std::vector<LayerRecompute> modes = layer_recompute(layout, layers);
  for (int l = 0; l < layers; ++l) sum += double(table2_bytes(x, modes[size_t(l)]));
  if (layout.pp > 1 && layout.virtual_stages > 1)
    sum *= 1.0 + double(layout.pp - 1) / double(layout.pp * layout.virtual_stages);
  return sum;
}

double pipeline_step_time(bool zero_bubble, int p, int n_mb, PassTimes t) {
  const double n = n_mb, slots = p - 1;
  if (!zero_bubble) return (n + slots) * (t.f + t.b + t.w);
  if (n_mb < p) return (n + slots) * (t.f + t.b) + t.w;
  return n * (t.f + t.b + t.w) + slots * (t.f + t.b - t.w);
}

double pipeline_bubble_fraction(bool zero_bubble, int p, int n_mb, PassTimes t) {
  return 1.0 - n_mb * (t.f + t.b + t.w) / pipeline_step_time(zero_bubble, p, n_mb, t);
}

double pipedream_2bw_steady_step_time(int p, int n_mb, PassTimes t) {
  return n_mb * (t.f + t.b + t.w) + (p - 1) * t.f;
}

double pipedream_2bw_steady_bubble_fraction(int p, int n_mb, PassTimes t) {
  return (p - 1) * t.f / pipedream_2bw_steady_step_time(p, n_mb, t);
}

double pipedream_2bw_time(int p, int n_mb, PassTimes t, int steps) {
  return steps * pipedream_2bw_steady_step_time(p, n_mb, t) + (p - 1) * (t.b + t.w);
}

double pipedream_2bw_bubble_fraction(int p, int n_mb, PassTimes t, int steps) {
  return 1.0 - steps * n_mb * (t.f + t.b + t.w) / pipedream_2bw_time(p, n_mb, t, steps);
}

double pipeline_ramp_seconds(const std::vector<double>& stage_seconds, int m) {
  double sum = 0, slowest = 0;
  for (double c : stage_seconds) sum += c, slowest = std::max(slowest, c);
  return (sum - slowest) / std::max(1, m);
}

double pipeline_bubble_fraction(int p, int n_mb, int m) {
  return double(p - 1) / (double(m) * n_mb + (p - 1));
}

ModelStateBytes model_state_bytes(int64_t psi, int dp, int zero, bool mixed,
                                  int64_t optimizer_state_bytes_per_param, int versions) {
  const int64_t w = mixed ? 2 : 4;                                   // weights and grads
  const int64_t opt = optimizer_state_bytes_per_param + (mixed ? 4 : 0);  // + fp32 master copy
  auto shard = [dp](int64_t bytes) { return (bytes + dp - 1) / dp; };
  ModelStateBytes m{w * psi, w * psi, opt * psi};
  if (zero >= 1) m.optimizer = shard(opt * psi);
  if (zero >= 2) m.grads = shard(w * psi);
  if (zero >= 3) m.params = shard(w * psi);
  m.params *= versions, m.grads *= versions;
  return m;
}

int64_t layer_shard_parameters(const ModelConfig& model, int tp) {
  const int64_t h = model.hidden, t = tp;
  // QKV (3h) and FC1 (4h) are column-parallel with their biases; proj and FC2 biases (2h) and
  // the two LayerNorms (4h) are replicated on every tensor rank.
  return 12 * h * h / t + 7 * h / t + 6 * h;
}

int64_t stage_parameters(const ModelConfig& model, int tp, int pp, int stage, int stage_layers) {
  const int64_t h = model.hidden;
  int64_t n = int64_t(stage_layers) * layer_shard_parameters(model, tp);
  const int64_t wte = int64_t(model.padded_vocab(tp)) / tp * h;
  if (stage == 0) n += wte + int64_t(model.seq_len) * h;
  if (stage == pp - 1) n += 2 * h + (pp > 1 ? wte : 0);  // final LayerNorm; the tied embedding again
  return n;
}

int64_t shard_parameters(const ModelConfig& model, int tp, int pp) {
  return stage_parameters(model, tp, pp, 0, model.layers / pp);
}

double model_flops(const FlopsShape& f) {
  return 72.0 * f.B * f.s * f.L * f.h * f.h * (1.0 + f.s / (6.0 * f.h) + f.v / (12.0 * f.h * f.L));
}

static double full_layer_forward(const FlopsShape& f) {
  return 24.0 * f.B * f.s * f.L * f.h * f.h * (1.0 + f.s / (6.0 * f.h));
}

double hardware_flops_counted(const FlopsShape& f, Recompute r) {
  const double m = model_flops(f);
  if (r == Recompute::full) return m + full_layer_forward(f);
  if (r == Recompute::selective) return m + 4.0 * f.B * f.s * f.s * f.h * f.L;
  return m;
}

double fused_attention_recompute_flops_per_layer(double b, double s, double h) { return 2.0 * b * s * s * h; }
double fused_attention_recompute_flops(const FlopsShape& f) {
  return fused_attention_recompute_flops_per_layer(f.B, f.s, f.h) * f.L;
}

double hardware_flops_paper(const FlopsShape& f, Recompute r) {
  if (r == Recompute::selective)
    return 72.0 * f.B * f.s * f.L * f.h * f.h * (1.0 + f.s / (3.0 * f.h) + f.v / (12.0 * f.h * f.L));
  return hardware_flops_counted(f, r);
}

double tp_conjugate_bytes(int64_t s, int64_t b, int64_t h, int t, const StageTraffic& stage, const StepPasses& passes,
                          int bytes) {
  if (t <= 1) return 0.0;
  const double unit = 2.0 * double(t - 1) / double(t) * double(s * b * h) * bytes;  // one all-reduce
  // The ends' units by direction: all in forward (embedding) or backward (head), or half each under SP.
  const double ends = (stage.embedding ? 1.0 : 0.0) + (stage.head ? 1.0 : 0.0);
  const double ends_forward = stage.sequence_parallel ? 0.5 * ends : (stage.embedding ? 1.0 : 0.0);
  const double forward = 2.0 * stage.layers + ends_forward;
  const double backward = 2.0 * stage.layers + 2.0 * stage.reruns + (ends - ends_forward);
  return unit * (double(passes.forwards) * forward + double(passes.backwards) * backward);
}

double cp_all_to_all_sent_bytes(int64_t s, int64_t b, int64_t h, int t, int c, int bytes) {
  if (c <= 1) return 0.0;
  return double(c - 1) / double(c) * double(s / c * b * h / t) * bytes;
}

double cp_ring_pair_bytes(int64_t s, int64_t b, int64_t h, int t, int c, int bytes) {
  if (c <= 1) return 0.0;
  return 2.0 * double(s / c * b * h / t) * bytes;
}

double cp_bytes(CpComm comm, int64_t s, int64_t b, int64_t h, int t, int c, bool fused_attention,
                const StageTraffic& stage, const StepPasses& passes, int bytes) {
  const double f = double(passes.forwards), bw = double(passes.backwards);
  if (comm == CpComm::p2p)  // pairs passed on
    return (f * stage.layers * (c - 1.0) + bw * (stage.layers * (2.0 * c - 1.0) + stage.reruns * (c - 1.0))) *
           cp_ring_pair_bytes(s, b, h, t, c, bytes);
  const double exchanges = f * stage.layers * kCpAllToAllsForward +
                           bw * (stage.layers * cp_all_to_alls_backward(fused_attention) +
                                 double(stage.reruns) * kCpAllToAllsForward);
  return exchanges * cp_all_to_all_sent_bytes(s, b, h, t, c, bytes);
}

double dp_bytes(int64_t psi, int dp, int zero, const StepPasses& passes, int64_t extra_gathered, int64_t extra_reduced,
                int bytes) {
  if (dp <= 1) return 0.0;
  const double ring = double(dp - 1) / double(dp) * bytes;
  if (zero <= 1) return 2.0 * ring * double(psi) * double(passes.updates);
  const double reduced = double(passes.backwards) * double(psi + extra_reduced);
  if (zero == 2) return ring * (reduced + double(passes.updates) * double(psi));
  // The extra gathers' count is the forwards': equal to the backwards' in every step ZeRO-3 shards
  // (PipeDream-2BW, whose first and last steps differ, is refused with ZeRO-3 over more than one rank).
  return ring * (reduced + double(passes.forwards + passes.backwards) * double(psi) +
                 double(passes.forwards) * double(extra_gathered));
}

double forward_workspace_bytes(double s, double b, double h, double a_local, double v_local) {
  return 4.0 * (s * b * (12 * h + 2 * v_local) + 3 * a_local * s * s * b);
}

}  // namespace lattice::analysis
