// The MoE block (src/moe/moe_layer.*, docs/design.md §12) on one rank — no expert or tensor
// parallelism — against a naive dense reference written here (each assignment's expert MLP
// y = GeLU(x·W1 + b1)·W2 + b2 in double, out[token] += gate·y), its backward against central finite
// differences of J = Σ out ⊙ R + w·aux, the kept tensors' sizes against analysis::moe_mlp_kept_bytes,
// and expert dropout's mask against the Philox element the design names.
// Past the usual length on purpose: the block's cases share one dense reference and its finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "analysis/moe_formulas.hpp"
#include "core/config.hpp"
#include "gradcheck_util.hpp"
#include "moe/moe_layer.hpp"
#include "moe/router.hpp"
#include "random/philox.hpp"
#include "tensor/bf16.hpp"

using namespace lattice;
using namespace lattice::moe;
using gradcheck::randn;

namespace {

using Pairs = std::vector<std::pair<int, int>>;  // (expert, token) in dispatch order

// GPT-2's tanh GeLU (src/kernels/gelu.cpp), in double.
double gelu(double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }

std::vector<double> softmax_d(const double* x, int n) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, x[i]);
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += p[size_t(i)] = std::exp(x[i] - m);
  for (auto& v : p) v /= sum;
  return p;
}

std::vector<int> order_desc(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  return idx;
}

// One MoE block with its weights, gradients and context: N tokens of width h, E experts of hidden f.
struct Block {
  int64_t N, h, f;
  int E;
  std::vector<float> x, wg, wn;
  std::vector<std::vector<float>> w1, b1, w2, b2;
  std::vector<float> gwg, gwn;
  std::vector<std::vector<float>> gw1, gb1, gw2, gb2;
  MoEContext c;
  MoEKept kept;
  MoEWorkspace ws;
  MoEStats stats;

  Block(MoERouter kind, int64_t N_, int64_t h_, int64_t f_, int E_, int k, int groups, int64_t capacity, uint32_t seed,
        float router_std = 1.0f)
      : N(N_), h(h_), f(f_), E(E_) {
    x = randn(N * h, seed, 1.0f);
    wg = randn(h * E, seed + 1, router_std);
    wn = randn(h * E, seed + 2, 0.3f, -0.5f);
    for (int e = 0; e < E; ++e) {
      w1.push_back(randn(h * f, seed + 10 + 4 * e, 1.0f / std::sqrt(float(h))));
      b1.push_back(randn(f, seed + 11 + 4 * e, 0.3f));
      w2.push_back(randn(f * h, seed + 12 + 4 * e, 1.0f / std::sqrt(float(f))));
      b2.push_back(randn(h, seed + 13 + 4 * e, 0.3f));
    }
    c.route.kind = kind, c.route.experts = E, c.route.k = k, c.route.tokens = N, c.route.groups = groups;
    c.route.capacity = capacity, c.route.training = false;
    c.route.stream = DropoutStream{2024, 11, 1, DropoutSite::moe_noise};
    c.route.seq = N, c.route.first_row = 0;
    c.h = h, c.ffn_local = f, c.ffn_total = f, c.dtype = DType::fp32, c.tp_rank = 0, c.tp = nullptr, c.ep = nullptr;
    c.expert0 = 0, c.local_experts = E, c.expert_dropout = 0.0f, c.aux_coeff = 1.0, c.layer = 1;
  }

  bool noisy() const { return c.route.kind == MoERouter::topk; }

