// Recompute modes change what is kept, never what is computed: with fp32 storage, none,
// selective, full, full-for-the-first-layer, uniform segments and any per-layer plan give
// bit-identical losses and gradients (dropout on, so recomputed masks must equal the forward ones);
// with bf16 storage they agree to bf16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "analysis/formulas.hpp"
#include "core/error.hpp"
#include "core/recompute_plan.hpp"
#include "gradcheck_util.hpp"
#include "model/gpt.hpp"
#include "model_test_util.hpp"

using namespace lattice;

namespace {

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
};

struct Mode {
  const char* name;
  Recompute r;
  int layers;
};
const Mode kModes[] = {{"none", Recompute::none, -1},
                       {"selective", Recompute::selective, -1},
                       {"full", Recompute::full, -1},
                       {"full, first layer only", Recompute::full, 1}};
const std::string kBf16Plans[] = {"c~c", "c~~", "sc~"};

LayoutConfig uniform(int k, DType dt = DType::fp32) {
  LayoutConfig l = modeltest::layout(Recompute::full, dt, k);
  l.recompute_method = RecomputeMethod::uniform;
  return l;
}
LayoutConfig planned(const std::string& text, DType dt = DType::fp32) {
  LayoutConfig l = modeltest::layout(Recompute::none, dt);
  l.recompute_plan = parse_recompute_plan(text);
  return l;
}

// One optimizer step's worth of work: two micro-batches of 2 rows accumulated, then a second
// step (other masks) accumulated on top.
Result run(const ModelConfig& m, const LayoutConfig& layout) {
  GPT gpt(m, layout, 11);
  modeltest::randomize_params(gpt, 300);
  const int64_t s = m.seq_len;
  const modeltest::Tokens tok(4, s, m.vocab, 5);
  const float scale = 1.0f / float(4 * s);
  Result r;
  gpt.zero_grads();
  for (uint64_t step : {1u, 2u}) {
    r.losses.push_back(gpt.forward_backward(tok.rows(0, 2, s), step, scale));
    r.losses.push_back(gpt.forward_backward(tok.rows(2, 2, s), step, scale));
  }
  r.grads.assign(gpt.grads(), gpt.grads() + gpt.num_params());
  return r;
}

}  // namespace

TEST(Recompute, Fp32ModesAreBitIdenticalWithDropout) {
  const ModelConfig m = modeltest::small_model(0.1, /*layers=*/3);
  const Result ref = run(m, modeltest::layout(Recompute::none, DType::fp32));
  ASSERT_GT(gradcheck::norm(ref.grads.data(), int64_t(ref.grads.size())), 0.0);
  for (const Mode& mode : kModes) {
    const Result got = run(m, modeltest::layout(mode.r, DType::fp32, mode.layers));
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    EXPECT_EQ(0, std::memcmp(got.losses.data(), ref.losses.data(), ref.losses.size() * sizeof(double)))
        << mode.name << ": losses differ";
    ASSERT_EQ(got.grads.size(), ref.grads.size());
    EXPECT_EQ(0, std::memcmp(got.grads.data(), ref.grads.data(), ref.grads.size() * sizeof(float)))
        << mode.name << ": gradients differ";
  }
}

// Segments (docs/design.md §3): a checkpoint keeps its input, the layers above it in the segment
// nothing, and the segment is re-run at its top layer's backward; the gradients are those of none.
TEST(Recompute, Fp32SegmentsAreBitIdenticalWithDropout) {
  const ModelConfig m = modeltest::small_model(0.1, /*layers=*/6);
  const Result ref = run(m, modeltest::layout(Recompute::none, DType::fp32));
  std::vector<std::pair<std::string, LayoutConfig>> cases;
  for (int k : {1, 2, 3, 6}) cases.push_back({"uniform " + std::to_string(k), uniform(k)});
  cases.push_back({"block 2", modeltest::layout(Recompute::full, DType::fp32, 2)});
  for (const char* text : {"c~snnc", "sc~~nn", "c~~c~s", "ccc~~~"}) cases.push_back({text, planned(text)});
  for (const auto& [name, layout] : cases) {
    const Result got = run(m, layout);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    EXPECT_EQ(0, std::memcmp(got.losses.data(), ref.losses.data(), ref.losses.size() * sizeof(double)))
        << name << ": losses differ";
    ASSERT_EQ(got.grads.size(), ref.grads.size());
    EXPECT_EQ(0, std::memcmp(got.grads.data(), ref.grads.data(), ref.grads.size() * sizeof(float)))
        << name << ": gradients differ";
  }
}

