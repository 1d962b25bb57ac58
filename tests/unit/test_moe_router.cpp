// The four routers of src/moe/router.* (docs/design.md §12) against dense references written here:
// hand-made logits whose routing, gates, capacity drops and auxiliary losses are worked out by hand
// or by a naive re-implementation in double; GShard's random routing and noisy top-k's noise against
// the Philox draws the design names (site, element index); and route_backward against central finite
// differences of J = Σ_a c_a·gate_a + w·aux_loss with the selection held fixed.
// Past the usual length on purpose: the four routers' cases share their hand-made inputs and references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "gradcheck_util.hpp"
#include "moe/router.hpp"
#include "random/philox.hpp"

using namespace lattice;
using namespace lattice::moe;
using gradcheck::randn;

namespace {

using Pairs = std::vector<std::pair<int, int>>;  // (expert, token) in dispatch order

RouterSpec make_spec(MoERouter kind, int E, int k, int64_t N, int groups = 1, int64_t capacity = 0,
                     DropPolicy policy = DropPolicy::probs, bool training = false,
                     DropoutStream stream = DropoutStream{1234, 7, 3, DropoutSite::moe_noise}) {
  RouterSpec s;
  s.kind = kind, s.experts = E, s.k = k, s.policy = policy, s.tokens = N, s.groups = groups;
  s.capacity = capacity, s.training = training, s.stream = stream;
  s.seq = N, s.first_row = 0;
  return s;
}

Pairs pairs_of(const Routing& r) {
  Pairs p;
  for (int64_t a = 0; a < r.size(); ++a) p.emplace_back(r.expert[size_t(a)], r.token[size_t(a)]);
  return p;
}

std::vector<double> softmax_d(const float* x, int n) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += p[size_t(i)] = std::exp(double(x[i]) - m);
  for (auto& v : p) v /= sum;
  return p;
}

double phi(double z) { return 0.5 * (1.0 + std::erf(z / std::sqrt(2.0))); }

// Squared coefficient of variation with the population variance (docs/design.md §12).
double cv2(const std::vector<double>& x) {
  const double n = double(x.size());
  double mu = 0;
  for (double v : x) mu += v;
  mu /= n;
  double var = 0;
  for (double v : x) var += (v - mu) * (v - mu);
  return var / n / (mu * mu);
}

// E·Σ_i f_i·P_i of tokens [n0, n0 + T) of a row-major [N, E] logit matrix, f from the argmax.
double sum_f_times_p(const std::vector<float>& logits, int E, int64_t n0, int64_t T) {
  std::vector<double> f(static_cast<size_t>(E), 0.0), P(static_cast<size_t>(E), 0.0);
  for (int64_t n = n0; n < n0 + T; ++n) {
    const auto p = softmax_d(logits.data() + n * E, E);
    f[size_t(std::max_element(p.begin(), p.end()) - p.begin())] += 1.0 / double(T);
    for (int i = 0; i < E; ++i) P[size_t(i)] += p[size_t(i)] / double(T);
  }
  double s = 0;
  for (int i = 0; i < E; ++i) s += f[size_t(i)] * P[size_t(i)];
  return s;
}

// Indices 0..n-1 sorted by value descending (ties: lower index first).
std::vector<int> order_desc(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  return idx;
}

// Noisy top-k by the definition (Shazeer et al. 2017, docs/design.md §12), in double: σ = softplus of
// the noise logits, ε the Philox normal of element g·E + i at site moe_noise while training,
// H = clean + ε·σ, the top k of H selected, gates the softmax over them; load probabilities
// Φ((clean_i − k-th largest of the other H)/σ_i); aux = CV²(Σ gates) + CV²(Σ load), mean over groups.
struct NoisyRef {
  std::vector<double> H, gates, load_p;  // [N, E]
  std::vector<std::vector<int>> selected;  // per token, the k experts, largest H first
  double aux = 0;
};
NoisyRef noisy_topk_ref(const RouterSpec& s, const std::vector<float>& clean, const std::vector<float>& noise) {
  const int E = s.experts, k = s.k;
  const int64_t N = s.tokens, T = N / s.groups;
  NoisyRef r;
  r.H.resize(size_t(N * E)), r.gates.assign(size_t(N * E), 0.0), r.load_p.resize(size_t(N * E));
  DropoutStream st = s.stream;
  st.site = DropoutSite::moe_noise;
  std::vector<double> sigma(static_cast<size_t>(N * E));
  for (int64_t n = 0; n < N; ++n)
    for (int i = 0; i < E; ++i) {
      const double nl = noise[size_t(n * E + i)];
      sigma[size_t(n * E + i)] = std::max(std::log(1.0 + std::exp(nl)), 1e-6);
      const uint64_t g = uint64_t((s.first_row + n / s.seq) * s.seq + n % s.seq);
      const double eps = s.training ? double(philox_normal(st, g * uint64_t(E) + uint64_t(i))) : 0.0;
      r.H[size_t(n * E + i)] = clean[size_t(n * E + i)] + eps * sigma[size_t(n * E + i)];
    }
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> h(r.H.begin() + n * E, r.H.begin() + (n + 1) * E);
    std::vector<int> ord = order_desc(h);
    ord.resize(size_t(k));
    r.selected.push_back(ord);
    double m = h[size_t(ord[0])], sum = 0;
    for (int e : ord) sum += std::exp(h[size_t(e)] - m);
    for (int e : ord) r.gates[size_t(n * E + e)] = std::exp(h[size_t(e)] - m) / sum;
    for (int i = 0; i < E; ++i) {
      std::vector<double> others;
      for (int j = 0; j < E; ++j)
        if (j != i) others.push_back(h[size_t(j)]);
      std::sort(others.rbegin(), others.rend());
      const double kth = others[size_t(k - 1)];
      r.load_p[size_t(n * E + i)] = phi((clean[size_t(n * E + i)] - kth) / sigma[size_t(n * E + i)]);
    }
  }
  for (int g = 0; g < s.groups; ++g) {
    std::vector<double> imp(static_cast<size_t>(E), 0.0), load(static_cast<size_t>(E), 0.0);
    for (int64_t n = g * T; n < (g + 1) * T; ++n)
      for (int i = 0; i < E; ++i) imp[size_t(i)] += r.gates[size_t(n * E + i)], load[size_t(i)] += r.load_p[size_t(n * E + i)];
    r.aux += (cv2(imp) + cv2(load)) / s.groups;
  }
  return r;
}