  // The experts' GEMM weights in the activation dtype (bf16 copies under bf16), the router fp32.
  std::vector<std::vector<uint16_t>> half1, half2;
  MoEWeights weights() {
    MoEWeights w;
    w.router = wg.data(), w.router_noise = noisy() ? wn.data() : nullptr;
    half1.assign(size_t(E), {}), half2.assign(size_t(E), {});
    for (int e = 0; e < E; ++e) {
      GemmOperand o1 = f32_operand(w1[size_t(e)].data()), o2 = f32_operand(w2[size_t(e)].data());
      if (c.dtype == DType::bf16) {
        half1[size_t(e)].resize(w1[size_t(e)].size()), half2[size_t(e)].resize(w2[size_t(e)].size());
        to_bf16(w1[size_t(e)].data(), half1[size_t(e)].data(), int64_t(w1[size_t(e)].size()));
        to_bf16(w2[size_t(e)].data(), half2[size_t(e)].data(), int64_t(w2[size_t(e)].size()));
        o1 = {half1[size_t(e)].data(), DType::bf16}, o2 = {half2[size_t(e)].data(), DType::bf16};
      }
      w.experts.push_back({o1, o2, b1[size_t(e)].data(), b2[size_t(e)].data()});
    }
    return w;
  }

  // Forward; returns the auxiliary loss (mean over groups) read from the stats (aux_coeff = 1).
  double forward(std::vector<float>& out) {
    out.assign(size_t(N * h), -7.0f);
    stats = MoEStats{};
    c.stats = &stats;
    moe_forward(out.data(), x.data(), kept, weights(), c, ws);
    return stats.aux_loss_tokens / double(N);
  }

  void zero_grads() {
    gwg.assign(wg.size(), 0.0f), gwn.assign(wn.size(), 0.0f);
    gw1.assign(size_t(E), std::vector<float>(size_t(h * f), 0.0f));
    gb1.assign(size_t(E), std::vector<float>(size_t(f), 0.0f));
    gw2.assign(size_t(E), std::vector<float>(size_t(f * h), 0.0f));
    gb2.assign(size_t(E), std::vector<float>(size_t(h), 0.0f));
  }

  void backward(std::vector<float>& dx, const std::vector<float>& dout, double aux_weight) {
    zero_grads();
    MoEGrads g;
    g.router = gwg.data(), g.router_noise = noisy() ? gwn.data() : nullptr;
    for (int e = 0; e < E; ++e)
      g.experts.push_back({gw1[size_t(e)].data(), gb1[size_t(e)].data(), gw2[size_t(e)].data(), gb2[size_t(e)].data()});
    dx.assign(size_t(N * h), 55.0f);  // overwritten
    moe_backward(dx.data(), dout.data(), x.data(), kept, weights(), g, c, aux_weight, ws);
  }

  Pairs kept_pairs() const {
    const auto* d = static_cast<const int32_t*>(kept.dispatch.data());
    const int64_t A = kept.assignments;
    Pairs p;
    for (int64_t a = 0; a < A; ++a) p.emplace_back(d[A + a], d[a]);
    return p;
  }

  // Router logits x·W (W = wg or wn) in double.
  std::vector<double> logits_d(const std::vector<float>& w) const {
    std::vector<double> l(static_cast<size_t>(N * E), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int e = 0; e < E; ++e)
        for (int64_t i = 0; i < h; ++i) l[size_t(n * E + e)] += double(x[size_t(n * h + i)]) * w[size_t(i * E + e)];
    return l;
  }

  // The routing the block should use: route_forward (tested in test_moe_router.cpp) on the test's logits.
  Routing reference_routing(std::vector<float>* probs_out = nullptr) const {
    const auto ld = logits_d(wg), nd = logits_d(wn);
    std::vector<float> l(ld.begin(), ld.end()), nl(nd.begin(), nd.end()), probs(l.size());
    Routing r = route_forward(c.route, l.data(), noisy() ? nl.data() : nullptr, probs.data());
    if (probs_out) *probs_out = probs;
    return r;
  }

  // Expert dropout's keep decision for hidden column j of (global token g, expert e).
  bool keep(uint64_t g, int e, int64_t j) const {
    DropoutStream st = c.route.stream;
    st.site = DropoutSite::expert_dropout;
    const uint64_t idx = (g * uint64_t(E) + uint64_t(e)) * uint64_t(c.ffn_total) + uint64_t(j);
    const uint32_t threshold = uint32_t(std::min(double(c.expert_dropout) * 4294967296.0, 4294967295.0));
    return philox_bits(st, idx) >= threshold;
  }

