// Every op's hand-written backward against central finite differences of the scalar objective
// sum(out · r) with a random upstream gradient r (see gradcheck_util.hpp for the tolerances).
// Also checks the accumulate/overwrite contract each backward's header states.
// Past the usual length on purpose: one case an op, all through the same finite-difference check.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "gradcheck_util.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dropout.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/softmax.hpp"
#include "model/attention.hpp"
#include "model/transformer_layer.hpp"

using namespace lattice;
using gradcheck::randn;

namespace {

double weighted_sum(const std::vector<float>& out, const std::vector<float>& r) {
  return gradcheck::dot(out.data(), r.data(), int64_t(out.size()));
}

// a − b element by element (to strip a known starting value from an accumulated gradient).
std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

}  // namespace

TEST(OpsGradcheck, LayerNorm) {
  const int64_t N = 6, C = 24;
  auto inp = randn(N * C, 1, 1.5f, 0.7f);  // non-zero mean, non-unit variance
  auto w = randn(C, 2, 0.3f, 1.0f), b = randn(C, 3, 0.5f);
  const auto r = randn(N * C, 4);
  std::vector<float> out(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  auto f = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return weighted_sum(out, r);
  };
  f();
  // Each output row has zero mean and unit variance before the affine part.
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < C; ++i) m += (out[size_t(n * C + i)] - b[size_t(i)]) / w[size_t(i)];
    m /= double(C);
    for (int64_t i = 0; i < C; ++i) {
      const double z = (out[size_t(n * C + i)] - b[size_t(i)]) / w[size_t(i)] - m;
      v += z * z;
    }
    EXPECT_NEAR(m, 0.0, 1e-5);
    EXPECT_NEAR(v / double(C), 1.0, 1e-3);
  }
  // Backward accumulates into all three outputs: start them from a known non-zero value.
  const auto dinp0 = randn(N * C, 5), dw0 = randn(C, 6), db0 = randn(C, 7);
  auto dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                     N, C);
  const auto ginp = minus(dinp, dinp0), gw = minus(dw, dw0), gb = minus(db, db0);
  gradcheck::check_elements("layernorm dinp", f, inp.data(), ginp.data(), N * C, 1e-2f);
  gradcheck::check_elements("layernorm dweight", f, w.data(), gw.data(), C, 1e-2f);
  gradcheck::check_elements("layernorm dbias", f, b.data(), gb.data(), C, 1e-2f);
}

TEST(OpsGradcheck, Gelu) {
  const int64_t n = 97;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = -6.0f + 12.0f * float(i) / float(n - 1) + 0.013f;
  const auto r = randn(n, 11);
  std::vector<float> out(static_cast<size_t>(n));
  auto f = [&] {
    gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out, r);
  };
  f();
  // Against the tanh formula evaluated in double (GPT-2's GeLU).
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[size_t(i)];
    const double ref = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(out[size_t(i)], ref, 1e-5 * (1.0 + std::fabs(ref))) << "x = " << v;
  }
  std::vector<float> dinp(static_cast<size_t>(n), 123.0f);  // overwritten, not accumulated
  gelu_backward(dinp.data(), x.data(), r.data(), n);
  gradcheck::check_elements("gelu dinp", f, x.data(), dinp.data(), n, 1e-2f);
}

