// The bf16 fused passes (kernels/bf16_fused.hpp, and AdamW writing the bf16 weights) against the fp32 kernels and conversions they replace,
// bit for bit: the bf16 outputs byte for byte, the fp32 outputs (bias and LayerNorm gradients, mean,
// rstd, dx) exactly. Shapes that are not multiples of the column blocks (128), of the thread count or
// of the vector width, head dimensions below and above a block, and causal rows of every length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backend/device_ops.hpp"
#include "kernels/bf16_fused.hpp"
#include "kernels/bias.hpp"
#include "kernels/gelu.hpp"
#include "kernels/heads.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "kernels/softmax.hpp"
#include "kernels/vocab_shard.hpp"
#include "tensor/bf16.hpp"

namespace lattice {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<uint16_t> narrowed(const std::vector<float>& f) {
  std::vector<uint16_t> h(f.size());
  to_bf16(f.data(), h.data(), int64_t(f.size()));
  return h;
}
std::vector<float> widened(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  from_bf16(h.data(), f.data(), int64_t(h.size()));
  return f;
}
template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(Bf16Fused, LayerNormForwardIsStoreAndLayerNormNarrowed) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{7, 96}, {33, 200}, {64, 768}}) {
    const auto x = randn(N * C, 1, 3.0f), w = randn(C, 2), b = randn(C, 3);
    std::vector<float> y(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)), mean2(static_cast<size_t>(N)), rstd2(static_cast<size_t>(N));
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    std::vector<uint16_t> x16(static_cast<size_t>(N * C)), y16(static_cast<size_t>(N * C));
    layernorm_forward_bf16(x16.data(), y16.data(), mean2.data(), rstd2.data(), x.data(), w.data(), b.data(), N, C);
    EXPECT_TRUE(same_bytes(x16, narrowed(x))) << N << "x" << C;
    EXPECT_TRUE(same_bytes(y16, narrowed(y))) << N << "x" << C;
    EXPECT_TRUE(same_bytes(mean2, mean) && same_bytes(rstd2, rstd)) << N << "x" << C;
  }
}

TEST(Bf16Fused, HeadMovesAreTheFp32MovesNarrowed) {
  const HeadShape x{3, 17, 5, 24};
  const int64_t n = x.b * x.s * x.a * x.dh;
  const auto qkv = randn(3 * n, 4), heads = randn(n, 5);
  std::vector<float> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), v(static_cast<size_t>(n)), merged(static_cast<size_t>(n));
  split_heads(q.data(), k.data(), v.data(), qkv.data(), x);
  merge_heads(merged.data(), heads.data(), x);
  std::vector<uint16_t> q16(static_cast<size_t>(n)), k16(static_cast<size_t>(n)), v16(static_cast<size_t>(n)), m16(static_cast<size_t>(n));
  split_heads16(q16.data(), k16.data(), v16.data(), narrowed(qkv).data(), x);  // the GEMM's bf16 rows split
  merge_heads_bf16(m16.data(), heads.data(), x);
  EXPECT_TRUE(same_bytes(q16, narrowed(q)));
  EXPECT_TRUE(same_bytes(k16, narrowed(k)));
  EXPECT_TRUE(same_bytes(v16, narrowed(v)));
  EXPECT_TRUE(same_bytes(m16, narrowed(merged)));
  // The fused attention's fp32 operands from the kept bf16 rows: split and widened in one pass.
  std::vector<float> qw(static_cast<size_t>(n)), kw(static_cast<size_t>(n)), vw(static_cast<size_t>(n));
  split_heads_widened(qw.data(), kw.data(), vw.data(), narrowed(qkv).data(), x);
  for (auto [wide, narrow] : {std::pair{&qw, &q16}, std::pair{&kw, &k16}, std::pair{&vw, &v16}}) {
    std::vector<float> want(static_cast<size_t>(n));
    from_bf16(narrow->data(), want.data(), n);
    EXPECT_TRUE(same_bytes(*wide, want));
  }
  // The way back from bf16 rows: widened, then unmerged, in one pass.
  const std::vector<uint16_t> rows16 = narrowed(merged);
  std::vector<float> rows(static_cast<size_t>(n)), unmerged(static_cast<size_t>(n)), fused(static_cast<size_t>(n), -1.0f);
  from_bf16(rows16.data(), rows.data(), n);
  unmerge_heads(unmerged.data(), rows.data(), x);
  unmerge_heads_bf16(fused.data(), rows16.data(), x);
  EXPECT_TRUE(same_bytes(fused, unmerged));
}