  // The naive dense reference: out[token] += gate · (dropout(GeLU(x·W1 + b1))·W2 + b2), in double.
  std::vector<double> reference_forward(const Routing& r) const {
    std::vector<double> out(static_cast<size_t>(N * h), 0.0);
    const double p = c.expert_dropout;
    for (int64_t a = 0; a < r.size(); ++a) {
      const int t = r.token[size_t(a)], e = r.expert[size_t(a)];
      const uint64_t g = c.route.global_token(t);
      std::vector<double> hid(static_cast<size_t>(f));
      for (int64_t j = 0; j < f; ++j) {
        double s = b1[size_t(e)][size_t(j)];
        for (int64_t i = 0; i < h; ++i) s += double(x[size_t(t * h + i)]) * w1[size_t(e)][size_t(i * f + j)];
        hid[size_t(j)] = gelu(s);
        if (p > 0) hid[size_t(j)] = keep(g, e, j) ? hid[size_t(j)] / (1.0 - p) : 0.0;
      }
      for (int64_t i = 0; i < h; ++i) {
        double y = b2[size_t(e)][size_t(i)];
        for (int64_t j = 0; j < f; ++j) y += hid[size_t(j)] * w2[size_t(e)][size_t(j * h + i)];
        out[size_t(t * h + i)] += double(r.gate[size_t(a)]) * y;
      }
    }
    return out;
  }

  // What the routing depends on, beside the assignments: each row's order of logits (argmax, top-2,
  // f of the aux loss), each row's order of noisy H (topk), each column's order of probabilities per
  // group (expert choice).
  std::vector<std::vector<int>> orders() const {
    std::vector<std::vector<int>> o;
    const auto l = logits_d(wg);
    if (c.route.kind == MoERouter::expert_choice) {
      const int64_t T = N / c.route.groups;
      std::vector<std::vector<double>> p;
      for (int64_t n = 0; n < N; ++n) p.push_back(softmax_d(l.data() + n * E, E));
      for (int g = 0; g < c.route.groups; ++g)
        for (int e = 0; e < E; ++e) {
          std::vector<double> col;
          for (int64_t n = g * T; n < (g + 1) * T; ++n) col.push_back(p[size_t(n)][size_t(e)]);
          o.push_back(order_desc(col));
        }
      return o;
    }
    std::vector<double> H = l;
    if (noisy()) {
      const auto nl = logits_d(wn);
      DropoutStream st = c.route.stream;
      st.site = DropoutSite::moe_noise;
      for (int64_t n = 0; n < N; ++n)
        for (int e = 0; e < E; ++e) {
          const double eps = c.route.training
                                 ? double(philox_normal(st, c.route.global_token(n) * uint64_t(E) + uint64_t(e)))
                                 : 0.0;
          H[size_t(n * E + e)] += eps * std::log1p(std::exp(nl[size_t(n * E + e)]));
        }
    }
    for (int64_t n = 0; n < N; ++n) o.push_back(order_desc(std::vector<double>(H.begin() + n * E, H.begin() + (n + 1) * E)));
    return o;
  }
};

void expect_forward_matches_reference(Block& b, const std::string& what) {
  std::vector<float> out;
  const double aux = b.forward(out);
  const Routing r = b.reference_routing();
  EXPECT_EQ(b.kept_pairs(), [&] {
    Pairs p;
    for (int64_t a = 0; a < r.size(); ++a) p.emplace_back(r.expert[size_t(a)], r.token[size_t(a)]);
    return p;
  }()) << what;
  const auto ref = b.reference_forward(r);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(out[i]) - ref[i]) / (1.0 + std::fabs(ref[i])));
  EXPECT_LT(worst, 2e-5) << what << ": output differs from the dense reference";
  EXPECT_NEAR(aux, r.aux_loss, 1e-6 * std::max(1.0, r.aux_loss)) << what;
  // Tokens no kept assignment names pass nothing through the block.
  std::vector<int> routed(static_cast<size_t>(b.N), 0);
  for (int64_t a = 0; a < r.size(); ++a) routed[size_t(r.token[size_t(a)])] = 1;
  for (int64_t n = 0; n < b.N; ++n)
    if (!routed[size_t(n)]) {
      for (int64_t i = 0; i < b.h; ++i) EXPECT_EQ(out[size_t(n * b.h + i)], 0.0f) << what << " dropped token " << n;
    }
  // Stats: offered, dropped and load as the routing's.
  EXPECT_EQ(b.stats.offered, r.offered);
  EXPECT_EQ(b.stats.dropped, r.dropped);
  ASSERT_GT(b.stats.load.size(), size_t(b.c.layer));
  EXPECT_EQ(b.stats.load[size_t(b.c.layer)], r.load);
}

