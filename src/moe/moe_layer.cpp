// The MoE block (moe_layer.hpp): forward and backward, and the all-to-all dispatch they share.
#include "moe/moe_layer.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/dropout.hpp"
#include "kernels/gelu.hpp"
#include "kernels/linear.hpp"
#include "moe/cp_routing.hpp"

namespace lattice::moe {

void MoEStats::add_load(int layer, const std::vector<int64_t>& per_expert) {
  if (int(load.size()) <= layer) load.resize(size_t(layer) + 1);
  auto& l = load[size_t(layer)];
  if (l.size() < per_expert.size()) l.resize(per_expert.size(), 0);
  for (size_t e = 0; e < per_expert.size(); ++e) l[e] += per_expert[e];
}

namespace {

template <class Vector>
auto* grow(Vector& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// An expert's rows vary every step; GEMM primitives are cached per shape, so rows go in
// power-of-two chunks (at most ~log2 shapes per weight) instead of one shape per count.
template <class F>
void for_row_chunks(int64_t rows, F&& fn) {
  int64_t row0 = 0;
  while (row0 < rows) {
    int64_t chunk = 1;
    while (chunk * 2 <= rows - row0) chunk *= 2;
    fn(row0, chunk);
    row0 += chunk;
  }
}

// fn(local expert j, first row, rows) for each chunk of each local expert's rows, which sit
// expert-major one after another.
template <class F>
void for_expert_chunks(const std::vector<int64_t>& rows_of_expert, F&& fn) {
  int64_t row0 = 0;
  for (size_t j = 0; j < rows_of_expert.size(); ++j) {
    for_row_chunks(rows_of_expert[j], [&](int64_t r0, int64_t m) { fn(j, row0 + r0, m); });
    row0 += rows_of_expert[j];
  }
}

// Rows [row0, …) of a kept [rows, width] tensor as a GEMM operand in its storage dtype.
GemmOperand rows_of(const Stored& t, int64_t row0, int64_t width) {
  const auto* base = static_cast<const char*>(t.data());
  return {base + row0 * width * bytes_of(t.dtype()), t.dtype()};
}

// The counts a dispatch keeps: rows sent to each global expert, rows received from each source
// for each local expert ([source][local expert]).
struct Counts {
  const int32_t* send;
  const int32_t* recv;
};
Counts counts_of(const MoEKept& k, int64_t A, int E) {
  const auto* d = static_cast<const int32_t*>(k.dispatch.data());
  return {d + 2 * A, d + 2 * A + E};
}

// Rows each local expert received, over every source.
std::vector<int64_t> expert_rows(Counts n, int sources, int local_experts) {
  std::vector<int64_t> rows(size_t(local_experts), 0);
  for (int s = 0; s < sources; ++s)
    for (int j = 0; j < local_experts; ++j) rows[size_t(j)] += n.recv[s * local_experts + j];
  return rows;
}

// out [N, h] = Σ_a weight_a · rows[a] into row token[a] (weight 1 when null). Threads split the
// columns, so rows of one token never race and the sum order is the assignments' (deterministic).
void scatter_add_rows(float* out, int64_t N, int64_t h, const int32_t* token, const float* weight,
                      const float* rows, int64_t A) {
  std::fill(out, out + N * h, 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t col = 0; col < h; col += 64)
    for (int64_t a = 0; a < A; ++a) {
      float* o = out + int64_t(token[a]) * h;
      const float w = weight ? weight[a] : 1.0f;
      for (int64_t i = col; i < std::min(col + 64, h); ++i) o[i] += w * rows[a * h + i];
    }
}

int ep_size(const MoEContext& c) { return c.ep ? c.ep->size() : 1; }

// Moves rows between the routing ranks and the experts' ranks. `to_experts`: from assignment order
// (expert-major, so rank-major) to expert-major rows on the experts' rank; otherwise back.
void exchange(const MoEContext& c, Counts n, const float* in, float* out, int64_t width, bool to_experts,
              tracked_vector<float, MemoryCategory::workspaces>& scratch) {
  const int e = ep_size(c), L = c.local_experts;
  int64_t total_in = 0, total_out = 0;
  std::vector<int> sent(static_cast<size_t>(e), 0), received(size_t(e), 0);
  for (int r = 0; r < e; ++r)
    for (int j = 0; j < L; ++j) {
      sent[size_t(r)] += int(n.send[r * L + j] * width);
      received[size_t(r)] += int(n.recv[r * L + j] * width);
    }
  for (int r = 0; r < e; ++r) total_in += sent[size_t(r)], total_out += received[size_t(r)];
  if (!to_experts) std::swap(sent, received), std::swap(total_in, total_out);
  if (!c.ep || e == 1) {
    std::copy(in, in + total_in, out);
    return;
  }
  // Received rows are source-major ([source][local expert]); experts read them expert-major.
  float* staged = grow(scratch, std::max(total_in, total_out));
  auto reorder = [&](const float* src, float* dst, bool source_major_to_expert_major) {
    int64_t at_source = 0;
    std::vector<int64_t> source_offset(static_cast<size_t>(e) * L), expert_offset(size_t(e) * L);
    for (int s = 0; s < e; ++s)
      for (int j = 0; j < L; ++j) source_offset[size_t(s * L + j)] = at_source, at_source += n.recv[s * L + j] * width;
    int64_t at_expert = 0;
    for (int j = 0; j < L; ++j)
      for (int s = 0; s < e; ++s) expert_offset[size_t(s * L + j)] = at_expert, at_expert += n.recv[s * L + j] * width;
    for (size_t b = 0; b < source_offset.size(); ++b) {
      const int64_t len = n.recv[b] * width;
      if (source_major_to_expert_major) std::copy(src + source_offset[b], src + source_offset[b] + len, dst + expert_offset[b]);
      else std::copy(src + expert_offset[b], src + expert_offset[b] + len, dst + source_offset[b]);
    }
  };
  if (to_experts) {
    c.ep->all_to_all_v({in, size_t(total_in)}, sent, {staged, size_t(total_out)}, received);
    reorder(staged, out, true);
  } else {
    reorder(in, staged, false);
    c.ep->all_to_all_v({staged, size_t(total_in)}, sent, {out, size_t(total_out)}, received);
  }
}

}  // namespace

void moe_forward(float* out, const float* x, MoEKept& kept, const MoEWeights& w, const MoEContext& c,
                 MoEWorkspace& ws) {
  const RouterSpec& spec = c.route;
  const int64_t N = spec.tokens, h = c.h, fl = c.ffn_local;
  const int E = spec.experts, e = ep_size(c), L = c.local_experts, layer = c.layer;
  const bool noisy = spec.kind == MoERouter::topk, cp = c.cp.active();
  const LocalTokens mine{c.cp.split(spec.seq), N / spec.seq};
  const int64_t Nl = cp ? mine.count() : N;  // the rows of x, out

  // Router (fp32 whatever the activation dtype: Switch's selective precision). Under CP each rank's
  // logits are gathered into the micro-batch's, which every CP rank routes alike.
  GemmShape gs;
  gs.M = Nl, gs.N = E, gs.K = h;
  float* logits = grow(ws.logits, N * E);
  float* noise = noisy ? grow(ws.noise, N * E) : nullptr;
  float* local = cp ? grow(ws.cp_local, Nl * E * (noisy ? 2 : 1)) : logits;
  gemm(gs, f32_operand(x), f32_operand(w.router), local);
  if (noisy) gemm(gs, f32_operand(x), f32_operand(w.router_noise), cp ? local + Nl * E : noise);
  if (cp) {
    float* const full[2] = {logits, noise};
    gather_tokens(c.cp, mine, local, noisy ? 2 : 1, E, full, ws.cp_gathered);
  }
  kept.router_probs = TrackedBuffer(size_t(N * E) * 4, layer, "router_probs");
  auto* probs = static_cast<float*>(kept.router_probs.data());
  Routing r = route_forward(spec, logits, noise, probs);
  if (noisy) {
    kept.router_logits = TrackedBuffer(size_t(N * E) * 4, layer, "router_logits");
    kept.router_noise_logits = TrackedBuffer(size_t(N * E) * 4, layer, "router_noise_logits");
    std::memcpy(kept.router_logits.data(), logits, size_t(N * E) * 4);
    std::memcpy(kept.router_noise_logits.data(), noise, size_t(N * E) * 4);
  }
  // The micro-batch's statistics, counted once over the CP ranks that all routed it.
  if (c.stats && c.cp.rank() == 0) {
    c.stats->aux_loss_tokens += c.aux_coeff * r.aux_loss * double(N);
    c.stats->offered += r.offered, c.stats->dropped += r.dropped;
    c.stats->add_load(layer, r.load);
  }
  if (cp) keep_local(r, mine);
  const int64_t A = r.size();
  kept.assignments = A;
  kept.dispatch = TrackedBuffer(size_t(2 * A + 2 * E) * 4, layer, "dispatch_indices");
  auto* d = static_cast<int32_t*>(kept.dispatch.data());
  std::copy(r.token.begin(), r.token.end(), d);
  std::copy(r.expert.begin(), r.expert.end(), d + A);
  for (int i = 0; i < E; ++i) d[2 * A + i] = int32_t(r.load[size_t(i)]);
  int32_t* recv = d + 2 * A + E;  // [source][local expert]
  if (c.ep && e > 1) {
    std::vector<float> send_f(static_cast<size_t>(E)), recv_f(static_cast<size_t>(E));
    for (int i = 0; i < E; ++i) send_f[size_t(i)] = float(r.load[size_t(i)]);  // exact below 2^24
    c.ep->all_to_all(send_f, recv_f);
    for (int i = 0; i < E; ++i) recv[i] = int32_t(recv_f[size_t(i)]);
  } else {
    std::copy(d + 2 * A, d + 2 * A + E, recv);
  }
  kept.combine_weights = TrackedBuffer(size_t(A) * 4, layer, "combine_weights");
  std::copy(r.gate.begin(), r.gate.end(), static_cast<float*>(kept.combine_weights.data()));
  const Counts n = counts_of(kept, A, E);
  const std::vector<int64_t> rows_of_expert = expert_rows(n, e, L);
  const int64_t R = std::accumulate(rows_of_expert.begin(), rows_of_expert.end(), int64_t(0));
  kept.received = R;

  // Dispatch: the assigned tokens' rows, in assignment order, to their experts.
  float* rows = grow(ws.rows, std::max(A, R) * h);
  for (int64_t a = 0; a < A; ++a) std::copy(x + int64_t(r.token[size_t(a)]) * h, x + (r.token[size_t(a)] + 1) * h, rows + a * h);
  float* expert_rows = grow(ws.rows2, std::max(A, R) * h);
  exchange(c, n, rows, expert_rows, h, true, ws.hidden2);
  std::vector<uint64_t> row_token;  // global token of each received row (for expert dropout's mask)
  if (c.expert_dropout > 0.0f) {
    std::vector<float> ids(static_cast<size_t>(2 * A)), got(static_cast<size_t>(2 * R));
    for (int64_t a = 0; a < A; ++a) {
      const uint64_t g = spec.global_token(cp ? mine.full(r.token[size_t(a)]) : r.token[size_t(a)]);
      std::memcpy(&ids[size_t(2 * a)], &g, 8);
    }
    exchange(c, n, ids.data(), got.data(), 2, true, ws.hidden2);
    row_token.resize(size_t(R));
    for (int64_t i = 0; i < R; ++i) std::memcpy(&row_token[size_t(i)], &got[size_t(2 * i)], 8);
  }

  // Experts: FC1 → GeLU (→ dropout) → FC2 on each expert's rows.
  kept.expert_fc1_in = Stored(R * h, c.dtype, layer, "expert_fc1_input");
  kept.expert_fc1_in.store(expert_rows);
  kept.expert_gelu_in = Stored(R * fl, c.dtype, layer, "expert_gelu_input");
  kept.expert_fc2_in = Stored(R * fl, c.dtype, layer, "expert_fc2_input");
  float* pre = grow(ws.hidden, R * fl);
  for_expert_chunks(rows_of_expert, [&](size_t j, int64_t at, int64_t m) {
    linear_forward(pre + at * fl, rows_of(kept.expert_fc1_in, at, h), w.experts[j].fc1, w.experts[j].fc1_b, m, h, fl);
  });
  kept.expert_gelu_in.store(pre);
  float* act = grow(ws.hidden2, R * fl);
  gelu_forward(act, pre, R * fl);
  if (c.expert_dropout > 0.0f) {
    uint8_t* mask = kept.expert_mask.begin(R * fl, c.pack_masks, layer, "expert_dropout_mask",
                                           c.pack_masks ? grow(ws.mask_bytes, R * fl) : nullptr);
    DropoutStream st = spec.stream;
    st.site = DropoutSite::expert_dropout;
    int64_t row0 = 0;
    for (int j = 0; j < L; ++j) {
      const uint64_t expert = uint64_t(c.expert0 + j);
      for (int64_t i = row0; i < row0 + rows_of_expert[size_t(j)]; ++i) {
        const uint64_t first = (row_token[size_t(i)] * uint64_t(E) + expert) * uint64_t(c.ffn_total) +
                               uint64_t(c.tp_rank) * uint64_t(fl);
        dropout_mask_fill(mask + i * fl, st, first, fl, c.expert_dropout);
      }
      row0 += rows_of_expert[size_t(j)];
    }
    dropout_forward(act, act, mask, R * fl, c.expert_dropout);
    kept.expert_mask.finish();
  }
  kept.expert_fc2_in.store(act);
  float* y = expert_rows;  // its fp32 input is spent
  for_expert_chunks(rows_of_expert, [&](size_t j, int64_t at, int64_t m) {
    // The second bias once over the TP group: outputs are partial sums until the caller reduces them.
    const float* bias = c.tp_rank == 0 ? w.experts[j].fc2_b : nullptr;
    linear_forward(y + at * h, rows_of(kept.expert_fc2_in, at, fl), w.experts[j].fc2, bias, m, fl, h);
  });

  // Return and combine: out[token] = Σ gate · expert output.
  exchange(c, n, y, rows, h, false, ws.hidden);
  kept.combine_input = Stored(A * h, c.dtype, layer, "combine_input");
  kept.combine_input.store(rows);
  scatter_add_rows(out, Nl, h, r.token.data(), static_cast<const float*>(kept.combine_weights.data()), rows, A);
}

void moe_backward(float* dx, const float* dout, const float* x, const MoEKept& kept, const MoEWeights& w,
                  const MoEGrads& g, const MoEContext& c, double aux_weight, MoEWorkspace& ws) {
  const RouterSpec& spec = c.route;
  const int64_t N = spec.tokens, h = c.h, fl = c.ffn_local, A = kept.assignments, R = kept.received;
  const int E = spec.experts, e = ep_size(c), L = c.local_experts;
  const bool cp = c.cp.active();
  const LocalTokens mine{c.cp.split(spec.seq), N / spec.seq};
  const int64_t Nl = cp ? mine.count() : N;
  const auto* token = static_cast<const int32_t*>(kept.dispatch.data());
  const int32_t* expert = token + A;
  const float* gate = static_cast<const float*>(kept.combine_weights.data());
  const Counts n = counts_of(kept, A, E);
  const std::vector<int64_t> rows_of_expert = expert_rows(n, e, L);

  // Combine: dgate_a = ⟨dout[token_a], y_a⟩ (y_a partial under TP: summed), dy_a = gate_a · dout[token_a].
  float* rows = grow(ws.rows, std::max(A, R) * h);
  const float* y = kept.combine_input.load(rows);
  float* dgate = grow(ws.dgate, A);
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < A; ++a) {
    const float* d = dout + int64_t(token[a]) * h;
    double dot = 0;
    for (int64_t i = 0; i < h; ++i) dot += double(d[i]) * y[a * h + i];
    dgate[a] = float(dot);
  }
  if (c.tp && c.tp->size() > 1) c.tp->all_reduce({dgate, size_t(A)});
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < A; ++a) {
    const float* d = dout + int64_t(token[a]) * h;
    for (int64_t i = 0; i < h; ++i) rows[a * h + i] = gate[a] * d[i];
  }
  float* dy = grow(ws.rows2, std::max(A, R) * h);
  exchange(c, n, rows, dy, h, true, ws.hidden2);