// Expert choice by the definition: in each group, expert j takes the min(C, T) tokens of highest
// p_t,j (ties → lower token).
Pairs expert_choice_ref(const std::vector<float>& logits, int E, int64_t N, int groups, int64_t C,
                        int64_t* untaken) {
  const int64_t T = N / groups;
  std::vector<std::vector<double>> p;
  for (int64_t n = 0; n < N; ++n) p.push_back(softmax_d(logits.data() + n * E, E));
  Pairs out;
  *untaken = 0;
  std::vector<std::vector<int>> taken_by(static_cast<size_t>(E));
  for (int g = 0; g < groups; ++g) {
    std::vector<int> taken(static_cast<size_t>(T), 0);
    for (int e = 0; e < E; ++e) {
      std::vector<double> col;
      for (int64_t n = g * T; n < (g + 1) * T; ++n) col.push_back(p[size_t(n)][size_t(e)]);
      std::vector<int> ord = order_desc(col);
      for (int64_t j = 0; j < std::min(C, T); ++j) {
        taken_by[size_t(e)].push_back(int(g * T + ord[size_t(j)]));
        taken[size_t(ord[size_t(j)])] = 1;
      }
    }
    *untaken += T - std::count(taken.begin(), taken.end(), 1);
  }
  for (int e = 0; e < E; ++e) {
    std::sort(taken_by[size_t(e)].begin(), taken_by[size_t(e)].end());
    for (int t : taken_by[size_t(e)]) out.emplace_back(e, t);
  }
  return out;
}

}  // namespace

// ---- Switch -------------------------------------------------------------------------------------

// N = 6, E = 3. First choices by hand: tokens 0, 1, 3, 5 → expert 0 (gates e²/(e²+2) = .787,
// e^.5/(e^.5+2) = .452, e³/(e³+2) = .909, e/(e+2) = .576), token 2 → expert 1, token 4 → expert 2.
// With C = 2, expert 0 is offered 4 assignments:
//   probs    keeps the highest gates (tokens 3 and 0), drops tokens 1 and 5;
//   position keeps the earliest (tokens 0 and 1), drops tokens 3 and 5.
const std::vector<float> kSwitchLogits = {
    2.0f, 0.0f, 0.0f,  //
    0.5f, 0.0f, 0.0f,  //
    0.0f, 1.0f, 0.0f,  //
    3.0f, 0.0f, 0.0f,  //
    0.0f, 0.0f, 1.5f,  //
    1.0f, 0.0f, 0.0f,  //
};

TEST(MoERouter, SwitchTop1GatesAndAuxAgainstHandSoftmax) {
  const int E = 3;
  const int64_t N = 6;
  std::vector<float> probs(static_cast<size_t>(N * E));
  const Routing r = route_forward(make_spec(MoERouter::switch_, E, 1, N), kSwitchLogits.data(), nullptr, probs.data());
  // No capacity: every token keeps its argmax, expert-major, tokens ascending.
  EXPECT_EQ(pairs_of(r), (Pairs{{0, 0}, {0, 1}, {0, 3}, {0, 5}, {1, 2}, {2, 4}}));
  EXPECT_EQ(r.load, (std::vector<int64_t>{4, 1, 1}));
  EXPECT_EQ(r.offered, 6);
  EXPECT_EQ(r.dropped, 0);
  // Gates are the chosen probability: e^a / (e^a + 2) for a row (a, 0, 0) and permutations.
  const double e = std::exp(1.0);
  const std::vector<double> gate_by_hand = {e * e / (e * e + 2), std::sqrt(e) / (std::sqrt(e) + 2),
                                            std::pow(e, 3) / (std::pow(e, 3) + 2), e / (e + 2),
                                            e / (e + 2), std::pow(e, 1.5) / (std::pow(e, 1.5) + 2)};
  for (int64_t a = 0; a < r.size(); ++a) EXPECT_NEAR(r.gate[size_t(a)], gate_by_hand[size_t(a)], 1e-6) << a;
  // probs is the full softmax.
  for (int64_t n = 0; n < N; ++n) {
    const auto p = softmax_d(kSwitchLogits.data() + n * E, E);
    for (int i = 0; i < E; ++i) EXPECT_NEAR(probs[size_t(n * E + i)], p[size_t(i)], 1e-6);
  }
  // aux = E·Σ f_i P_i, f = (4, 1, 1)/6, P the column means of the softmax.
  std::vector<double> P(3, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const auto p = softmax_d(kSwitchLogits.data() + n * E, E);
    for (int i = 0; i < E; ++i) P[size_t(i)] += p[size_t(i)] / 6.0;
  }
  const double aux = 3.0 * (4.0 / 6 * P[0] + 1.0 / 6 * P[1] + 1.0 / 6 * P[2]);
  EXPECT_NEAR(r.aux_loss, aux, 1e-6);
  EXPECT_GT(r.aux_loss, 1.0);  // imbalanced: above the balanced value 1
}