// Gradient check of moe_backward (see gradcheck_util.hpp for the tolerances: the block runs fp32
// GEMMs, the objective is summed in double, eps = 1e-2, rtol 2e-2 with an absolute floor of
// 2e-3·max|grad|). J = Σ out ⊙ R + w·aux; the backward gets dout = R and aux_weight = w/G (aux is the
// mean of the G groups' losses). Every evaluation checks that the routing (assignments and the orders
// that decide them and the aux loss's f) is the unperturbed one.
void gradcheck_block(Block& b, const std::string& what, uint32_t seed, double w = 0.8) {
  std::vector<float> out;
  b.forward(out);
  const Pairs base = b.kept_pairs();
  const auto base_orders = b.orders();
  const auto R = randn(b.N * b.h, seed, 1.0f);
  std::vector<float> dx;
  b.backward(dx, R, w / b.c.route.groups);
  int flips = 0;
  auto J = [&] {
    std::vector<float> o;
    const double aux = b.forward(o);
    if (b.kept_pairs() != base || b.orders() != base_orders) ++flips;
    return gradcheck::dot(o.data(), R.data(), int64_t(o.size())) + w * aux;
  };
  const float eps = 1e-2f;
  // Copies: forward inside J overwrites nothing of these, but keep the analytic values apart.
  const auto gx = dx, gwg = b.gwg, gwn = b.gwn;
  const auto gw1 = b.gw1, gb1 = b.gb1, gw2 = b.gw2, gb2 = b.gb2;
  gradcheck::check_elements(what + " dx", J, b.x.data(), gx.data(), int64_t(gx.size()), eps);
  gradcheck::check_elements(what + " dW_router", J, b.wg.data(), gwg.data(), int64_t(gwg.size()), eps);
  if (b.noisy()) gradcheck::check_elements(what + " dW_noise", J, b.wn.data(), gwn.data(), int64_t(gwn.size()), eps);
  for (int e = 0; e < b.E; ++e) {
    const std::string ex = what + " expert " + std::to_string(e);
    gradcheck::check_elements(ex + " dW1", J, b.w1[size_t(e)].data(), gw1[size_t(e)].data(), b.h * b.f, eps);
    gradcheck::check_elements(ex + " db1", J, b.b1[size_t(e)].data(), gb1[size_t(e)].data(), b.f, eps);
    gradcheck::check_elements(ex + " dW2", J, b.w2[size_t(e)].data(), gw2[size_t(e)].data(), b.f * b.h, eps);
    gradcheck::check_elements(ex + " db2", J, b.b2[size_t(e)].data(), gb2[size_t(e)].data(), b.h, eps);
  }
  EXPECT_EQ(flips, 0) << what << ": the routing changed under perturbation; pick inputs with wider gaps";
  // The router weight's gradient is not only the aux term's: the gates carry the output's gradient.
  std::vector<float> dx0;
  b.forward(out);
  b.backward(dx0, R, 0.0);
  double diff = 0;
  for (size_t i = 0; i < gwg.size(); ++i) diff = std::max(diff, double(std::fabs(gwg[i] - b.gwg[i])));
  if (b.c.route.kind != MoERouter::expert_choice) {
    EXPECT_GT(diff, 1e-4) << what << ": aux weight had no effect";
  }
  EXPECT_GT(gradcheck::max_abs(b.gwg.data(), int64_t(b.gwg.size())), 1e-3) << what << ": no gate gradient";
}

}  // namespace

