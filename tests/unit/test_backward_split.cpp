// The backward split into an input pass (B) and a weight pass (W) for zero-bubble schedules
// (docs/design.md §6): the split kernels compose to the fused ones bit for bit, and a whole model's
// B then W — with other micro-batches' passes interleaved as ZB-H1 interleaves them — leaves exactly
// the fused backward's gradient, in every activation layout.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <vector>

#include "analysis/formulas.hpp"
#include "kernels/layernorm.hpp"
#include "core/recompute_plan.hpp"
#include "kernels/linear.hpp"
#include "model/gpt.hpp"
#include "model_test_util.hpp"
#include "tensor/memory_tracker.hpp"

using namespace lattice;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> with_negative_zeros(std::vector<float> v) {
  for (size_t i = 0; i < v.size(); i += 7) v[i] = -0.0f;
  return v;
}

}  // namespace

TEST(BackwardSplit, LinearPartsComposeToTheFusedKernel) {
  const int64_t N = 37, in = 24, out = 70;  // 70 columns: a partial 64-column chunk of the bias sums
  const auto x = gradcheck::randn(N * in, 1), w = gradcheck::randn(in * out, 2);
  const auto dy = with_negative_zeros(gradcheck::randn(N * out, 3));
  const auto dw0 = gradcheck::randn(in * out, 4), db0 = gradcheck::randn(out, 5);
  std::vector<float> dx_a(static_cast<size_t>(N * in)), dw_a = dw0, db_a = db0;
  linear_backward(dx_a.data(), dw_a.data(), db_a.data(), dy.data(), f32_operand(dy.data()), f32_operand(x.data()),
                  f32_operand(w.data()), N, in, out);
  std::vector<float> dx_b(static_cast<size_t>(N * in)), dw_b = dw0, db_b = db0, sums(static_cast<size_t>(out));
  linear_backward_input(dx_b.data(), f32_operand(dy.data()), f32_operand(w.data()), N, in, out);
  bias_column_sums(sums.data(), dy.data(), N, out);
  linear_backward_weight(dw_b.data(), f32_operand(x.data()), f32_operand(dy.data()), N, in, out);
  bias_add(db_b.data(), sums.data(), out);
  EXPECT_TRUE(same_bits(dx_a, dx_b));
  EXPECT_TRUE(same_bits(dw_a, dw_b));
  EXPECT_TRUE(same_bits(db_a, db_b));
}

