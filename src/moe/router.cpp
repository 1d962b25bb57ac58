// The routers (router.hpp). Rows are tokens, columns experts; all arithmetic in fp32/double.
#include "moe/router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lattice::moe {

// The routers' per-token scratch grows with the tokens and the experts: tracked (docs/design.md §4).
template <class T>
using scratch = tracked_vector<T, MemoryCategory::workspaces>;

namespace {

void softmax_row(const float* x, float* p, int n) {
  float m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += double(p[i] = std::exp(x[i] - m));
  for (int i = 0; i < n; ++i) p[i] = float(p[i] / sum);
}

// p ⊙ (dp − ⟨dp, p⟩): the softmax's backward, in place on dp.
void softmax_row_backward(const float* p, float* dp, int n) {
  double dot = 0;
  for (int i = 0; i < n; ++i) dot += double(dp[i]) * p[i];
  for (int i = 0; i < n; ++i) dp[i] = float(p[i] * (dp[i] - dot));
}

// The indices of the k largest values, largest first; ties go to the lower index.
std::vector<int> top_indices(const float* x, int n, int k) {
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [x](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  idx.resize(size_t(k));
  return idx;
}

float softplus(float r) { return r > 20.0f ? r : std::log1p(std::exp(r)); }
float sigmoid(float r) { return 1.0f / (1.0f + std::exp(-r)); }
double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
double normal_pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI); }
constexpr float kMinNoiseStd = 1e-6f;

// Squared coefficient of variation of x[0..n) and its gradient (population variance).
double cv_squared(const std::vector<double>& x, std::vector<double>* grad) {
  const double n = double(x.size()), mu = std::accumulate(x.begin(), x.end(), 0.0) / n;
  if (mu <= 0) {
    if (grad) grad->assign(x.size(), 0.0);
    return 0.0;
  }
  double var = 0;
  for (double v : x) var += (v - mu) * (v - mu);
  var /= n;
  if (grad) {
    grad->resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) (*grad)[i] = 2.0 / (n * mu * mu) * ((x[i] - mu) - var / mu);
  }
  return var / (mu * mu);
}

// Noisy top-k's values for token n: σ = softplus(noise logits), ε, H = logits + ε·σ (training),
// written to `out` (3E floats: σ, ε, H) and viewed from there.
struct NoisyRow {
  float *sigma, *eps, *H;
};
NoisyRow noisy_row(const RouterSpec& s, int64_t n, const float* logits, const float* noise_logits, float* out) {
  const int E = s.experts;
  NoisyRow r{out, out + E, out + 2 * E};
  std::fill(r.eps, r.eps + E, 0.0f);
  DropoutStream st = s.stream;
  st.site = DropoutSite::moe_noise;
  for (int i = 0; i < E; ++i) {
    r.sigma[size_t(i)] = std::max(softplus(noise_logits[n * E + i]), kMinNoiseStd);
    if (s.training) r.eps[size_t(i)] = philox_normal(st, s.global_token(n) * uint64_t(E) + uint64_t(i));
    r.H[size_t(i)] = logits[n * E + i] + r.eps[size_t(i)] * r.sigma[size_t(i)];
  }
  return r;
}

// The value expert i must beat to be in the top k when only its own noise is redrawn: the k-th
// largest of the other experts' H (the (k+1)-th overall if i is in, the k-th if not) and its index.
int threshold_index(const int* order, int i, int k) {
  for (int j = 0; j < k; ++j)
    if (order[size_t(j)] == i) return order[size_t(k)];
  return order[size_t(k - 1)];
}

// Shazeer's load: P(token n routes to expert i) = Φ((clean_i − threshold_i) / σ_i).
double load_probability(const NoisyRow& r, const float* clean, const int* order, int i, int k, int E,
                        double* z_out, int* thr_out) {
  if (k >= E) return 1.0;  // every expert is always in
  const int j = threshold_index(order, i, k);
  const double z = (double(clean[i]) - r.H[size_t(j)]) / r.sigma[size_t(i)];
  if (z_out) *z_out = z;
  if (thr_out) *thr_out = j;
  return normal_cdf(z);
}