// ---- Forward against the dense reference ---------------------------------------------------------

TEST(MoEBlock, ForwardEqualsTheDenseReferenceForEveryRouter) {
  // N = 8, h = 6, f = 10, E = 3.
  {
    Block b(MoERouter::switch_, 8, 6, 10, 3, 1, 1, 0, 100);
    expect_forward_matches_reference(b, "switch");
    EXPECT_EQ(b.kept.assignments, 8);
  }
  {
    // C = 2 per group of 4 (G = 2): some tokens dropped, their rows zero.
    Block b(MoERouter::switch_, 8, 6, 10, 3, 1, 2, 1, 101);
    expect_forward_matches_reference(b, "switch/capacity");
    EXPECT_GT(b.stats.dropped, 0);
  }
  {
    Block b(MoERouter::gshard, 8, 6, 10, 3, 2, 1, 0, 102);
    expect_forward_matches_reference(b, "gshard");
    EXPECT_EQ(b.kept.assignments, 16);
  }
  {
    Block b(MoERouter::gshard, 8, 6, 10, 3, 2, 1, 4, 103);
    b.c.route.training = true;  // random routing
    expect_forward_matches_reference(b, "gshard/training/capacity");
    EXPECT_LT(b.kept.assignments, 16);
  }
  {
    Block b(MoERouter::topk, 8, 6, 10, 3, 2, 1, 0, 104);
    b.c.route.training = true;  // noise
    expect_forward_matches_reference(b, "topk/training");
  }
  {
    Block b(MoERouter::expert_choice, 8, 6, 10, 3, 1, 2, 2, 105);
    expect_forward_matches_reference(b, "expert_choice");
    EXPECT_EQ(b.kept.assignments, 2 * 3 * 2);
  }
  {
    // More rows than one power-of-two chunk per expert (the row chunking of moe_forward).
    Block b(MoERouter::switch_, 45, 6, 10, 3, 1, 1, 0, 106);
    expect_forward_matches_reference(b, "switch/45 tokens");
  }
}

// ---- Backward against finite differences ---------------------------------------------------------

TEST(MoEBlock, SwitchBackwardMatchesFiniteDifferences) {
  Block b(MoERouter::switch_, 8, 6, 10, 3, 1, 2, 2, 200);  // G = 2, C = 2 per group
  std::vector<float> out;
  b.forward(out);
  EXPECT_GT(b.stats.dropped, 0) << "the case should drop an assignment";
  gradcheck_block(b, "switch", 201);
}

TEST(MoEBlock, GShardBackwardMatchesFiniteDifferences) {
  Block b(MoERouter::gshard, 8, 6, 10, 3, 2, 1, 5, 210);  // C = 5 of 16 offered over 3 experts
  std::vector<float> out;
  b.forward(out);
  EXPECT_GT(b.stats.dropped, 0);
  gradcheck_block(b, "gshard", 211);
}

TEST(MoEBlock, ExpertChoiceBackwardMatchesFiniteDifferences) {
  Block b(MoERouter::expert_choice, 8, 6, 10, 3, 1, 1, 3, 220);
  gradcheck_block(b, "expert_choice", 221);
}

TEST(MoEBlock, NoisyTopKBackwardMatchesFiniteDifferences) {
  Block b(MoERouter::topk, 8, 6, 10, 3, 2, 1, 0, 230);
  b.c.route.training = true;  // the noise is a pure function of (seed, step, layer, token)
  gradcheck_block(b, "topk/training", 231);
}

TEST(MoEBlock, BackwardWithExpertDropoutMatchesFiniteDifferences) {
  Block b(MoERouter::switch_, 8, 6, 10, 3, 1, 1, 0, 240);
  b.c.expert_dropout = 0.3f;  // the mask is fixed by (seed, step, layer, token, expert, column)
  gradcheck_block(b, "switch/expert dropout", 241);
}

// ---- Kept tensors against the formula ------------------------------------------------------------