// A segment spanning MoE layers re-runs their routing (router noise, capacity drops) exactly.
TEST(Recompute, Fp32SegmentOverMoELayersIsBitIdentical) {
  ModelConfig m = modeltest::small_model(0.1, /*layers=*/4);
  m.moe.experts = 4, m.moe.layer_freq = 2;
  const Result ref = run(m, modeltest::layout(Recompute::none, DType::fp32));
  for (const char* text : {"c~~~", "nc~n", "c~c~"}) {
    const Result got = run(m, planned(text));
    EXPECT_EQ(0, std::memcmp(got.losses.data(), ref.losses.data(), ref.losses.size() * sizeof(double)))
        << text << ": losses differ";
    EXPECT_EQ(0, std::memcmp(got.grads.data(), ref.grads.data(), ref.grads.size() * sizeof(float)))
        << text << ": gradients differ";
  }
}

// The expansion of the flags into the per-layer list, and its errors (docs/design.md §3).
TEST(Recompute, LayerRecomputeExpandsAndRejects) {
  EXPECT_EQ(recompute_plan_text(layer_recompute(uniform(3), 6)), "c~~c~~");
  EXPECT_EQ(recompute_plan_text(layer_recompute(modeltest::layout(Recompute::full, DType::fp32, 2), 5)), "ccnnn");
  EXPECT_EQ(recompute_plan_text(layer_recompute(modeltest::layout(Recompute::selective, DType::fp32), 3)), "sss");
  // Block k counts per (virtual) stage, as Megatron's --recompute-num-layers does under pipelines: the
  // first k of each stage, where it took the model's first k (stages after the first kept everything).
  LayoutConfig block = modeltest::layout(Recompute::full, DType::fp32, 1);
  block.pp = 2;
  EXPECT_EQ(recompute_plan_text(layer_recompute(block, 4)), "cncn");
  block.stage_layers = {3, 1};
  block.recompute_layers = 2;
  EXPECT_EQ(recompute_plan_text(layer_recompute(block, 4)), "ccnc");
  block.stage_layers = {1, 2, 2, 3}, block.virtual_stages = 2;
  EXPECT_EQ(recompute_plan_text(layer_recompute(block, 8)), "cccccccn");
  for (int layer = 0; layer < 8; ++layer)  // the formulas' question asks the same plan
    EXPECT_EQ(analysis::layer_fully_recomputed(block, layer, 8), layer != 7) << layer;
  LayoutConfig pp = uniform(2);
  pp.pp = 2, pp.virtual_stages = 2;
  EXPECT_EQ(recompute_plan_text(layer_recompute(pp, 8)), "c~c~c~c~");
  pp.stage_layers = {2, 2, 4, 2};
  EXPECT_EQ(recompute_plan_text(layer_recompute(pp, 10)), "c~c~c~c~c~");
  pp.stage_layers = {2, 3, 3, 2};
  try {
    layer_recompute(pp, 10);
    ADD_FAILURE() << "k = 2 against a stage of 3 layers";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 holds 3 layers, which 2 does not divide"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(layer_recompute(uniform(0), 6), InputError);
  EXPECT_THROW(layer_recompute(uniform(-1), 6), InputError);
  EXPECT_THROW(layer_recompute(uniform(7), 6), InputError);
  EXPECT_THROW(layer_recompute(uniform(4), 6), InputError);
  LayoutConfig not_full = uniform(2);
  not_full.recompute = Recompute::selective;
  EXPECT_THROW(layer_recompute(not_full, 6), InputError);
  EXPECT_THROW(layer_recompute(planned("c~n"), 4), InputError);  // length
  LayoutConfig crossing = planned("c~~~");
  crossing.pp = 2;
  EXPECT_THROW(layer_recompute(crossing, 4), InputError);  // a segment crossing stage 0 → 1
  EXPECT_THROW(layer_recompute(planned("~c"), 2), InputError);
}

// bf16 storage rounds every kept tensor to 8 significant bits (relative error up to 2^-9 per
// element). The forward is the same in every mode, so the losses agree (to 1e-6). The backward
// reads the stored tensors; full recompute re-runs each layer from its bf16-stored input where
// the first forward used the fp32 residual stream, so its gradients differ from the other modes
// by bf16 roundings propagated through the layers. "Agree to bf16 rounding" is asserted per
// parameter tensor in two ways: the relative L2 distance between modes is (a) at most 2^-5
// (8 roundings of 2^-8) and (b) at most twice the distance between the bf16 and fp32 gradients,
// i.e. changing the recompute mode moves the gradient no more than bf16 storage itself does.
TEST(Recompute, Bf16ModesAgreeToBf16Rounding) {
  const ModelConfig m = modeltest::small_model(0.1, /*layers=*/3);
  const Result ref = run(m, modeltest::layout(Recompute::none, DType::bf16));
  const Result f32 = run(m, modeltest::layout(Recompute::none, DType::fp32));
  GPT probe(m, modeltest::layout(Recompute::none, DType::bf16), 11);
  auto rel_distance = [](const float* a, const float* b, int64_t n) {
    std::vector<float> diff(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) diff[size_t(i)] = b[i] - a[i];
    return gradcheck::norm(diff.data(), n) / gradcheck::norm(a, n);
  };
  for (const Mode& mode : kModes) {
    const Result got = run(m, modeltest::layout(mode.r, DType::bf16, mode.layers));
    for (size_t i = 0; i < ref.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-6 * std::fabs(ref.losses[i])) << mode.name << " loss " << i;
    for (const ParamInfo& p : probe.table().params()) {
      const double rel = rel_distance(ref.grads.data() + p.offset, got.grads.data() + p.offset, p.numel);
      const double bf16_effect = rel_distance(f32.grads.data() + p.offset, ref.grads.data() + p.offset, p.numel);
      EXPECT_LE(rel, std::ldexp(1.0, -5)) << mode.name << ": " << p.name;
      EXPECT_LE(rel, 2.0 * bf16_effect) << mode.name << ": " << p.name << " (bf16 vs fp32: " << bf16_effect << ")";
    }
  }
  for (const std::string& text : kBf16Plans) {  // segments re-run from a bf16-stored checkpoint
    const Result got = run(m, planned(text, DType::bf16));
    for (size_t i = 0; i < ref.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-6 * std::fabs(ref.losses[i])) << text << " loss " << i;
    for (const ParamInfo& p : probe.table().params()) {
      const double rel = rel_distance(ref.grads.data() + p.offset, got.grads.data() + p.offset, p.numel);
      const double bf16_effect = rel_distance(f32.grads.data() + p.offset, ref.grads.data() + p.offset, p.numel);
      EXPECT_LE(rel, std::ldexp(1.0, -5)) << text << ": " << p.name;
      EXPECT_LE(rel, 2.0 * bf16_effect) << text << ": " << p.name << " (bf16 vs fp32: " << bf16_effect << ")";
    }
  }
}

// The bf16 run is itself close to the fp32 one (same tolerance argument), so bf16 storage is
// really used and really only rounds.
TEST(Recompute, Bf16CloseToFp32) {
  const ModelConfig m = modeltest::small_model(0.1, /*layers=*/3);
  const Result f32 = run(m, modeltest::layout(Recompute::selective, DType::fp32));
  const Result b16 = run(m, modeltest::layout(Recompute::selective, DType::bf16));
  for (size_t i = 0; i < f32.losses.size(); ++i) {
    EXPECT_NE(f32.losses[i], b16.losses[i]) << "bf16 storage changed nothing";
    EXPECT_NEAR(b16.losses[i], f32.losses[i], 1e-2 * std::fabs(f32.losses[i]));
  }
  const int64_t n = int64_t(f32.grads.size());
  std::vector<float> diff(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) diff[size_t(i)] = b16.grads[size_t(i)] - f32.grads[size_t(i)];
  EXPECT_LE(gradcheck::norm(diff.data(), n) / gradcheck::norm(f32.grads.data(), n), std::ldexp(1.0, -4));
}