  // Experts backward: FC2, dropout, GeLU, FC1; the rows' input gradients go to `rows`.
  float* dhidden = grow(ws.hidden, R * fl);
  uint16_t* half = grow(ws.half, std::max(R * h, R * fl));
  for_expert_chunks(rows_of_expert, [&](size_t j, int64_t at, int64_t m) {
    const ExpertGrads& eg = g.experts[j];
    linear_backward(dhidden + at * fl, eg.fc2_w, eg.fc2_b, dy + at * h, as_operand(dy + at * h, m * h, c.dtype, half + at * h),
                    rows_of(kept.expert_fc2_in, at, fl), w.experts[j].fc2, m, fl, h);
  });
  if (c.expert_dropout > 0.0f)
    dropout_backward(dhidden, dhidden, kept.expert_mask.unpacked(c.pack_masks ? grow(ws.mask_bytes, R * fl) : nullptr),
                     R * fl, c.expert_dropout);
  float* widen = grow(ws.hidden2, R * fl);
  gelu_backward(dhidden, kept.expert_gelu_in.load(widen), dhidden, R * fl);
  for_expert_chunks(rows_of_expert, [&](size_t j, int64_t at, int64_t m) {
    const ExpertGrads& eg = g.experts[j];
    linear_backward(rows + at * h, eg.fc1_w, eg.fc1_b, dhidden + at * fl,
                    as_operand(dhidden + at * fl, m * fl, c.dtype, half + at * fl), rows_of(kept.expert_fc1_in, at, h),
                    w.experts[j].fc1, m, h, fl);
  });
  float* drows = dy;  // spent
  exchange(c, n, rows, drows, h, false, ws.hidden2);
  scatter_add_rows(dx, Nl, h, token, nullptr, drows, A);