struct Candidate {
  int32_t token, expert;
  float gate;
  int slot;
};
using Candidates = scratch<Candidate>;

// Keeps at most `capacity` candidates of one expert: the highest gates (probs) or the earliest
// tokens (position).
void apply_capacity(Candidates& c, int64_t capacity, DropPolicy policy) {
  if (capacity <= 0 || int64_t(c.size()) <= capacity) return;
  if (policy == DropPolicy::probs)
    std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
      return a.gate > b.gate || (a.gate == b.gate && a.token < b.token);
    });
  else
    std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
      return a.token < b.token || (a.token == b.token && a.slot < b.slot);
    });
  c.resize(size_t(capacity));
}

// f_i (share of the group's tokens whose first choice is i) and P_i (mean probability).
void first_choice_shares(const float* probs, int64_t n0, int64_t T, int E, std::vector<double>& f,
                         std::vector<double>& P) {
  f.assign(size_t(E), 0.0), P.assign(size_t(E), 0.0);
  for (int64_t n = n0; n < n0 + T; ++n) {
    const float* p = probs + n * E;
    f[size_t(std::max_element(p, p + E) - p)] += 1.0 / double(T);
    for (int i = 0; i < E; ++i) P[size_t(i)] += p[i] / double(T);
  }
}

}  // namespace

Routing route_forward(const RouterSpec& s, const float* logits, const float* noise_logits, float* probs) {
  const int E = s.experts, k = s.k;
  const int64_t T = s.group_tokens();
  Routing out;
  out.load.assign(size_t(E), 0);
  Candidates kept;
  for (int g = 0; g < s.groups; ++g) {
    const int64_t n0 = g * T;
    std::vector<Candidates> per_expert(static_cast<size_t>(E));
    if (s.kind == MoERouter::expert_choice) {
      for (int64_t n = n0; n < n0 + T; ++n) softmax_row(logits + n * E, probs + n * E, E);
      scratch<char> taken(static_cast<size_t>(T), 0);
      scratch<float> column(static_cast<size_t>(T));
      for (int e = 0; e < E; ++e) {
        for (int64_t n = 0; n < T; ++n) column[size_t(n)] = probs[(n0 + n) * E + e];
        for (int n : top_indices(column.data(), int(T), int(std::min<int64_t>(s.capacity, T)))) {
          per_expert[size_t(e)].push_back({int32_t(n0 + n), e, column[size_t(n)], 0});
          taken[size_t(n)] = 1;
        }
      }
      out.offered += T;
      out.dropped += T - std::count(taken.begin(), taken.end(), 1);
    } else {
      std::vector<double> importance(static_cast<size_t>(E), 0.0), load(size_t(E), 0.0);
      DropoutStream route = s.stream;
      route.site = DropoutSite::moe_route;
      std::vector<float> row_values(3 * size_t(E));  // one token's σ, ε, H
      for (int64_t n = n0; n < n0 + T; ++n) {
        float* p = probs + n * E;
        if (s.kind == MoERouter::topk) {
          const NoisyRow r = noisy_row(s, n, logits, noise_logits, row_values.data());
          const std::vector<int> order = top_indices(r.H, E, std::min(k + 1, E));
          std::vector<float> hs(static_cast<size_t>(k)), gs(static_cast<size_t>(k));
          for (int j = 0; j < k; ++j) hs[size_t(j)] = r.H[size_t(order[size_t(j)])];
          softmax_row(hs.data(), gs.data(), k);
          std::fill(p, p + E, 0.0f);
          for (int j = 0; j < k; ++j) {
            const int e = order[size_t(j)];
            p[e] = gs[size_t(j)];
            importance[size_t(e)] += gs[size_t(j)];
            per_expert[size_t(e)].push_back({int32_t(n), e, gs[size_t(j)], j});
          }
          for (int i = 0; i < E; ++i)
            load[size_t(i)] += load_probability(r, logits + n * E, order.data(), i, k, E, nullptr, nullptr);
        } else {
          softmax_row(logits + n * E, p, E);
          const std::vector<int> top = top_indices(p, E, s.kind == MoERouter::gshard ? 2 : k);
          if (s.kind == MoERouter::gshard) {
            const float sum = p[top[0]] + p[top[1]], g1 = p[top[0]] / sum, g2 = p[top[1]] / sum;
            per_expert[size_t(top[0])].push_back({int32_t(n), top[0], g1, 0});
            const double u = double(philox_bits(route, s.global_token(n))) / 4294967296.0;
            if (!s.training || u < 2.0 * g2) per_expert[size_t(top[1])].push_back({int32_t(n), top[1], g2, 1});
          } else {
            for (int j = 0; j < k; ++j) per_expert[size_t(top[size_t(j)])].push_back({int32_t(n), top[size_t(j)], p[top[size_t(j)]], j});
          }
        }
      }
      if (s.kind == MoERouter::topk) {
        out.aux_loss += (cv_squared(importance, nullptr) + cv_squared(load, nullptr)) / s.groups;
      } else {
        std::vector<double> f, P;
        first_choice_shares(probs, n0, T, E, f, P);
        double sum = 0;
        for (int i = 0; i < E; ++i) sum += f[size_t(i)] * P[size_t(i)];
        out.aux_loss += (s.kind == MoERouter::switch_ ? double(E) * sum : sum) / s.groups;
      }
      for (auto& c : per_expert) {
        out.offered += int64_t(c.size());
        const int64_t before = int64_t(c.size());
        apply_capacity(c, s.capacity, s.policy);
        out.dropped += before - int64_t(c.size());
      }
    }
    for (auto& c : per_expert) kept.insert(kept.end(), c.begin(), c.end());
  }
  std::stable_sort(kept.begin(), kept.end(), [](const Candidate& a, const Candidate& b) {
    return a.expert < b.expert || (a.expert == b.expert && a.token < b.token);
  });
  for (const Candidate& c : kept) {
    out.token.push_back(c.token), out.expert.push_back(c.expert), out.gate.push_back(c.gate);
    ++out.load[size_t(c.expert)];
  }
  return out;
}