TEST(MoERouter, SwitchCapacityProbsAndPositionPoliciesDropDifferentTokens) {
  const int E = 3;
  const int64_t N = 6;
  std::vector<float> probs(static_cast<size_t>(N * E));
  const Routing by_probs = route_forward(make_spec(MoERouter::switch_, E, 1, N, 1, 2, DropPolicy::probs),
                                         kSwitchLogits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(by_probs), (Pairs{{0, 0}, {0, 3}, {1, 2}, {2, 4}}));
  EXPECT_EQ(by_probs.load, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(by_probs.offered, 6);
  EXPECT_EQ(by_probs.dropped, 2);
  const double e = std::exp(1.0);
  ASSERT_EQ(by_probs.size(), 4);
  EXPECT_NEAR(by_probs.gate[0], e * e / (e * e + 2), 1e-6);
  EXPECT_NEAR(by_probs.gate[1], std::pow(e, 3) / (std::pow(e, 3) + 2), 1e-6);

  const Routing by_position = route_forward(make_spec(MoERouter::switch_, E, 1, N, 1, 2, DropPolicy::position),
                                            kSwitchLogits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(by_position), (Pairs{{0, 0}, {0, 1}, {1, 2}, {2, 4}}));
  EXPECT_EQ(by_position.load, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(by_position.offered, 6);
  EXPECT_EQ(by_position.dropped, 2);
  ASSERT_EQ(by_position.size(), 4);
  EXPECT_NEAR(by_position.gate[1], std::sqrt(e) / (std::sqrt(e) + 2), 1e-6);  // not renormalised
  // Dropping does not change the auxiliary loss (it is computed on the router's choices).
  EXPECT_NEAR(by_probs.aux_loss, by_position.aux_loss, 1e-12);

  // C = 1: only the single best (probs) / earliest (position) token of expert 0 stays.
  const Routing c1 = route_forward(make_spec(MoERouter::switch_, E, 1, N, 1, 1, DropPolicy::probs),
                                   kSwitchLogits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(c1), (Pairs{{0, 3}, {1, 2}, {2, 4}}));
  EXPECT_EQ(c1.dropped, 3);
  const Routing c1p = route_forward(make_spec(MoERouter::switch_, E, 1, N, 1, 1, DropPolicy::position),
                                    kSwitchLogits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(c1p), (Pairs{{0, 0}, {1, 2}, {2, 4}}));
}

// ---- GShard -------------------------------------------------------------------------------------

TEST(MoERouter, GShardTop2RenormalisedGatesWithoutTraining) {
  // E = 4, rows are permutations of (2, 1, 0, −1): the top two differ by 1, so
  // ĝ₁ = 1/(1+e⁻¹) = .7311, ĝ₂ = 1/(1+e) = .2689 whatever the rest.
  const int E = 4;
  const int64_t N = 3;
  const std::vector<float> logits = {2, 1, 0, -1, /**/ -1, 0, 2, 1, /**/ 1, -1, 0, 2};
  std::vector<float> probs(static_cast<size_t>(N * E));
  const Routing r = route_forward(make_spec(MoERouter::gshard, E, 2, N), logits.data(), nullptr, probs.data());
  // Token 0 → (0, 1), token 1 → (2, 3), token 2 → (3, 0); expert-major order:
  EXPECT_EQ(pairs_of(r), (Pairs{{0, 0}, {0, 2}, {1, 0}, {2, 1}, {3, 1}, {3, 2}}));
  const double g1 = 1.0 / (1.0 + std::exp(-1.0)), g2 = 1.0 / (1.0 + std::exp(1.0));
  const std::vector<double> gates = {g1, g2, g2, g1, g2, g1};
  ASSERT_EQ(r.size(), 6);
  for (int a = 0; a < 6; ++a) EXPECT_NEAR(r.gate[size_t(a)], gates[size_t(a)], 1e-6) << a;
  EXPECT_EQ(r.offered, 6);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.load, (std::vector<int64_t>{2, 1, 1, 2}));
  // aux = Σ f_i·P_i (= E·mean_i f_i P_i), f from the first choices (1/3 for experts 0, 2, 3).
  EXPECT_NEAR(r.aux_loss, sum_f_times_p(logits, E, 0, N), 1e-6);
  const double p_two = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0) + 1.0 + std::exp(-1.0));
  const double p_one = std::exp(1.0) / (std::exp(2.0) + std::exp(1.0) + 1.0 + std::exp(-1.0));
  const double p_zero = 1.0 / (std::exp(2.0) + std::exp(1.0) + 1.0 + std::exp(-1.0));
  const double p_m1 = std::exp(-1.0) / (std::exp(2.0) + std::exp(1.0) + 1.0 + std::exp(-1.0));
  // P_0 = (p2 + p_m1 + p1)/3, P_2 = (p0 + p2 + p0)/3, P_3 = (p_m1 + p1 + p2)/3.
  const double by_hand = (p_two + p_m1 + p_one) / 9 + (p_zero + p_two + p_zero) / 9 + (p_m1 + p_one + p_two) / 9;
  EXPECT_NEAR(r.aux_loss, by_hand, 1e-6);
}