TEST(Bf16Fused, GeluForwardOfTheNarrowedInputIsGeluThenConversion) {
  const int64_t n = 10007;
  const std::vector<uint16_t> pre16 = narrowed(randn(n, 6, 2.5f));
  std::vector<float> pre(static_cast<size_t>(n)), act(static_cast<size_t>(n));
  from_bf16(pre16.data(), pre.data(), n);
  gelu_forward(act.data(), pre.data(), n);
  std::vector<uint16_t> act16(static_cast<size_t>(n));
  gelu_forward16(act16.data(), pre16.data(), n);
  EXPECT_TRUE(same_bytes(act16, narrowed(act)));
}

// The cross-entropy over bf16 logits, kept as bf16 (the probabilities made again in backward): every
// statistic, loss and gradient the bits of widening the logits and running the fp32 pieces, the
// vocabulary-parallel pieces with one shard's statistics standing for the all-reduced ones.
TEST(Bf16Fused, CrossEntropyFromBf16LogitsIsTheFp32Pieces) {
  // Shards whose rows hold their target, and whose do not; widths around the gradient's 256-column
  // pieces (a target in the first, a middle and the last piece); padding columns past `real`.
  for (auto [N, v0, vl, real] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{9, 0, 300, 300}, {17, 256, 256, 250},
                                 {33, 100, 777, 700}, {4, 0, 1, 1}, {5, 0, 64, 0}}) {
    const auto logits16 = narrowed(randn(N * vl, 11, 3.0f));
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = int32_t((n * 97 + 5) % (v0 + vl + 40));  // some outside
    const float scale = 1.0f / 3.0f;
    // The fp32 pieces on the widened logits: statistics, losses, probabilities, then the gradient.
    auto probs = widened(logits16);
    std::vector<float> mx(static_cast<size_t>(N)), tl(mx.size()), sum(mx.size()), loss(mx.size());
    ce_shard_max_target(mx.data(), tl.data(), probs.data(), targets.data(), v0, vl, real, N);
    ce_shard_exp_sum(sum.data(), probs.data(), mx.data(), vl, real, N);
    ce_shard_normalize(probs.data(), loss.data(), mx.data(), sum.data(), tl.data(), vl, real, N);
    std::vector<float> d(probs.size());
    ce_shard_backward(d.data(), probs.data(), targets.data(), v0, vl, N, scale);

    std::vector<float> mx2(mx.size()), tl2(mx.size()), sum2(mx.size()), loss2(mx.size());
    ce_shard_max_target_bf16(mx2.data(), tl2.data(), logits16.data(), targets.data(), v0, vl, real, N);
    ce_shard_exp_sum_bf16(sum2.data(), logits16.data(), mx2.data(), vl, real, N);
    ce_row_losses(loss2.data(), mx2.data(), sum2.data(), tl2.data(), N);
    EXPECT_TRUE(same_bytes(mx2, mx) && same_bytes(tl2, tl) && same_bytes(sum2, sum) && same_bytes(loss2, loss))
        << N << "x" << vl << " from " << v0;
    std::vector<uint16_t> d16(probs.size());
    ce_shard_backward_bf16(d16.data(), logits16.data(), mx.data(), sum.data(), targets.data(), v0, vl, real, N, scale);
    EXPECT_TRUE(same_bytes(d16, narrowed(d))) << N << "x" << vl << " from " << v0;
    if (v0 != 0) continue;
    std::vector<float> mx3(mx.size()), tl3(mx.size()), sum3(mx.size()), loss3(mx.size());
    ce_whole_forward_bf16(logits16.data(), loss3.data(), mx3.data(), sum3.data(), tl3.data(), targets.data(), vl, real,
                          N);
    EXPECT_TRUE(same_bytes(mx3, mx) && same_bytes(tl3, tl) && same_bytes(sum3, sum) && same_bytes(loss3, loss))
        << N << "x" << vl;
  }
}

TEST(Bf16Fused, NarrowBiasBackwardIsConversionAndColumnSums) {
  for (auto [N, out] : {std::pair<int64_t, int64_t>{5, 3}, {37, 130}, {256, 768}, {64, 1000}}) {
    const auto dy = randn(N * out, 7);
    const auto db0 = randn(out, 8);  // accumulated into, as the gradient buffer is
    std::vector<float> db = db0, db2 = db0;
    bias_backward(db.data(), dy.data(), N, out);
    std::vector<uint16_t> dy16(static_cast<size_t>(N * out));
    narrow_bias_backward(dy16.data(), db2.data(), dy.data(), N, out);
    EXPECT_TRUE(same_bytes(dy16, narrowed(dy))) << N << "x" << out;
    EXPECT_TRUE(same_bytes(db2, db)) << N << "x" << out;
  }
}