  // Router backward: its logits' gradient; dW_g += xᵀ·dlogits; dx += dlogits·W_gᵀ once over TP.
  // Under CP the routers' backward runs on the micro-batch (this rank's gates, everyone's statistics)
  // and this rank keeps its rows.
  const int32_t* routed = token;
  if (cp) {
    int32_t* full = grow(ws.cp_tokens, A);
    for (int64_t a = 0; a < A; ++a) full[a] = int32_t(mine.full(token[a]));
    routed = full;
  }
  float* dlogits = grow(ws.logits, N * E);
  float* dnoise = spec.kind == MoERouter::topk ? grow(ws.noise, N * E) : nullptr;
  route_backward(spec, static_cast<const float*>(kept.router_logits.data()),
                 static_cast<const float*>(kept.router_noise_logits.data()),
                 static_cast<const float*>(kept.router_probs.data()), routed, expert, dgate, A, aux_weight, dlogits,
                 dnoise);
  if (cp) {
    float* local = grow(ws.cp_local, Nl * E * (dnoise ? 2 : 1));
    for (int64_t n = 0; n < Nl; ++n) {
      const int64_t f = mine.full(n);
      std::copy(dlogits + f * E, dlogits + (f + 1) * E, local + n * E);
      if (dnoise) std::copy(dnoise + f * E, dnoise + (f + 1) * E, local + (Nl + n) * E);
    }
    dlogits = local, dnoise = dnoise ? local + Nl * E : nullptr;
  }
  auto router_backward = [&](const float* dl, const float* weight, float* dweight) {
    GemmShape gw;
    gw.M = h, gw.N = E, gw.K = Nl, gw.trans_a = true, gw.accumulate = true;
    gemm(gw, f32_operand(x), f32_operand(dl), dweight);
    if (c.tp_rank != 0) return;
    GemmShape gx;
    gx.M = Nl, gx.N = h, gx.K = E, gx.trans_b = true, gx.accumulate = true;
    gemm(gx, f32_operand(dl), f32_operand(weight), dx);
  };
  router_backward(dlogits, w.router, g.router);
  if (dnoise) router_backward(dnoise, w.router_noise, g.router_noise);
}

}  // namespace lattice::moe
