#include "analysis/moe_formulas.hpp"

#include <algorithm>
#include <cmath>

#include "core/stage_partition.hpp"

namespace lattice::analysis {

int64_t expert_capacity(const MoEConfig& moe, int64_t T) {
  if (moe.capacity_factor <= 0.0) return 0;
  const int64_t c = int64_t(std::ceil(double(moe.k()) * double(T) * moe.capacity_factor / double(moe.experts) - 1e-9));
  return moe.router == MoERouter::expert_choice ? std::min(std::max<int64_t>(c, 1), T) : std::max<int64_t>(c, 1);
}

int64_t routed_assignments_bound(const MoEConfig& moe, int64_t tokens) {
  const int64_t G = moe.groups, T = tokens / G, C = expert_capacity(moe, T), E = moe.experts;
  if (moe.router == MoERouter::expert_choice) return G * E * C;
  const int64_t per_group = int64_t(moe.k()) * T;
  return G * (C ? std::min(per_group, E * C) : per_group);
}

int64_t cp_rank_assignments(const MoEConfig& moe, int64_t tokens, int cp) {
  return (routed_assignments_bound(moe, tokens) + cp - 1) / cp;
}

MoEKeptBytes moe_mlp_kept_bytes(const MoEKeptShape& m) {
  const int64_t N = m.s * m.b, Nl = m.sp ? m.local_tokens() / m.t : m.local_tokens(), fl = m.ffn_hidden / m.t;
  MoEKeptBytes r{};
  const auto mask = [&](int64_t n) { return m.packed_masks ? (n + 7) / 8 : n; };
  r.replicated = Nl * m.h * 2 * m.d + (m.dropout ? mask(Nl * m.h) : 0);
  r.router = N * m.experts * 4 * (m.noisy_router ? 3 : 1);
  r.dispatch = (2 * m.assignments + 2 * m.experts) * 4;
  r.combine = m.assignments * 4 + m.assignments * m.h * m.d;
  r.experts = m.received * (m.h * m.d + 2 * fl * m.d) + (m.expert_dropout ? mask(m.received * fl) : 0);
  return r;
}

MoEKeptShape moe_kept_shape(const ActivationShape& x, const ModelConfig& model, int64_t assignments,
                            int64_t received) {
  const MoEConfig& moe = model.moe;
  return {x.s, x.b, x.h, x.t, x.sp, x.d, x.dropout, moe.experts, model.ffn_hidden(),
          moe.router == MoERouter::topk, moe.expert_dropout > 0, assignments, received, x.packed_masks, x.cp};
}

int64_t moe_workspace_bytes(const MoEKeptShape& m) {
  const int64_t N = m.s * m.b, A = m.assignments, R = m.received, h = m.h, fl = m.ffn_hidden / m.t, E = m.experts;
  const int64_t rows = std::max(A, R) * h;
  // The buffers sized by the routed rows grow by a copying resize, old and new held at once: twice.
  const int64_t routed = 2 * 4 * rows + 4 * R * fl + 4 * std::max(R * fl, rows) + 4 * A + 2 * std::max(R * h, R * fl) +
                         (m.expert_dropout && m.packed_masks ? R * fl : 0);
  const int64_t widths = E * (m.noisy_router ? 2 : 1);
  // Under CP: the local logits, the gathered ones in rank order, and each assignment's token in the micro-batch.
  const int64_t cp = m.cp > 1 ? 4 * (m.local_tokens() + N) * widths + 4 * A : 0;
  return 4 * N * widths + 2 * routed + 12 * A + cp;
}

int64_t moe_layer_activation_bytes(const ActivationShape& x, const MoEKeptShape& m, bool full, bool selective) {
  if (full) return layer_activation_bytes(x, true, selective);
  // Table 2's MLP half: LN2 input, FC1 input, residual mask (replicated) and GeLU, FC2 inputs.
  const int64_t sbh = x.positions() * x.b * x.h;
  const int64_t shard = x.sp ? x.t : 1;
  const int64_t mlp_replicated = sbh * 2 * x.d / shard + (x.dropout ? mask_bytes(x, sbh / shard) : 0);
  const int64_t mlp_divided = mlp_4h_kept_bytes(x);
  return layer_activation_bytes(x, false, selective) - mlp_replicated - mlp_divided + moe_mlp_kept_bytes(m).total();
}

int64_t moe_expert_params(const ModelConfig& c) {
  const int64_t h = c.hidden, f = c.ffn_hidden();
  return 2 * h * f + f + h;
}

int64_t moe_router_params(const ModelConfig& c) {
  return int64_t(c.hidden) * c.moe.experts * (c.moe.router == MoERouter::topk ? 2 : 1);
}

int64_t moe_rank_parameters(const ModelConfig& c, int tp, int ep) {
  const int64_t h = c.hidden, f = c.ffn_hidden(), E = c.moe.experts, L = c.layers, M = c.moe_layers();
  const int64_t attention = 4 * h * h / tp + 3 * h / tp + h + 4 * h;  // QKV, proj, their biases, two LNs
  const int64_t mlp = 8 * h * h / tp + 4 * h / tp + h;
  const int64_t expert = 2 * h * f / tp + f / tp + h;
  const int64_t outside = int64_t(c.padded_vocab(tp)) / tp * h + int64_t(c.seq_len) * h + 2 * h;
  return outside + L * attention + (L - M) * mlp + M * (E / ep * expert + moe_router_params(c));
}

int64_t active_parameters(const ModelConfig& c) {
  if (!c.moe.enabled()) return c.num_params();
  const int64_t E = c.moe.experts, M = c.moe_layers();
  return c.num_params() - M * (E - c.moe.k()) * moe_expert_params(c);
}

double forward_flops_per_token(const ModelConfig& c) {
  const double h = c.hidden, s = c.seq_len, L = c.layers, v = c.padded_vocab();
  const double attention = 2.0 * 4.0 * h * h + 4.0 * s * h;  // QKV + projection GEMMs, QKᵀ and AV
  const double dense_mlp = 2.0 * 8.0 * h * h;
  double total = L * attention + 2.0 * h * v;  // + the output layer
  if (!c.moe.enabled()) return total + L * dense_mlp;
  const double M = c.moe_layers(), f = c.ffn_hidden();
  const double moe_mlp = double(c.moe.k()) * 2.0 * 2.0 * h * f + 2.0 * double(moe_router_params(c));
  return total + (L - M) * dense_mlp + M * moe_mlp;
}

int64_t all_expert_parameters(const ModelConfig& c) {
  return int64_t(c.moe_layers()) * c.moe.experts * moe_expert_params(c);
}

int first_stage_moe_layers(const ModelConfig& c, const LayoutConfig& layout) {
  int n = 0;
  for (int l : StagePartition::of(layout, c.layers).layers_of_rank(0, layout.pp)) n += c.moe.is_moe_layer(l);
  return n;
}

MoEShardParameters moe_shard_parameters(const ModelConfig& c, const LayoutConfig& layout) {
  const int tp = layout.tp, pp = layout.pp, ep = layout.ep;
  const int64_t h = c.hidden, f = c.ffn_hidden(), t = tp;
  const int64_t attention = 4 * h * h / t + 3 * h / t + h + 4 * h;  // QKV, proj, their biases, two LNs
  const int64_t mlp = 8 * h * h / t + 4 * h / t + h;
  const int64_t expert = 2 * h * f / t + f / t + h;  // FC1 column-, FC2 row-parallel
  const int64_t layers = int64_t(StagePartition::of(layout, c.layers).layers_of_rank(0, pp).size());
  const int64_t moe = c.moe.enabled() ? first_stage_moe_layers(c, layout) : 0;
  MoEShardParameters p;
  p.dense = int64_t(c.padded_vocab(tp)) / t * h + int64_t(c.seq_len) * h + (pp == 1 ? 2 * h : 0);
  p.dense += layers * attention + (layers - moe) * mlp + moe * moe_router_params(c);
  p.experts = moe * (c.moe.experts / ep) * expert;
  return p;
}

ModelStateBytes moe_model_state_bytes(const MoEShardParameters& psi, int dp, int ep, int zero, bool mixed,
                                      int64_t optimizer_state_bytes_per_param, int versions) {
  const ModelStateBytes d = model_state_bytes(psi.dense, dp, zero, mixed, optimizer_state_bytes_per_param, versions);
  const ModelStateBytes e =
      model_state_bytes(psi.experts, dp / ep, zero, mixed, optimizer_state_bytes_per_param, versions);
  return {d.params + e.params, d.grads + e.grads, d.optimizer + e.optimizer};
}

double moe_first_stage_layer_bytes(const ActivationShape& x, const MoEKeptShape& m, const LayoutConfig& layout,
                                   const ModelConfig& c) {
  const int L = c.layers;
  const bool selective = layout.recompute == Recompute::selective;
  const std::vector<int> stage = StagePartition::of(layout, L).layers_of_rank(0, layout.pp);
  double sum = 0;
  if (layout.stage_layers.empty()) {
    for (int l = 0; l < L; ++l) {  // p micro-batches in flight of the stage's L/p layers (eq. 5's L layers)
      const bool full = layer_fully_recomputed(layout, l, L);
      const int layer = stage[size_t(l) % stage.size()];
      sum += double(c.moe.is_moe_layer(layer) ? moe_layer_activation_bytes(x, m, full, selective)
                                              : layer_activation_bytes(x, full, selective));
    }
    if (layout.pp > 1 && layout.virtual_stages > 1)
      sum *= 1.0 + double(layout.pp - 1) / double(layout.pp * layout.virtual_stages);
    return sum;
  }
  for (int layer : stage) {
    const bool full = layer_fully_recomputed(layout, layer, L);
    sum += double(c.moe.is_moe_layer(layer) ? moe_layer_activation_bytes(x, m, full, selective)
                                            : layer_activation_bytes(x, full, selective));
  }
  return sum * stage_in_flight(layout, 0);
}

double moe_all_to_all_bytes(int64_t assignments, int64_t h, int ep, int bytes) {
  if (ep <= 1) return 0.0;
  return double(ep - 1) / double(ep) * double(assignments) * double(h) * bytes;
}

int64_t moe_received_rows_bound(const MoEConfig& moe, int64_t tokens, int ep, int cp) {
  const int64_t all = int64_t(ep) * cp_rank_assignments(moe, tokens, cp);
  const int64_t C = expert_capacity(moe, tokens / moe.groups);
  return C ? std::min(all, int64_t(moe.experts) * moe.groups * C) : all;
}

double moe_cp_gather_bytes(const MoEConfig& moe, int64_t tokens, int cp, int bytes) {
  if (cp <= 1) return 0.0;
  const int64_t widths = int64_t(moe.experts) * (moe.router == MoERouter::topk ? 2 : 1);
  return double(cp - 1) / double(cp) * double(tokens) * double(widths) * bytes;
}

double moe_model_flops(const ModelConfig& c, double B) {
  return 3.0 * B * double(c.seq_len) * forward_flops_per_token(c);
}

double moe_hardware_flops_counted(const ModelConfig& c, double B, Recompute r) {
  const double tokens = B * double(c.seq_len), h = c.hidden, s = c.seq_len;
  double extra = 0;
  if (r == Recompute::full) extra = forward_flops_per_token(c) - 2.0 * h * double(c.padded_vocab());
  if (r == Recompute::selective) extra = double(c.layers) * 4.0 * s * h;
  return moe_model_flops(c, B) + tokens * extra;
}

}  // namespace lattice::analysis