TEST(Bf16Fused, GeluBackwardNarrowIsWidenGeluBackwardNarrowAndSums) {
  const int64_t N = 41, out = 300;
  const auto pre16 = narrowed(randn(N * out, 9, 2.0f));
  const auto dout16 = narrowed(randn(N * out, 10));
  const auto db0 = randn(out, 11);
  std::vector<float> g(static_cast<size_t>(N * out)), db = db0, db2 = db0;
  const auto pre = widened(pre16), dout = widened(dout16);
  gelu_backward(g.data(), pre.data(), dout.data(), N * out);
  bias_backward(db.data(), g.data(), N, out);
  std::vector<uint16_t> g16(static_cast<size_t>(N * out));
  gelu_backward_narrow(g16.data(), db2.data(), pre16.data(), dout16.data(), N, out);
  EXPECT_TRUE(same_bytes(g16, narrowed(g)));
  EXPECT_TRUE(same_bytes(db2, db));
}

TEST(Bf16Fused, GeluBackwardNarrowInPlaceIsTheSame) {
  const int64_t N = 23, out = 130;
  const auto pre16 = narrowed(randn(N * out, 30, 2.0f));
  auto g16 = narrowed(randn(N * out, 31));
  const auto db0 = randn(out, 32);
  std::vector<float> db = db0, db2 = db0;
  std::vector<uint16_t> apart(g16.size());
  gelu_backward_narrow(apart.data(), db.data(), pre16.data(), g16.data(), N, out);
  gelu_backward_narrow(g16.data(), db2.data(), pre16.data(), g16.data(), N, out);
  EXPECT_TRUE(same_bytes(g16, apart));
  EXPECT_TRUE(same_bytes(db2, db));
}

// The device table's linears with the pass after them (backend/device_ops.hpp): on the CPU the two
// calls, bit for bit, also the backward's gradient made in place in its output.
TEST(Bf16Fused, CpuLinearWithItsPassIsTheTwoCalls) {
  const DeviceOps& ops = cpu_ops();
  const int64_t N = 37, in = 48, out = 72;
  const auto x16 = narrowed(randn(N * in, 40)), w16 = narrowed(randn(in * out, 41));
  const auto dy16 = narrowed(randn(N * out, 42));
  const auto bias = randn(out, 43), resid0 = randn(N * out, 44), db0 = randn(in, 45);
  const GemmOperand x{x16.data(), DType::bf16}, w{w16.data(), DType::bf16}, dy{dy16.data(), DType::bf16};
  std::vector<float> room(static_cast<size_t>(N * std::max(in, out)));

  std::vector<uint16_t> act(size_t(N * out)), pre(act.size()), act_ref(act.size()), pre_ref(act.size());
  ops.linear_gelu_forward_bf16(act.data(), pre.data(), x, w, bias.data(), N, in, out, room.data());
  ops.linear_forward_bf16(pre_ref.data(), x, w, bias.data(), N, in, out, room.data());
  ops.gelu_forward16(act_ref.data(), pre_ref.data(), N * out);
  EXPECT_TRUE(same_bytes(pre, pre_ref));
  EXPECT_TRUE(same_bytes(act, act_ref));

  // FC2's input gradient [N, in] from dy [N, out] and W [in, out], the GeLU's input pre [N, in].
  const auto pre_in = narrowed(randn(N * in, 46, 2.0f));
  std::vector<uint16_t> g(size_t(N * in)), dact(g.size()), g_ref(g.size());
  std::vector<float> db = db0, db_ref = db0;
  ops.linear_backward_input_gelu_bf16(g.data(), db.data(), dy, w, pre_in.data(), N, in, out, room.data());
  ops.linear_backward_input_bf16(dact.data(), dy, w, N, in, out, room.data());
  ops.gelu_backward_narrow(g_ref.data(), db_ref.data(), pre_in.data(), dact.data(), N, in);
  EXPECT_TRUE(same_bytes(g, g_ref));
  EXPECT_TRUE(same_bytes(db, db_ref));

  // The projection's or FC2's output added into the residual stream.
  std::vector<float> resid = resid0, resid_ref = resid0, y(resid0.size());
  const auto x2 = narrowed(randn(N * out, 47));
  const auto w2 = narrowed(randn(out * out, 48));
  const GemmOperand xo{x2.data(), DType::bf16}, wo{w2.data(), DType::bf16};
  ops.linear_forward_residual(resid.data(), xo, wo, bias.data(), N, out, out, room.data());
  ops.linear_forward(y.data(), xo, wo, bias.data(), N, out, out);
  ops.residual_add(resid_ref.data(), y.data(), N * out);
  EXPECT_TRUE(same_bytes(resid, resid_ref));
}