TEST(MoEBlock, KeptBuffersHaveTheBytesTheFormulaCounts) {
  struct Case {
    const char* name;
    MoERouter kind;
    int k, groups;
    int64_t capacity;
    bool training;
    float expert_dropout;
    DType dtype;
  };
  const Case cases[] = {
      {"switch", MoERouter::switch_, 1, 1, 0, false, 0.0f, DType::fp32},
      {"switch/capacity", MoERouter::switch_, 1, 2, 1, false, 0.0f, DType::fp32},
      {"gshard/training", MoERouter::gshard, 2, 1, 4, true, 0.2f, DType::fp32},
      {"topk/expert dropout", MoERouter::topk, 2, 1, 0, true, 0.2f, DType::fp32},
      {"expert_choice", MoERouter::expert_choice, 1, 2, 3, false, 0.0f, DType::fp32},
      {"topk/bf16", MoERouter::topk, 2, 1, 4, true, 0.1f, DType::bf16},
  };
  for (const Case& k : cases) {
    Block b(k.kind, 8, 6, 10, 3, k.k, k.groups, k.capacity, 300);
    b.c.route.training = k.training, b.c.expert_dropout = k.expert_dropout, b.c.dtype = k.dtype;
    std::vector<float> out;
    b.forward(out);
    const Routing r = b.reference_routing();
    const int64_t A = r.size();
    // A by hand for the capacity-free cases: k·N; expert choice G·E·C.
    if (k.capacity == 0) {
      EXPECT_EQ(A, k.k * 8) << k.name;
    }
    if (k.kind == MoERouter::expert_choice) {
      EXPECT_EQ(A, 2 * 3 * 3) << k.name;
    }
    EXPECT_EQ(b.kept.assignments, A) << k.name;
    EXPECT_EQ(b.kept.received, A) << k.name;  // no expert parallelism: R = A

    analysis::MoEKeptShape m;
    m.s = 8, m.b = 1, m.h = 6, m.t = 1, m.sp = false, m.d = bytes_of(k.dtype), m.dropout = false;
    m.experts = 3, m.ffn_hidden = 10, m.noisy_router = k.kind == MoERouter::topk;
    m.expert_dropout = k.expert_dropout > 0, m.assignments = A, m.received = A;
    const analysis::MoEKeptBytes want = analysis::moe_mlp_kept_bytes(m);
    const MoEKept& kp = b.kept;
    EXPECT_EQ(int64_t(kp.router_probs.bytes() + kp.router_logits.bytes() + kp.router_noise_logits.bytes()), want.router)
        << k.name;
    EXPECT_EQ(int64_t(kp.dispatch.bytes()), want.dispatch) << k.name;
    EXPECT_EQ(int64_t(kp.combine_weights.bytes()) + kp.combine_input.bytes(), want.combine) << k.name;
    EXPECT_EQ(kp.expert_fc1_in.bytes() + kp.expert_gelu_in.bytes() + kp.expert_fc2_in.bytes() +
                  int64_t(kp.expert_mask.kept_bytes()),
              want.experts)
        << k.name;
    // And the same by hand: fp32 [N, E] once (thrice for noisy top-k); int32 2A + 2E; 4A + A·h·d;
    // R·(h + 2f)·d + R·f mask bytes.
    const int64_t d = bytes_of(k.dtype);
    EXPECT_EQ(want.router, 8 * 3 * 4 * (m.noisy_router ? 3 : 1));
    EXPECT_EQ(want.dispatch, (2 * A + 6) * 4);
    EXPECT_EQ(want.combine, 4 * A + A * 6 * d);
    EXPECT_EQ(want.experts, A * (6 + 20) * d + (k.expert_dropout > 0 ? A * 10 : 0));
  }
}

// ---- Expert dropout ------------------------------------------------------------------------------

TEST(MoEBlock, ExpertDropoutForwardEqualsTheReferenceWithThePhiloxMask) {
  Block b(MoERouter::gshard, 8, 6, 10, 3, 2, 1, 0, 400);
  b.c.expert_dropout = 0.3f;
  expect_forward_matches_reference(b, "gshard/expert dropout");
  // Without dropout the output differs (the mask did something).
  std::vector<float> with, without;
  b.forward(with);
  b.c.expert_dropout = 0.0f;
  b.forward(without);
  EXPECT_NE(with, without);
}

