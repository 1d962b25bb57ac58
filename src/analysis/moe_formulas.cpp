#include "analysis/moe_formulas.hpp"

#include <algorithm>
#include <cmath>

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

MoEKeptBytes moe_mlp_kept_bytes(const MoEKeptShape& m) {
  const int64_t N = m.s * m.b, Nl = m.sp ? N / m.t : N, fl = m.ffn_hidden / m.t;
  MoEKeptBytes r{};
  r.replicated = Nl * m.h * (2 * m.d + (m.dropout ? 1 : 0));
  r.router = N * m.experts * 4 * (m.noisy_router ? 3 : 1);
  r.dispatch = (2 * m.assignments + 2 * m.experts) * 4;
  r.combine = m.assignments * 4 + m.assignments * m.h * m.d;
  r.experts = m.received * (m.h * m.d + 2 * fl * m.d + (m.expert_dropout ? fl : 0));
  return r;
}

int64_t moe_layer_activation_bytes(const ActivationShape& x, const MoEKeptShape& m, bool full, bool selective) {
  if (full) return layer_activation_bytes(x, true, selective);
  // Table 2's MLP half: LN2 input, FC1 input, residual mask (replicated) and GeLU, FC2 inputs (4sbh·d each).
  const int64_t sbh = x.s * x.b * x.h;
  const int64_t mlp_replicated = sbh * (2 * x.d + (x.dropout ? 1 : 0)) / (x.sp ? x.t : 1);
  const int64_t mlp_divided = sbh * 8 * x.d / x.t;
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

}  // namespace lattice::analysis