TEST(Bf16Fused, MergeQkvGradsNarrowIsMergeNarrowAndSums) {
  for (const HeadShape x : {HeadShape{2, 19, 3, 40}, HeadShape{2, 8, 2, 256}, HeadShape{1, 5, 4, 7}}) {
    const int64_t n = x.b * x.s * x.a * x.dh, N = x.b * x.s, out = 3 * x.a * x.dh;
    const auto dq = randn(n, 12), dk = randn(n, 13), dv = randn(n, 14);
    const auto db0 = randn(out, 15);
    std::vector<float> dqkv(static_cast<size_t>(N * out)), db = db0, db2 = db0;
    merge_qkv_grads(dqkv.data(), dq.data(), dk.data(), dv.data(), x);
    bias_backward(db.data(), dqkv.data(), N, out);
    std::vector<uint16_t> d16(static_cast<size_t>(N * out));
    merge_qkv_grads_narrow(d16.data(), db2.data(), dq.data(), dk.data(), dv.data(), x);
    EXPECT_TRUE(same_bytes(d16, narrowed(dqkv))) << "dh " << x.dh;
    EXPECT_TRUE(same_bytes(db2, db)) << "dh " << x.dh;
  }
}

TEST(Bf16Fused, SoftmaxBackwardReadsBf16ProbsAndNarrows) {
  const int64_t batch = 3, s = 45;
  // Causal probabilities, stored bf16 as the forward keeps them.
  std::vector<float> probs(static_cast<size_t>(batch * s * s));
  softmax_causal_forward(probs.data(), randn(batch * s * s, 16, 2.0f).data(), batch, s);
  const auto probs16 = narrowed(probs);
  const auto dprobs = randn(batch * s * s, 17);
  std::vector<float> ds(static_cast<size_t>(batch * s * s));
  softmax_causal_backward(ds.data(), dprobs.data(), widened(probs16).data(), batch, s);
  std::vector<uint16_t> ds16(ds.size());
  softmax_causal_backward_bf16(ds16.data(), dprobs.data(), probs16.data(), batch, s);
  EXPECT_TRUE(same_bytes(ds16, narrowed(ds)));
}

TEST(Bf16Fused, LayerNormBackwardReadsBf16Input) {
  const int64_t N = 29, C = 136;
  const auto x16 = narrowed(randn(N * C, 18, 2.0f));
  const auto x = widened(x16);
  const auto w = randn(C, 19), b = randn(C, 20), dout = randn(N * C, 21);
  std::vector<float> y(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  const auto dx0 = randn(N * C, 22), dw0 = randn(C, 23), db0 = randn(C, 24);
  auto dx = dx0, dw = dw0, db = db0, dx2 = dx0, dw2 = dw0, db2 = db0;
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  layernorm_backward_bf16(dx2.data(), dw2.data(), db2.data(), dout.data(), x16.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
  EXPECT_TRUE(same_bytes(dx2, dx));
  EXPECT_TRUE(same_bytes(dw2, dw));
  EXPECT_TRUE(same_bytes(db2, db));
}

TEST(Bf16Fused, AdamWFusedIsScaleUpdateThenConversion) {
  const int64_t n = 70001;  // above the parallel threshold, not a multiple of the vector width
  const auto g = randn(n, 25), w0 = randn(n, 26, 0.02f), m0 = randn(n, 27, 0.01f);
  auto v0 = randn(n, 28, 0.001f);
  for (auto& x : v0) x = x * x;
  const AdamWScalars a = adamw_scalars(0.9, 0.95, 1e-8, 3e-4, 7);
  for (const float scale : {1.0f, 0.3173f}) {  // no clipping, and clipping's factor
    auto m = m0, v = v0, w = w0, m2 = m0, v2 = v0, w2 = w0, m3 = m0, v3 = v0, w3 = w0, scaled = g;
    scale_grads(scaled.data(), n, scale);
    adamw_update(m.data(), v.data(), w.data(), scaled.data(), n, 0.99f, a);
    std::vector<uint16_t> w16(static_cast<size_t>(n));
    adamw_update_fused(m2.data(), v2.data(), w2.data(), w16.data(), g.data(), n, 0.99f, a, scale);
    adamw_update_fused(m3.data(), v3.data(), w3.data(), nullptr, g.data(), n, 0.99f, a, scale);
    EXPECT_TRUE(same_bytes(m2, m) && same_bytes(v2, v) && same_bytes(w2, w)) << scale;
    EXPECT_TRUE(same_bytes(m3, m) && same_bytes(v3, v) && same_bytes(w3, w)) << scale;
    EXPECT_TRUE(same_bytes(w16, narrowed(w))) << scale;
  }
}

}  // namespace
}  // namespace lattice