// Token n's top two are experts n % 4 and (n+1) % 4 with logits 0.8473 and 0, so ĝ₂ = 3/10 and the
// second expert is kept with probability 2·ĝ₂ = 0.6 while training.
std::vector<float> gshard_random_logits(int64_t N) {
  const float d = float(std::log(7.0 / 3.0));
  std::vector<float> l(static_cast<size_t>(N * 4), -4.0f);
  for (int64_t n = 0; n < N; ++n) l[size_t(n * 4 + n % 4)] = d, l[size_t(n * 4 + (n + 1) % 4)] = 0.0f;
  return l;
}

// Whether token n's second expert survived: (expert (n+1)%4, token n) is among the assignments.
std::vector<int> seconds_kept(const Routing& r, int64_t N) {
  std::vector<int> kept(static_cast<size_t>(N), 0);
  for (int64_t a = 0; a < r.size(); ++a)
    if (r.expert[size_t(a)] == (r.token[size_t(a)] + 1) % 4) kept[size_t(r.token[size_t(a)])] = 1;
  return kept;
}

TEST(MoERouter, GShardRandomRoutingKeepsTheSecondWithProbabilityTwiceItsGate) {
  const int E = 4;
  const int64_t N = 4000;
  const auto logits = gshard_random_logits(N);
  std::vector<float> probs(static_cast<size_t>(N * E));
  const DropoutStream stream{99, 5, 2, DropoutSite::moe_noise};
  const RouterSpec spec = make_spec(MoERouter::gshard, E, 2, N, 1, 0, DropPolicy::probs, true, stream);
  const Routing r = route_forward(spec, logits.data(), nullptr, probs.data());
  const auto kept = seconds_kept(r, N);

  // Each decision is u < 2·ĝ₂ with u the Philox draw of element g (global token) at site moe_route.
  DropoutStream route = stream;
  route.site = DropoutSite::moe_route;
  int64_t n_kept = 0, mismatches = 0, checked = 0;
  for (int64_t n = 0; n < N; ++n) {
    const auto p = softmax_d(logits.data() + n * E, E);
    const double g2 = p[size_t((n + 1) % 4)] / (p[size_t(n % 4)] + p[size_t((n + 1) % 4)]);
    ASSERT_NEAR(g2, 0.3, 1e-6);
    const double u = double(philox_bits(route, uint64_t(n))) / 4294967296.0;
    n_kept += kept[size_t(n)];
    if (std::fabs(u - 2 * g2) < 1e-5) continue;  // too close to call in fp32
    ++checked;
    mismatches += kept[size_t(n)] != (u < 2 * g2 ? 1 : 0);
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked << " tokens";
  EXPECT_GT(checked, N - 10);
  // Binomial(4000, 0.6): σ of the fraction = sqrt(.24/4000) = .0077; 5σ bound.
  const double frac = double(n_kept) / double(N);
  EXPECT_NEAR(frac, 0.6, 5 * std::sqrt(0.24 / double(N))) << n_kept << " seconds kept";
  // Skipped seconds are not offered; nothing is over capacity; every first choice stays.
  EXPECT_EQ(r.offered, N + n_kept);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.size(), N + n_kept);
  // The aux loss does not depend on the random routing.
  EXPECT_NEAR(r.aux_loss, sum_f_times_p(logits, E, 0, N), 1e-6);

  // Deterministic: the same inputs route the same.
  const Routing again = route_forward(spec, logits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(again), pairs_of(r));
  EXPECT_EQ(again.gate, r.gate);

  // A pure function of the global token: micro-batch rows 2..3 of 1000 tokens each (first_row 2)
  // decide as the same tokens did inside rows 0..3.
  RouterSpec tail = spec;
  tail.tokens = 2000, tail.seq = 1000, tail.first_row = 2;
  RouterSpec whole = spec;
  whole.seq = 1000, whole.first_row = 0;
  const auto kept_whole = seconds_kept(route_forward(whole, logits.data(), nullptr, probs.data()), N);
  EXPECT_EQ(kept_whole, kept);
  const auto kept_tail = seconds_kept(route_forward(tail, logits.data() + 2000 * E, nullptr, probs.data()), 2000);
  EXPECT_TRUE(std::equal(kept_tail.begin(), kept_tail.end(), kept.begin() + 2000));
  // …and of the stream: another step, layer or seed draws differently.
  for (int which = 0; which < 3; ++which) {
    RouterSpec other = spec;
    if (which == 0) other.stream.step += 1;
    if (which == 1) other.stream.layer += 1;
    if (which == 2) other.stream.seed += 1;
    const auto kept_other = seconds_kept(route_forward(other, logits.data(), nullptr, probs.data()), N);
    int64_t differ = 0;
    for (int64_t n = 0; n < N; ++n) differ += kept_other[size_t(n)] != kept[size_t(n)];
    // Independent draws: P(differ) = 2·.6·.4 = .48 per token.
    EXPECT_GT(differ, N / 3) << "stream change " << which;
  }
  // Not training: both always kept.
  RouterSpec eval = spec;
  eval.training = false;
  const Routing all = route_forward(eval, logits.data(), nullptr, probs.data());
  EXPECT_EQ(all.size(), 2 * N);
  EXPECT_EQ(all.offered, 2 * N);
}