// The checks above can fail: the same harness rejects a GeLU gradient that is wrong by 5% at
// one element, or by 5% overall along the directions.
TEST(OpsGradcheck, HarnessRejectsWrongGradients) {
  const int64_t n = 64;
  auto x = randn(n, 12, 2.0f);
  const auto r = randn(n, 13);
  std::vector<float> out(static_cast<size_t>(n)), dinp(static_cast<size_t>(n));
  auto f = [&] {
    gelu_forward(out.data(), x.data(), n);
    return weighted_sum(out, r);
  };
  gelu_backward(dinp.data(), x.data(), r.data(), n);
  auto failures = [](const std::function<void()>& check) {
    ::testing::TestPartResultArray results;
    {
      ::testing::ScopedFakeTestPartResultReporter reporter(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
      check();
    }
    return results.size();
  };
  EXPECT_EQ(failures([&] { gradcheck::check_elements("gelu", f, x.data(), dinp.data(), n, 1e-2f); }), 0);
  EXPECT_EQ(failures([&] { gradcheck::check_directions("gelu", f, x.data(), dinp.data(), n, 1e-3f, 1); }), 0);
  const int64_t big = int64_t(std::max_element(dinp.begin(), dinp.end(),
                                               [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
                              dinp.begin());
  auto one_wrong = dinp;
  one_wrong[size_t(big)] *= 1.05f;
  EXPECT_GT(failures([&] { gradcheck::check_elements("gelu", f, x.data(), one_wrong.data(), n, 1e-2f); }), 0);
  auto scaled = dinp;
  for (auto& v : scaled) v *= 0.95f;
  EXPECT_GT(failures([&] { gradcheck::check_directions("gelu", f, x.data(), scaled.data(), n, 1e-3f, 1); }), 0);
}

TEST(OpsGradcheck, CausalSoftmax) {
  const int64_t batch = 3, s = 7, n = batch * s * s;
  auto scores = randn(n, 21, 2.0f);
  const auto r = randn(n, 22);
  std::vector<float> probs(static_cast<size_t>(n));
  auto f = [&] {
    softmax_causal_forward(probs.data(), scores.data(), batch, s);
    return weighted_sum(probs, r);
  };
  f();
  for (int64_t row = 0; row < batch * s; ++row) {
    const int64_t i = row % s;
    double sum = 0;
    for (int64_t j = 0; j < s; ++j) {
      const float p = probs[size_t(row * s + j)];
      if (j > i)
        EXPECT_EQ(p, 0.0f) << "future position " << j << " of query " << i;
      else
        EXPECT_GT(p, 0.0f);
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  std::vector<float> dscores(static_cast<size_t>(n), 55.0f);
  softmax_causal_backward(dscores.data(), r.data(), probs.data(), batch, s);
  for (int64_t row = 0; row < batch * s; ++row)
    for (int64_t j = row % s + 1; j < s; ++j) EXPECT_EQ(dscores[size_t(row * s + j)], 0.0f);
  // Future scores have no effect at all: their finite difference is exactly 0.
  gradcheck::check_elements("softmax dscores", f, scores.data(), dscores.data(), n, 1e-2f);

  // In place (both directions may alias) gives the same bits.
  f();  // probs of the unperturbed scores again
  auto inplace = scores;
  softmax_causal_forward(inplace.data(), inplace.data(), batch, s);
  EXPECT_EQ(inplace, probs);
  auto dinplace = r;
  softmax_causal_backward(dinplace.data(), dinplace.data(), probs.data(), batch, s);
  EXPECT_EQ(dinplace, dscores);
}

TEST(OpsGradcheck, DropoutWithFixedMask) {
  const int64_t n = 300;
  const float p = 0.3f;
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  dropout_mask_fill(mask.data(), DropoutStream{7, 3, 1, DropoutSite::attention}, 1000, n, p);
  int64_t kept = 0;
  for (auto m : mask) {
    ASSERT_TRUE(m == 0 || m == 1);
    kept += m;
  }
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, n);
  auto x = randn(n, 31);
  const auto r = randn(n, 32);
  std::vector<float> out(static_cast<size_t>(n));
  auto f = [&] {
    dropout_forward(out.data(), x.data(), mask.data(), n, p);
    return weighted_sum(out, r);
  };
  f();
  // Dropped elements are exactly zero.
  for (int64_t i = 0; i < n; ++i) {
    if (!mask[size_t(i)]) {
      EXPECT_EQ(out[size_t(i)], 0.0f);
    }
  }
  std::vector<float> dinp(static_cast<size_t>(n), -9.0f);
  dropout_backward(dinp.data(), r.data(), mask.data(), n, p);
  gradcheck::check_elements("dropout dinp", f, x.data(), dinp.data(), n, 1e-2f, {1e-3, 1e-4, 1e-6});
}

TEST(OpsGradcheck, Embedding) {
  const int64_t b = 2, s = 5, h = 8, V = 12;
  const std::vector<int32_t> ids = {3, 7, 3, 0, 11, 7, 7, 2, 3, 9};  // repeats accumulate
  auto wte = randn(V * h, 41), wpe = randn(s * h, 42);
  const auto r = randn(b * s * h, 43);
  std::vector<float> out(static_cast<size_t>(b * s * h));
  auto f = [&] {
    embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), b, s, h);
    return weighted_sum(out, r);
  };
  f();
  const auto dwte0 = randn(V * h, 44), dwpe0 = randn(s * h, 45);
  auto dwte = dwte0, dwpe = dwpe0;
  embedding_backward(dwte.data(), dwpe.data(), r.data(), ids.data(), b, s, h);
  const auto gte = minus(dwte, dwte0), gpe = minus(dwpe, dwpe0);
  // Rows of tokens that never occur get no gradient.
  for (int64_t tok : {1, 4, 5, 6, 8, 10})
    for (int64_t i = 0; i < h; ++i) EXPECT_EQ(dwte[size_t(tok * h + i)], dwte0[size_t(tok * h + i)]);
  gradcheck::check_elements("embedding dwte", f, wte.data(), gte.data(), V * h, 1e-2f, {1e-3, 1e-4, 1e-6});
  gradcheck::check_elements("embedding dwpe", f, wpe.data(), gpe.data(), s * h, 1e-2f, {1e-3, 1e-4, 1e-6});
}

TEST(OpsGradcheck, CrossEntropyWithPaddedVocab) {
  const int64_t N = 5, V = 10, Vp = 16;
  const std::vector<int32_t> targets = {0, 9, 4, 4, 7};
  auto logits = randn(N * Vp, 51, 2.0f);
  for (int64_t n = 0; n < N; ++n)  // large garbage in the padding must not matter
    for (int64_t j = V; j < Vp; ++j) logits[size_t(n * Vp + j)] = 50.0f;
  const float scale = 0.37f;
  std::vector<float> probs(static_cast<size_t>(N * Vp)), losses(static_cast<size_t>(N));
  auto f = [&] {
    probs = logits;
    cross_entropy_forward(probs.data(), losses.data(), targets.data(), N, V, Vp);
    double sum = 0;
    for (float l : losses) sum += l;
    return double(scale) * sum;
  };
  f();
  for (int64_t n = 0; n < N; ++n) {
    // Independent log-sum-exp over the real vocabulary in double.
    double mx = -1e30;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[size_t(n * Vp + j)]));
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(double(logits[size_t(n * Vp + j)]) - mx);
    const double ref = mx + std::log(z) - double(logits[size_t(n * Vp + targets[size_t(n)])]);
    EXPECT_NEAR(losses[size_t(n)], ref, 1e-5 * (1 + ref));
    double psum = 0;
    for (int64_t j = 0; j < V; ++j) {
      EXPECT_NEAR(probs[size_t(n * Vp + j)], std::exp(double(logits[size_t(n * Vp + j)]) - mx) / z, 1e-6);
      psum += probs[size_t(n * Vp + j)];
    }
    EXPECT_NEAR(psum, 1.0, 1e-5);
    for (int64_t j = V; j < Vp; ++j) EXPECT_EQ(probs[size_t(n * Vp + j)], 0.0f) << "padding predicted";
  }
  const auto probs_kept = probs;
  std::vector<float> dlogits(static_cast<size_t>(N * Vp), 77.0f);
  cross_entropy_backward(dlogits.data(), probs_kept.data(), targets.data(), N, Vp, scale);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = V; j < Vp; ++j) EXPECT_EQ(dlogits[size_t(n * Vp + j)], 0.0f) << "gradient on padding";
  gradcheck::check_elements("cross_entropy dlogits", f, logits.data(), dlogits.data(), N * Vp, 1e-2f);
  // In place, as the model calls it.
  auto inplace = probs_kept;
  cross_entropy_backward(inplace.data(), inplace.data(), targets.data(), N, Vp, scale);
  EXPECT_EQ(inplace, dlogits);
}