void route_backward(const RouterSpec& s, const float* logits, const float* noise_logits, const float* probs,
                    const int32_t* token, const int32_t* expert, const float* dgate, int64_t A, double aux_weight,
                    float* dlogits, float* dnoise_logits) {
  const int E = s.experts, k = s.k;
  const int64_t N = s.tokens, T = s.group_tokens();
  // dG[n, e]: the gradient of each kept gate, dense.
  std::fill(dlogits, dlogits + N * E, 0.0f);
  for (int64_t a = 0; a < A; ++a) dlogits[int64_t(token[a]) * E + expert[a]] += dgate[a];
  if (s.kind == MoERouter::topk) std::fill(dnoise_logits, dnoise_logits + N * E, 0.0f);

  for (int g = 0; g < s.groups; ++g) {
    const int64_t n0 = g * T;
    if (s.kind == MoERouter::expert_choice) {
      for (int64_t n = n0; n < n0 + T; ++n) softmax_row_backward(probs + n * E, dlogits + n * E, E);
      continue;
    }
    if (s.kind == MoERouter::switch_ || s.kind == MoERouter::gshard) {
      std::vector<double> f, P;
      first_choice_shares(probs, n0, T, E, f, P);
      const double scale = aux_weight * (s.kind == MoERouter::switch_ ? double(E) : 1.0) / double(T);
      for (int64_t n = n0; n < n0 + T; ++n) {
        const float* p = probs + n * E;
        float* d = dlogits + n * E;
        if (s.kind == MoERouter::gshard) {  // the renormalised gates' gradient, onto p₁ and p₂
          const std::vector<int> top = top_indices(p, E, 2);
          const double p1 = p[top[0]], p2 = p[top[1]], sum2 = (p1 + p2) * (p1 + p2);
          const double d1 = d[top[0]], d2 = d[top[1]];
          d[top[0]] = float(p2 * (d1 - d2) / sum2);
          d[top[1]] = float(p1 * (d2 - d1) / sum2);
        }
        for (int i = 0; i < E; ++i) d[i] += float(scale * f[size_t(i)]);
        softmax_row_backward(p, d, E);
      }
      continue;
    }
    // Noisy top-k: importance (through the gates) and load (through Φ) losses.
    std::vector<double> importance(static_cast<size_t>(E), 0.0), load(size_t(E), 0.0), d_imp, d_load;
    // Every token's σ, ε, H and its k + 1 largest H, kept through the group (flat: T·3E and T·(k+1)).
    const int kept_order = std::min(k + 1, E);
    scratch<float> values(size_t(T * 3 * E));
    scratch<int> orders(size_t(T * kept_order));
    const auto row_of = [&](int64_t n) {
      float* v = &values[size_t((n - n0) * 3 * E)];
      return NoisyRow{v, v + E, v + 2 * E};
    };
    const auto order_of = [&](int64_t n) { return &orders[size_t((n - n0) * kept_order)]; };
    for (int64_t n = n0; n < n0 + T; ++n) {
      const NoisyRow r = noisy_row(s, n, logits, noise_logits, row_of(n).sigma);
      const std::vector<int> top = top_indices(r.H, E, kept_order);
      std::copy(top.begin(), top.end(), order_of(n));
      for (int i = 0; i < E; ++i) {
        importance[size_t(i)] += probs[n * E + i];
        load[size_t(i)] += load_probability(r, logits + n * E, order_of(n), i, k, E, nullptr, nullptr);
      }
    }
    cv_squared(importance, &d_imp);
    cv_squared(load, &d_load);
    for (int64_t n = n0; n < n0 + T; ++n) {
      const NoisyRow r = row_of(n);
      const int* order = order_of(n);
      const float* p = probs + n * E;
      float* dl = dlogits + n * E;
      std::vector<double> dH(static_cast<size_t>(E), 0.0), dsigma(size_t(E), 0.0);
      // Gates: softmax over the selected H; dG = the combine's gradient + the importance loss's.
      double dot = 0;
      for (int j = 0; j < k; ++j) {
        const int e = order[size_t(j)];
        dot += p[e] * (dl[e] + aux_weight * d_imp[size_t(e)]);
      }
      for (int j = 0; j < k; ++j) {
        const int e = order[size_t(j)];
        dH[size_t(e)] += p[e] * (dl[e] + aux_weight * d_imp[size_t(e)] - dot);
      }
      std::fill(dl, dl + E, 0.0f);
      // Load: P = Φ(z), z = (clean_i − H_thr) / σ_i.
      for (int i = 0; i < E && k < E; ++i) {
        double z = 0;
        int thr = 0;
        load_probability(r, logits + n * E, order, i, k, E, &z, &thr);
        const double dz = aux_weight * d_load[size_t(i)] * normal_pdf(z), sigma = r.sigma[size_t(i)];
        dl[i] += float(dz / sigma);
        dsigma[size_t(i)] -= dz * z / sigma;
        dH[size_t(thr)] -= dz / sigma;
      }
      // H = clean + ε·σ, σ = softplus(noise logits).
      for (int i = 0; i < E; ++i) {
        dl[i] += float(dH[size_t(i)]);
        dsigma[size_t(i)] += dH[size_t(i)] * r.eps[size_t(i)];
        const bool floored = r.sigma[size_t(i)] <= kMinNoiseStd;
        dnoise_logits[n * E + i] = floored ? 0.0f : float(dsigma[size_t(i)] * sigmoid(noise_logits[n * E + i]));
      }
    }
  }
}

}  // namespace lattice::moe