// N = 8, E = 4, the other logits −5. First and second choices (logit gap → ĝ₁, ĝ₂):
//   group 0: t0 e0 > e1 (1 → .731/.269)   t1 e0 > e2 (2 → .881/.119)
//            t2 e0 > e3 (1.5 → .818/.182) t3 e1 > e2 (1.5 → .818/.182)
//   group 1: t4 e0 > e3 (.5 → .622/.378)  t5 e2 > e3 (1 → .731/.269)
//            t6 e3 > e1 (1 → .731/.269)   t7 e1 > e2 (.8 → .690/.310)
// G = 2, C = 2 per group (policy probs): group 0 offers e0 three (drop t0, .731), group 1 offers e3
// three (drop t5, .269); 14 of 16 kept.
// G = 1, C = 2: e0 keeps t1, t2 (drops t0 and t4 — t4 a group-1 token that G = 2 keeps), e1 keeps t3,
// t7, e2 keeps t5, t7, e3 keeps t6, t4: 8 of 16.
TEST(MoERouter, GShardGroupsEachHaveTheirOwnCapacity) {
  const int E = 4;
  const int64_t N = 8;
  std::vector<float> logits(static_cast<size_t>(N * E), -5.0f);
  auto set = [&](int n, int e1, float l1, int e2, float l2) {
    logits[size_t(n * E + e1)] = l1, logits[size_t(n * E + e2)] = l2;
  };
  set(0, 0, 2.0f, 1, 1.0f), set(1, 0, 3.0f, 2, 1.0f), set(2, 0, 2.5f, 3, 1.0f), set(3, 1, 2.0f, 2, 0.5f);
  set(4, 0, 2.0f, 3, 1.5f), set(5, 2, 2.0f, 3, 1.0f), set(6, 3, 2.0f, 1, 1.0f), set(7, 1, 2.0f, 2, 1.2f);
  std::vector<float> probs(static_cast<size_t>(N * E));

  const Routing g2 = route_forward(make_spec(MoERouter::gshard, E, 2, N, 2, 2), logits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(g2), (Pairs{{0, 1}, {0, 2}, {0, 4},          //
                                 {1, 0}, {1, 3}, {1, 6}, {1, 7},  //
                                 {2, 1}, {2, 3}, {2, 5}, {2, 7},  //
                                 {3, 2}, {3, 4}, {3, 6}}));
  EXPECT_EQ(g2.load, (std::vector<int64_t>{3, 4, 4, 3}));
  EXPECT_EQ(g2.offered, 16);
  EXPECT_EQ(g2.dropped, 2);
  // aux: the mean over the two groups of each group's Σ f_i P_i.
  EXPECT_NEAR(g2.aux_loss, 0.5 * (sum_f_times_p(logits, E, 0, 4) + sum_f_times_p(logits, E, 4, 4)), 1e-6);
  // By hand, group 0's f = (3/4, 1/4, 0, 0) and group 1's f = (1/4, 1/4, 1/4, 1/4): different from
  // the single group's, so the per-group mean is not the whole batch's value.
  EXPECT_GT(std::fabs(g2.aux_loss - sum_f_times_p(logits, E, 0, 8)), 1e-3);

  const Routing g1 = route_forward(make_spec(MoERouter::gshard, E, 2, N, 1, 2), logits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(g1), (Pairs{{0, 1}, {0, 2}, {1, 3}, {1, 7}, {2, 5}, {2, 7}, {3, 4}, {3, 6}}));
  EXPECT_EQ(g1.load, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(g1.offered, 16);
  EXPECT_EQ(g1.dropped, 8);
  EXPECT_NEAR(g1.aux_loss, sum_f_times_p(logits, E, 0, 8), 1e-6);
}

// ---- Noisy top-k --------------------------------------------------------------------------------

TEST(MoERouter, NoisyTopKWithoutNoiseGatesAndImportanceLoadLosses) {
  const int E = 4, k = 2;
  const int64_t N = 8;
  // Logits with clear gaps inside each row; noise logits spread so σ ranges over ~0.1 … 2.
  auto logits = randn(N * E, 31, 1.5f);
  auto noise = randn(N * E, 32, 1.0f, -0.5f);
  std::vector<float> probs(static_cast<size_t>(N * E));
  for (int groups : {1, 2}) {
    const RouterSpec spec = make_spec(MoERouter::topk, E, k, N, groups);
    const Routing r = route_forward(spec, logits.data(), noise.data(), probs.data());
    const NoisyRef ref = noisy_topk_ref(spec, logits, noise);
    Pairs want;
    for (int e = 0; e < E; ++e)
      for (int64_t n = 0; n < N; ++n)
        if (std::find(ref.selected[size_t(n)].begin(), ref.selected[size_t(n)].end(), e) !=
            ref.selected[size_t(n)].end())
          want.emplace_back(e, int(n));
    EXPECT_EQ(pairs_of(r), want);
    for (int64_t n = 0; n < N; ++n) {
      // Without noise: softmax over the k largest clean logits, zero elsewhere.
      for (int i = 0; i < E; ++i) EXPECT_NEAR(probs[size_t(n * E + i)], ref.gates[size_t(n * E + i)], 1e-6);
      double sum = 0;
      for (int i = 0; i < E; ++i) sum += probs[size_t(n * E + i)];
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
    for (int64_t a = 0; a < r.size(); ++a)
      EXPECT_NEAR(r.gate[size_t(a)], ref.gates[size_t(r.token[size_t(a)] * E + r.expert[size_t(a)])], 1e-6);
    EXPECT_EQ(r.offered, k * N);
    EXPECT_EQ(r.dropped, 0);
    EXPECT_NEAR(r.aux_loss, ref.aux, 1e-5 * std::max(1.0, ref.aux)) << "groups " << groups;
    EXPECT_GT(ref.aux, 0.01);
  }
  // A hand-sized case for the load term: one token, E = 3, k = 1, clean (1, 0, −1), σ = softplus(0)
  // = ln 2 everywhere. P_0 = Φ((1 − 0)/ln2), P_1 = Φ((0 − 1)/ln2), P_2 = Φ((−1 − 1)/ln2); importance
  // (1, 0, 0). Two identical tokens keep the CVs the same.
  const std::vector<float> c3 = {1, 0, -1, 1, 0, -1}, z3(6, 0.0f);
  std::vector<float> p3(6);
  const Routing r3 = route_forward(make_spec(MoERouter::topk, 3, 1, 2), c3.data(), z3.data(), p3.data());
  const double l2 = std::log(2.0);
  const std::vector<double> load = {phi(1 / l2), phi(-1 / l2), phi(-2 / l2)};
  const double imp_cv2 = 2.0;  // (1,0,0): mean 1/3, var 2/9 → (2/9)/(1/9)
  EXPECT_NEAR(r3.aux_loss, imp_cv2 + cv2(load), 1e-5);
  EXPECT_EQ(pairs_of(r3), (Pairs{{0, 0}, {0, 1}}));
  EXPECT_NEAR(r3.gate[0], 1.0, 1e-7);
}

TEST(MoERouter, NoisyTopKTrainingNoiseIsADeterministicPhiloxDraw) {
  const int E = 4, k = 2;
  const int64_t N = 64;
  // Equal clean logits and σ = softplus(0.5) ≈ .97: the noise alone decides the selection.
  auto logits = randn(N * E, 41, 0.05f);
  std::vector<float> noise(static_cast<size_t>(N * E), 0.5f);
  std::vector<float> probs(static_cast<size_t>(N * E)), probs2(static_cast<size_t>(N * E));
  const RouterSpec spec =
      make_spec(MoERouter::topk, E, k, N, 1, 0, DropPolicy::probs, true, DropoutStream{77, 3, 1, DropoutSite::moe_noise});
  const Routing r = route_forward(spec, logits.data(), noise.data(), probs.data());
  const NoisyRef ref = noisy_topk_ref(spec, logits, noise);
  // Selection, gates and aux as the definition with ε = philox_normal(moe_noise, g·E + i).
  int64_t changed_vs_clean = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int i = 0; i < E; ++i) EXPECT_NEAR(probs[size_t(n * E + i)], ref.gates[size_t(n * E + i)], 2e-6);
    std::vector<double> clean(logits.begin() + n * E, logits.begin() + (n + 1) * E);
    auto top_clean = order_desc(clean);
    top_clean.resize(size_t(k));
    std::sort(top_clean.begin(), top_clean.end());
    auto sel = ref.selected[size_t(n)];
    std::sort(sel.begin(), sel.end());
    changed_vs_clean += sel != top_clean;
  }
  EXPECT_NEAR(r.aux_loss, ref.aux, 1e-5 * std::max(1.0, ref.aux));
  // The noise changes the selection for many tokens (without noise all would take the clean top 2).
  EXPECT_GT(changed_vs_clean, N / 4);
  // Deterministic.
  const Routing again = route_forward(spec, logits.data(), noise.data(), probs2.data());
  EXPECT_EQ(pairs_of(again), pairs_of(r));
  EXPECT_EQ(probs2, probs);
  EXPECT_EQ(again.aux_loss, r.aux_loss);
  // Another step: other noise.
  RouterSpec next = spec;
  next.stream.step += 1;
  const Routing other = route_forward(next, logits.data(), noise.data(), probs2.data());
  EXPECT_NE(pairs_of(other), pairs_of(r));
  EXPECT_NE(probs2, probs);
  // The global token decides: rows 1..3 of 16 tokens routed on their own (first_row 1) match.
  RouterSpec whole = spec;
  whole.seq = 16;
  RouterSpec tail = whole;
  tail.tokens = 48, tail.first_row = 1;
  route_forward(whole, logits.data(), noise.data(), probs.data());
  route_forward(tail, logits.data() + 16 * E, noise.data() + 16 * E, probs2.data());
  EXPECT_TRUE(std::equal(probs2.begin(), probs2.begin() + 48 * E, probs.begin() + 16 * E));
  // Not training: no noise, the clean top 2.
  RouterSpec eval = spec;
  eval.training = false;
  route_forward(eval, logits.data(), noise.data(), probs.data());
  const NoisyRef clean_ref = noisy_topk_ref(eval, logits, noise);
  for (int64_t i = 0; i < N * E; ++i) EXPECT_NEAR(probs[size_t(i)], clean_ref.gates[size_t(i)], 1e-6);
}