TEST(OpsGradcheck, LinearFp32) {
  const int64_t N = 6, in = 8, out = 12;
  auto x = randn(N * in, 61), w = randn(in * out, 62, 0.4f), bias = randn(out, 63);
  const auto r = randn(N * out, 64);
  std::vector<float> y(static_cast<size_t>(N * out));
  auto f = [&] {
    linear_forward(y.data(), f32_operand(x.data()), f32_operand(w.data()), bias.data(), N, in, out);
    return weighted_sum(y, r);
  };
  f();
  // y = x·W + b with W in [in, out] layout, against a plain triple loop.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double ref = bias[size_t(o)];
      for (int64_t i = 0; i < in; ++i) ref += double(x[size_t(n * in + i)]) * double(w[size_t(i * out + o)]);
      EXPECT_NEAR(y[size_t(n * out + o)], ref, 1e-5 * (1 + std::fabs(ref)));
    }
  std::vector<float> dx(static_cast<size_t>(N * in), 99.0f);  // overwritten
  const auto dw0 = randn(in * out, 65), db0 = randn(out, 66);
  auto dw = dw0, db = db0;  // accumulated
  linear_backward(dx.data(), dw.data(), db.data(), r.data(), f32_operand(r.data()), f32_operand(x.data()),
                  f32_operand(w.data()), N, in, out);
  const auto gw = minus(dw, dw0), gb = minus(db, db0);
  gradcheck::check_elements("linear dx", f, x.data(), dx.data(), N * in, 1e-2f, {1e-3, 1e-4, 1e-6});
  gradcheck::check_elements("linear dW", f, w.data(), gw.data(), in * out, 1e-2f, {1e-3, 1e-4, 1e-6});
  gradcheck::check_elements("linear db", f, bias.data(), gb.data(), out, 1e-2f, {1e-3, 1e-4, 1e-6});

  // dx = nullptr skips the input gradient but still accumulates dW and db.
  auto dw2 = dw0, db2 = db0;
  linear_backward(nullptr, dw2.data(), db2.data(), r.data(), f32_operand(r.data()), f32_operand(x.data()),
                  f32_operand(w.data()), N, in, out);
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
}