TEST(BackwardSplit, LayerNormPartsComposeToTheFusedKernel) {
  const int64_t N = 29, C = 48;
  const auto inp = gradcheck::randn(N * C, 11), weight = gradcheck::randn(C, 12, 0.2f, 1.0f);
  const auto dout = with_negative_zeros(gradcheck::randn(N * C, 13));
  std::vector<float> out(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  const auto bias = gradcheck::randn(C, 14);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  const auto dinp0 = gradcheck::randn(N * C, 15), dw0 = gradcheck::randn(C, 16), db0 = gradcheck::randn(C, 17);
  std::vector<float> dinp_a = dinp0, dw_a = dw0, db_a = db0;
  layernorm_backward(dinp_a.data(), dw_a.data(), db_a.data(), dout.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  std::vector<float> dinp_b = dinp0, dw_b = dw0, db_b = db0;
  std::vector<float> partial(static_cast<size_t>(layernorm_partial_floats(C)));
  layernorm_backward_input(dinp_b.data(), partial.data(), int64_t(partial.size()), dout.data(), inp.data(),
                           weight.data(), mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(same_bits(dinp_a, dinp_b)) << "the input gradient is complete after the input pass";
  layernorm_reduce_partials(dw_b.data(), db_b.data(), partial.data(), int64_t(partial.size()), C);
  EXPECT_TRUE(same_bits(dw_a, dw_b));
  EXPECT_TRUE(same_bits(db_a, db_b));
}

namespace {

struct Variant {
  const char* name;
  DType activations;
  Recompute recompute;
  int recompute_layers;
  AttentionKernel attention;
  bool pack_masks, fp8;
  double dropout;
  const char* plan;  // --recompute-plan (core/recompute_plan.hpp), or null
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

// Two micro-batches through a 3-layer model: fused backwards, or B(0) B(1) F(2) W(0) W(1) (the third
// forward reuses the workspace between B and W, as a pipeline's would). Returns the gradient.
std::vector<float> gradient(const Variant& v, bool split, int64_t* pending_peak = nullptr) {
  const ModelConfig m = modeltest::small_model(v.dropout, 3, 64, 4, 32, 64);
  LayoutConfig l = modeltest::layout(v.recompute, v.activations, v.recompute_layers);
  l.attention = v.attention, l.pack_masks = v.pack_masks, l.fp8_kept = v.fp8;
  if (v.plan) l.recompute_plan = parse_recompute_plan(v.plan);
  GPT gpt(m, l, 11);
  modeltest::randomize_params(gpt, 300);
  const int64_t s = m.seq_len;
  const modeltest::Tokens tok(6, s, m.vocab, 5);
  const float scale = 1.0f / float(4 * s);
  gpt.zero_grads();
  const int64_t base = MemoryTracker::activations().live_bytes();
  for (int64_t id : {0, 1}) gpt.forward_chunk(tok.rows(2 * id, 2, s), id, 3, true, s, 0, m.layers, nullptr, nullptr);
  if (!split) {
    for (int64_t id : {0, 1}) gpt.backward_chunk(tok.rows(2 * id, 2, s), id, 3, scale, s, 0, m.layers, nullptr, nullptr);
  } else {
    for (int64_t id : {0, 1})
      gpt.backward_input_chunk(tok.rows(2 * id, 2, s), id, 3, scale, s, 0, m.layers, nullptr, nullptr);
    // Everything the forwards kept is released; what is left is the weight passes' operands.
    if (pending_peak) *pending_peak = MemoryTracker::activations().live_bytes() - base;
    gpt.forward_chunk(tok.rows(4, 2, s), 2, 3, true, s, 0, m.layers, nullptr, nullptr);
    for (int64_t id : {0, 1}) gpt.backward_weight_chunk(id, 0, m.layers);
    gpt.backward_chunk(tok.rows(4, 2, s), 2, 3, scale, s, 0, m.layers, nullptr, nullptr);
  }
  if (!split) {  // the same third micro-batch, fused, so both paths add the same contributions
    gpt.forward_chunk(tok.rows(4, 2, s), 2, 3, true, s, 0, m.layers, nullptr, nullptr);
    gpt.backward_chunk(tok.rows(4, 2, s), 2, 3, scale, s, 0, m.layers, nullptr, nullptr);
  }
  return std::vector<float>(gpt.grads(), gpt.grads() + gpt.num_params());
}

}  // namespace

class BackwardSplitModel : public ::testing::TestWithParam<Variant> {};

TEST_P(BackwardSplitModel, InputThenWeightPassEqualsTheFusedBackward) {
  const Variant& v = GetParam();
  const auto fused = gradient(v, false);
  const auto split = gradient(v, true);
  ASSERT_EQ(fused.size(), split.size());
  size_t differing = 0;
  for (size_t i = 0; i < fused.size(); ++i) differing += std::memcmp(&fused[i], &split[i], sizeof(float)) != 0;
  EXPECT_EQ(differing, 0u) << v.name;
  double norm = 0;
  for (float g : fused) norm += double(g) * g;
  EXPECT_GT(norm, 0.0) << "the gradient is not zero";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, BackwardSplitModel,
    ::testing::Values(Variant{"fp32", DType::fp32, Recompute::none, -1, AttentionKernel::unfused, false, false, 0.1, nullptr},
                      Variant{"fp32_no_dropout", DType::fp32, Recompute::none, -1, AttentionKernel::unfused, false,
                              false, 0.0, nullptr},
                      Variant{"bf16", DType::bf16, Recompute::none, -1, AttentionKernel::unfused, false, false, 0.1, nullptr},
                      Variant{"selective", DType::fp32, Recompute::selective, -1, AttentionKernel::unfused, false,
                              false, 0.1, nullptr},
                      Variant{"full_first_layer", DType::fp32, Recompute::full, 1, AttentionKernel::unfused, false,
                              false, 0.1, nullptr},
                      Variant{"fused_attention", DType::fp32, Recompute::none, -1, AttentionKernel::fused, false,
                              false, 0.1, nullptr},
                      Variant{"packed_masks", DType::fp32, Recompute::none, -1, AttentionKernel::unfused, true,
                              false, 0.1, nullptr},
                      Variant{"uniform_3", DType::fp32, Recompute::none, -1, AttentionKernel::unfused, false,
                              false, 0.1, "c~~"},
                      Variant{"segment_then_none", DType::fp32, Recompute::none, -1, AttentionKernel::unfused, false,
                              false, 0.1, "c~n"},
                      Variant{"selective_then_segment", DType::fp32, Recompute::none, -1, AttentionKernel::unfused,
                              false, false, 0.1, "sc~"},
                      Variant{"fp8_bf16", DType::bf16, Recompute::none, -1, AttentionKernel::unfused, false, true,
                              0.1, nullptr}),
    [](const auto& info) { return std::string(info.param.name); });

// What B leaves for W is the formula's M_W: the four linears' inputs and output gradients in the
// compute dtype, the biases' column sums and the LayerNorms' per-thread partial sums.
TEST(BackwardSplit, PendingBytesAreTheFormulas) {
  const Variant v{"fp32", DType::fp32, Recompute::none, -1, AttentionKernel::unfused, false, false, 0.1, nullptr};
  int64_t pending = 0;
  gradient(v, true, &pending);
  analysis::ActivationShape x;
  x.s = 32, x.b = 2, x.h = 64, x.a = 4, x.v = 64, x.d = 4, x.dropout = true;
  const int64_t per_layer = analysis::layer_weight_pending_bytes(x) +
                            analysis::layer_weight_pending_small_bytes(x, layernorm_partial_floats(64) / (2 * 64));
  EXPECT_EQ(pending, 2 * 3 * per_layer);  // two micro-batches of three layers
}