TEST(MoEBlock, ExpertDropoutMaskIsAPureFunctionOfItsPosition) {
  // 512 tokens (4 rows of 128), E = 3, f = 64, switch without capacity: R = 512 rows of 64 columns.
  const int64_t N = 512, h = 6, f = 64, s = 128;
  const int E = 3;
  const float p = 0.25f;
  Block b(MoERouter::switch_, N, h, f, E, 1, 1, 0, 500);
  b.c.route.seq = s;
  b.c.expert_dropout = p;
  std::vector<float> out1, out2;
  b.forward(out1);
  const int64_t R = b.kept.received;
  ASSERT_EQ(R, N);
  const auto* mask = static_cast<const uint8_t*>(b.kept.expert_mask.data());
  const std::vector<uint8_t> mask1(mask, mask + R * f);
  const Pairs rows = b.kept_pairs();  // no EP: the experts' rows are the assignments in order
  int64_t kept_count = 0, wrong = 0;
  for (int64_t i = 0; i < R; ++i) {
    const uint64_t g = b.c.route.global_token(rows[size_t(i)].second);
    for (int64_t j = 0; j < f; ++j) {
      kept_count += mask1[size_t(i * f + j)];
      wrong += mask1[size_t(i * f + j)] != (b.keep(g, rows[size_t(i)].first, j) ? 1 : 0);
    }
  }
  EXPECT_EQ(wrong, 0) << "mask elements other than philox(expert_dropout, (g·E + e)·f + j) ≥ p·2³²";
  // Binomial(32768, .75): σ of the fraction = sqrt(.1875/32768) = .0024; 5σ bound.
  const double frac = double(kept_count) / double(R * f);
  EXPECT_NEAR(frac, 1.0 - p, 5 * std::sqrt(p * (1 - p) / double(R * f)));
  // Twice: the same output and mask.
  b.forward(out2);
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(0, std::memcmp(mask1.data(), b.kept.expert_mask.data(), size_t(R * f)));

  // Rows 2..3 alone (first_row 2): each token's mask row is the one it had in the whole micro-batch.
  Block tail(MoERouter::switch_, N / 2, h, f, E, 1, 1, 0, 500);
  tail.x.assign(b.x.begin() + (N / 2) * h, b.x.end());
  tail.wg = b.wg, tail.w1 = b.w1, tail.b1 = b.b1, tail.w2 = b.w2, tail.b2 = b.b2;
  tail.c.route.seq = s, tail.c.route.first_row = 2, tail.c.expert_dropout = p;
  std::vector<float> out_tail;
  tail.forward(out_tail);
  const Pairs tail_rows = tail.kept_pairs();
  const auto* tmask = static_cast<const uint8_t*>(tail.kept.expert_mask.data());
  int64_t compared = 0, differ = 0;
  for (size_t i = 0; i < tail_rows.size(); ++i) {
    const auto it = std::find(rows.begin(), rows.end(), std::make_pair(tail_rows[i].first, tail_rows[i].second + int(N / 2)));
    ASSERT_NE(it, rows.end());
    const int64_t j = int64_t(it - rows.begin());
    ++compared;
    differ += std::memcmp(tmask + i * f, mask1.data() + j * f, size_t(f)) != 0;
  }
  EXPECT_EQ(compared, N / 2);
  EXPECT_EQ(differ, 0);
  double worst = 0;  // the same values up to the GEMMs' row chunking
  for (size_t i = 0; i < out_tail.size(); ++i)
    worst = std::max(worst, double(std::fabs(out_tail[i] - out1[size_t((N / 2) * h) + i])));
  EXPECT_LT(worst, 1e-5);

  // Another step draws another mask.
  b.c.route.stream.step += 1;
  b.forward(out2);
  EXPECT_NE(0, std::memcmp(mask1.data(), b.kept.expert_mask.data(), size_t(R * f)));
  EXPECT_NE(out1, out2);
}