namespace {

LayerContext small_context(int64_t b, int64_t s, int64_t h, int64_t a, float dropout) {
  LayerContext c;
  c.b = b, c.s = s, c.h = h, c.a = a;
  c.dtype = DType::fp32;
  c.dropout = dropout;
  c.stream = DropoutStream{1234, 5, 1, DropoutSite::attention};
  c.first_row = 0;
  c.heads_total = a, c.head0 = 0;
  c.seq_total = s, c.pos0 = 0;
  return c;
}

}  // namespace

class AttentionCoreGradcheck : public ::testing::TestWithParam<float> {};

TEST_P(AttentionCoreGradcheck, QKV) {
  const float dropout = GetParam();
  const int64_t b = 2, s = 8, h = 16, a = 2, n = b * s * h;
  const LayerContext c = small_context(b, s, h, a, dropout);
  Workspace ws;
  ws.ensure(b, s, h, a, 128);
  LayerKept kept;
  kept.q = Stored(n, DType::fp32, 1, "q");
  kept.k = Stored(n, DType::fp32, 1, "k");
  kept.v = Stored(n, DType::fp32, 1, "v");
  const auto q0 = randn(n, 71, 1.2f), k0 = randn(n, 72, 1.2f), v0 = randn(n, 73);
  kept.q.store(q0.data()), kept.k.store(k0.data()), kept.v.store(v0.data());
  const auto r = randn(n, 74);
  std::vector<float> ctx(static_cast<size_t>(n));
  auto f = [&] {
    attention_core_forward(kept, /*keep_s2=*/true, ctx.data(), c, ws);
    return weighted_sum(ctx, r);
  };
  f();
  ASSERT_TRUE(kept.has_attention_s2());
  EXPECT_EQ(bool(kept.attn_mask), dropout > 0.0f) << "a mask is kept exactly when dropout is on";
  std::vector<float> dq(static_cast<size_t>(n)), dk(static_cast<size_t>(n)), dv(static_cast<size_t>(n));
  attention_core_backward(dq.data(), dk.data(), dv.data(), r.data(), kept, c, ws);
  // The causal mask: the first query of every sequence attends only to itself, so its context
  // row is its own (possibly dropped and rescaled) V row and K of later positions has no effect.
  const int64_t dh = h / a;
  for (int64_t blk = 0; blk < b * a; ++blk) {
    const float* vrow = v0.data() + blk * s * dh;
    const float* crow = ctx.data() + blk * s * dh;
    // Its single probability is 1: kept (scaled by 1/(1-p)) or dropped as a whole.
    const float keep = 1.0f / (1.0f - dropout);
    bool is_kept = true, is_dropped = true;
    for (int64_t e = 0; e < dh; ++e) {
      is_kept = is_kept && std::fabs(crow[e] - keep * vrow[e]) <= 1e-5f * (1.0f + std::fabs(vrow[e]));
      is_dropped = is_dropped && crow[e] == 0.0f;
    }
    EXPECT_TRUE(is_kept || (dropout > 0.0f && is_dropped)) << "first query of block " << blk;
  }
  // Every 3rd element of each (3 is coprime to the head size 8: every column is sampled) and two
  // directions over all of them.
  gradcheck::check_elements("attention dq", f, kept.q.f32(), dq.data(), n, 1e-2f, {}, 3);
  gradcheck::check_elements("attention dk", f, kept.k.f32(), dk.data(), n, 1e-2f, {}, 3);
  gradcheck::check_elements("attention dv", f, kept.v.f32(), dv.data(), n, 1e-2f, {}, 3);
  gradcheck::check_directions("attention dq", f, kept.q.f32(), dq.data(), n, 1e-3f, 75);
  gradcheck::check_directions("attention dk", f, kept.k.f32(), dk.data(), n, 1e-3f, 76);
  gradcheck::check_directions("attention dv", f, kept.v.f32(), dv.data(), n, 1e-3f, 77);
}