// ---- Expert choice ------------------------------------------------------------------------------

// N = 6, E = 3, C = 2. Columns of the softmax by hand:
//   e0: t0 .909, t3 .787, t2 1/3, …      → t0, t3
//   e1: t4 .787, t1 .488, t2 1/3, …      → t1, t4
//   e2: t5 .844, t1 .488, t2 1/3, …      → t1, t5
// Token 1 goes to two experts, token 2 to none.
TEST(MoERouter, ExpertChoiceEachExpertTakesItsTopCTokens) {
  const int E = 3;
  const int64_t N = 6;
  const std::vector<float> logits = {3, 0, 0, /**/ 0, 3, 3, /**/ 0, 0, 0, /**/ 2, 0, 0, /**/ 0, 2, 0, /**/ -1, 0, 2};
  std::vector<float> probs(static_cast<size_t>(N * E));
  const Routing r = route_forward(make_spec(MoERouter::expert_choice, E, 1, N, 1, 2), logits.data(), nullptr, probs.data());
  EXPECT_EQ(pairs_of(r), (Pairs{{0, 0}, {0, 3}, {1, 1}, {1, 4}, {2, 1}, {2, 5}}));
  EXPECT_EQ(r.load, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(r.offered, 6);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(r.aux_loss, 0.0);
  const double e = std::exp(1.0), e3 = std::pow(e, 3);
  const std::vector<double> gates = {e3 / (e3 + 2), e * e / (e * e + 2), e3 / (1 + 2 * e3),
                                     e * e / (e * e + 2), e3 / (1 + 2 * e3), e * e / (e * e + 1 + 1 / e)};
  ASSERT_EQ(r.size(), 6);
  for (int a = 0; a < 6; ++a) EXPECT_NEAR(r.gate[size_t(a)], gates[size_t(a)], 1e-6) << a;

  // Ties go to the lower token: rows 1, 2 identical (favour e0), rows 0, 3 identical (favour e1).
  const std::vector<float> tie = {0, 1, /**/ 1, 0, /**/ 1, 0, /**/ 0, 1};
  std::vector<float> ptie(8);
  const Routing t = route_forward(make_spec(MoERouter::expert_choice, 2, 1, 4, 1, 1), tie.data(), nullptr, ptie.data());
  EXPECT_EQ(pairs_of(t), (Pairs{{0, 1}, {1, 0}}));
  EXPECT_EQ(t.dropped, 2);

  // C ≥ T: every expert takes every token.
  const Routing all = route_forward(make_spec(MoERouter::expert_choice, E, 1, N, 1, 10), logits.data(), nullptr, probs.data());
  EXPECT_EQ(all.size(), E * N);
  EXPECT_EQ(all.load, (std::vector<int64_t>{6, 6, 6}));
  EXPECT_EQ(all.dropped, 0);
}

TEST(MoERouter, ExpertChoiceMatchesANaiveReferenceWithGroups) {
  const int E = 4;
  const int64_t N = 24;
  const auto logits = randn(N * E, 51, 1.0f);
  std::vector<float> probs(static_cast<size_t>(N * E));
  for (int groups : {1, 2, 3})
    for (int64_t C : {1, 3, 5}) {
      const Routing r =
          route_forward(make_spec(MoERouter::expert_choice, E, 1, N, groups, C), logits.data(), nullptr, probs.data());
      int64_t untaken = 0;
      const Pairs want = expert_choice_ref(logits, E, N, groups, C, &untaken);
      EXPECT_EQ(pairs_of(r), want) << "G " << groups << " C " << C;
      EXPECT_EQ(r.size(), int64_t(groups) * E * C);
      EXPECT_EQ(r.dropped, untaken);
      EXPECT_EQ(r.offered, N);
      for (int64_t a = 0; a < r.size(); ++a) {
        const auto p = softmax_d(logits.data() + int64_t(r.token[size_t(a)]) * E, E);
        EXPECT_NEAR(r.gate[size_t(a)], p[size_t(r.expert[size_t(a)])], 1e-6);
      }
    }
}

// ---- route_backward against finite differences --------------------------------------------------
//
// J(logits, noise) = Σ_a c_a·gate_a + w·aux_loss with fixed random c and w, evaluated by route_forward.
// route_backward gets dgate = c and aux_weight = dJ/d(each group's aux) = w/G (aux_loss is the mean
// over the G groups). The router computes in fp32 (softmax, gates) and double (aux sums): with
// |J| = O(1) its rounding is ~1e-7·|J|, so a central difference with eps = 2e-3 carries ~1e-4 absolute
// rounding error and an O(eps²) = 4e-6 relative truncation error. Tolerance: rtol 1e-2 plus an
// absolute floor of 2e-3·max|grad| (and 1e-4) for near-zero entries. Logits have gaps far above eps and
// every evaluation checks that the selection (assignments, and the row/column orders that decide
// argmax, top-k, thresholds and expert choice) is the one of the unperturbed point.

namespace {

struct RouterFd {
  RouterSpec spec;
  std::vector<float> logits, noise;
  std::vector<float> c;  // per assignment
  double w = 0;
  Pairs base_pairs;
  std::vector<std::vector<int>> base_orders;
  int flips = 0;

  // The orderings the routing depends on: each row's order of logits (switch, gshard) or of the noisy
  // H (topk), or each column's order of probabilities within its group (expert choice).
  std::vector<std::vector<int>> orders() const {
    const int E = spec.experts;
    const int64_t N = spec.tokens;
    std::vector<std::vector<int>> o;
    if (spec.kind == MoERouter::expert_choice) {
      const int64_t T = N / spec.groups;
      for (int g = 0; g < spec.groups; ++g)
        for (int e = 0; e < E; ++e) {
          std::vector<double> col;
          for (int64_t n = g * T; n < (g + 1) * T; ++n) col.push_back(softmax_d(logits.data() + n * E, E)[size_t(e)]);
          o.push_back(order_desc(col));
        }
      return o;
    }
    std::vector<double> H(logits.begin(), logits.end());
    if (spec.kind == MoERouter::topk) H = noisy_topk_ref(spec, logits, noise).H;
    for (int64_t n = 0; n < N; ++n) o.push_back(order_desc(std::vector<double>(H.begin() + n * E, H.begin() + (n + 1) * E)));
    return o;
  }

  double J() {
    std::vector<float> probs(logits.size());
    const Routing r = route_forward(spec, logits.data(), spec.kind == MoERouter::topk ? noise.data() : nullptr, probs.data());
    if (pairs_of(r) != base_pairs || orders() != base_orders) ++flips;
    double j = w * r.aux_loss;
    for (int64_t a = 0; a < r.size() && a < int64_t(c.size()); ++a) j += double(c[size_t(a)]) * r.gate[size_t(a)];
    return j;
  }

  void check(const std::string& what, uint32_t seed) {
    std::vector<float> probs(logits.size());
    const bool noisy = spec.kind == MoERouter::topk;
    const Routing r = route_forward(spec, logits.data(), noisy ? noise.data() : nullptr, probs.data());
    base_pairs = pairs_of(r);
    base_orders = orders();
    c = randn(r.size(), seed, 1.0f);
    w = 0.7;
    std::vector<float> dlogits(logits.size(), 99.0f), dnoise(logits.size(), 99.0f);
    route_backward(spec, logits.data(), noisy ? noise.data() : nullptr, probs.data(), r.token.data(), r.expert.data(),
                   c.data(), r.size(), w / spec.groups, dlogits.data(), noisy ? dnoise.data() : nullptr);
    // The aux term alone must carry gradient (else w's scaling would go untested) — compare with the
    // gradient of the gate term alone.
    std::vector<float> dgate_only(logits.size());
    route_backward(spec, logits.data(), noisy ? noise.data() : nullptr, probs.data(), r.token.data(), r.expert.data(),
                   c.data(), r.size(), 0.0, dgate_only.data(), noisy ? std::vector<float>(logits.size()).data() : nullptr);
    if (spec.kind != MoERouter::expert_choice) {
      double diff = 0;
      for (size_t i = 0; i < dlogits.size(); ++i) diff = std::max(diff, double(std::fabs(dlogits[i] - dgate_only[i])));
      EXPECT_GT(diff, 1e-3) << what << ": the aux loss has no visible gradient";
    }
    const gradcheck::Tol tol{1e-2, 2e-3, 1e-4};
    const float eps = 2e-3f;
    auto f = [this] { return J(); };
    gradcheck::check_elements(what + " dlogits", f, logits.data(), dlogits.data(), int64_t(logits.size()), eps, tol);
    if (noisy)
      gradcheck::check_elements(what + " dnoise_logits", f, noise.data(), dnoise.data(), int64_t(noise.size()), eps, tol);
    EXPECT_EQ(flips, 0) << what << ": the selection changed under perturbation; pick logits with wider gaps";
  }
};

}  // namespace

TEST(MoERouter, SwitchBackwardMatchesFiniteDifferences) {
  RouterFd t;
  t.spec = make_spec(MoERouter::switch_, 4, 1, 12, 2, 2, DropPolicy::probs);
  t.logits = randn(12 * 4, 61, 1.5f);
  std::vector<float> probs(t.logits.size());
  const Routing r = route_forward(t.spec, t.logits.data(), nullptr, probs.data());
  EXPECT_GT(r.dropped, 0);  // capacity drops some assignments (their gates get no gradient)
  t.check("switch", 62);
  t.spec.policy = DropPolicy::position;
  t.flips = 0;
  t.check("switch/position", 63);
}

TEST(MoERouter, GShardBackwardMatchesFiniteDifferences) {
  RouterFd t;
  t.spec = make_spec(MoERouter::gshard, 4, 2, 12, 2, 3, DropPolicy::probs);
  t.logits = randn(12 * 4, 71, 1.5f);
  std::vector<float> probs(t.logits.size());
  const Routing r = route_forward(t.spec, t.logits.data(), nullptr, probs.data());
  EXPECT_GT(r.dropped, 0);
  t.check("gshard", 72);
  // Training with random routing: the uniform draws are fixed, so J stays smooth.
  t.spec.training = true;
  t.spec.capacity = 0;
  const Routing rt = route_forward(t.spec, t.logits.data(), nullptr, probs.data());
  EXPECT_LT(rt.size(), 24);  // some seconds skipped
  t.flips = 0;
  t.check("gshard/training", 73);
}

TEST(MoERouter, NoisyTopKBackwardMatchesFiniteDifferences) {
  for (bool training : {false, true}) {
    RouterFd t;
    t.spec = make_spec(MoERouter::topk, 4, 2, 12, 2, 0, DropPolicy::probs, training);
    t.logits = randn(12 * 4, 81, 1.5f);
    t.noise = randn(12 * 4, 82, 0.7f, -0.3f);
    t.check(training ? "topk/training" : "topk", 83);
  }
  // k = 1 with a capacity that drops (dropped gates still count in the importance).
  RouterFd t;
  t.spec = make_spec(MoERouter::topk, 3, 1, 12, 1, 3, DropPolicy::probs, true);
  t.logits = randn(12 * 3, 84, 1.5f);
  t.noise = randn(12 * 3, 85, 0.5f);
  std::vector<float> probs(t.logits.size());
  EXPECT_GT(route_forward(t.spec, t.logits.data(), t.noise.data(), probs.data()).dropped, 0);
  t.check("topk/k1/capacity", 86);
}

TEST(MoERouter, ExpertChoiceBackwardMatchesFiniteDifferences) {
  RouterFd t;
  t.spec = make_spec(MoERouter::expert_choice, 4, 1, 12, 2, 2);
  t.logits = randn(12 * 4, 91, 1.5f);
  t.check("expert_choice", 92);
}