INSTANTIATE_TEST_SUITE_P(Dropout, AttentionCoreGradcheck, ::testing::Values(0.0f, 0.2f));

namespace {

// One layer's parameters in separate fp32 buffers, with gradient buffers of the same shapes.
struct LayerParams {
  static constexpr int kCount = 12;
  std::vector<float> t[kCount];  // ln1_w ln1_b qkv_w qkv_b proj_w proj_b ln2_w ln2_b fc1_w fc1_b fc2_w fc2_b
  std::vector<float> g[kCount];
  static const char* name(int i) {
    static const char* names[kCount] = {"ln1_w",  "ln1_b",  "qkv_w", "qkv_b", "proj_w", "proj_b",
                                        "ln2_w",  "ln2_b",  "fc1_w", "fc1_b", "fc2_w",  "fc2_b"};
    return names[i];
  }
  explicit LayerParams(int64_t h) {
    const int64_t sizes[kCount] = {h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * 4 * h, 4 * h, 4 * h * h, h};
    const float wstd = 1.0f / std::sqrt(float(h));
    for (int i = 0; i < kCount; ++i) {
      const bool ln_w = i == 0 || i == 6;
      const bool matrix = i == 2 || i == 4 || i == 8 || i == 10;
      t[i] = randn(sizes[i], 100 + uint32_t(i), ln_w ? 0.2f : (matrix ? (i == 10 ? wstd / 2 : wstd) : 0.1f),
                   ln_w ? 1.0f : 0.0f);
      g[i].assign(size_t(sizes[i]), 0.0f);
    }
  }
  LayerWeights weights() const {
    return {t[0].data(), t[1].data(), t[3].data(), t[5].data(), t[6].data(), t[7].data(), t[9].data(),
            t[11].data(), f32_operand(t[2].data()), f32_operand(t[4].data()), f32_operand(t[8].data()),
            f32_operand(t[10].data()), {}};
  }
  LayerGrads grads() {
    return {g[0].data(), g[1].data(), g[2].data(), g[3].data(),  g[4].data(),  g[5].data(),
            g[6].data(), g[7].data(), g[8].data(), g[9].data(), g[10].data(), g[11].data(), {}};
  }
};

}  // namespace

class TransformerLayerGradcheck : public ::testing::TestWithParam<float> {};

TEST_P(TransformerLayerGradcheck, InputAndEveryParameter) {
  const float dropout = GetParam();
  const int64_t b = 2, s = 8, h = 32, a = 4, n = b * s * h;
  const LayerContext c = small_context(b, s, h, a, dropout);
  Workspace ws;
  ws.ensure(b, s, h, a, 128);
  LayerParams p(h);
  const LayerWeights w = p.weights();
  auto x0 = randn(n, 81);
  const auto r = randn(n, 82);
  LayerKept kept;
  std::vector<float> x(static_cast<size_t>(n));
  auto f = [&] {
    x = x0;
    layer_forward(x.data(), kept, /*keep_s2=*/true, w, c, ws);
    return weighted_sum(x, r);
  };
  f();
  std::vector<float> dx = r;
  layer_backward(dx.data(), kept, w, p.grads(), c, ws);

  // The input gradient and each parameter tensor along two directions over all elements, plus
  // a spread of single elements (about 40 per tensor, all of the small ones).
  gradcheck::check_elements("layer dx", f, x0.data(), dx.data(), n, 1e-2f, {}, 5);
  gradcheck::check_directions("layer dx", f, x0.data(), dx.data(), n, 1e-3f, 89);
  for (int i = 0; i < LayerParams::kCount; ++i) {
    const int64_t size = int64_t(p.t[i].size());
    const std::string what = std::string("layer d") + LayerParams::name(i);
    ASSERT_GT(gradcheck::norm(p.g[i].data(), size), 0.0) << what << " is all zero";
    gradcheck::check_directions(what, f, p.t[i].data(), p.g[i].data(), size, 1e-3f, 90 + uint32_t(i));
    gradcheck::check_elements(what, f, p.t[i].data(), p.g[i].data(), size, 1e-2f, {},
                              std::max<int64_t>(1, size / 41));
  }
}

INSTANTIATE_TEST_SUITE_P(Dropout, TransformerLayerGradcheck, ::testing::Values(0.0f, 0.1f));
