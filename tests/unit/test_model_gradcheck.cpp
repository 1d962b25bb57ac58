// The whole GPT's gradient (forward_backward) against finite differences of its own loss, with
// dropout on: masks are a pure function of (seed, step, layer, site, position), so evaluating
// every perturbed model at the same step draws the same masks and the loss is a smooth function
// of the parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck_util.hpp"
#include "model/gpt.hpp"
#include "model_test_util.hpp"

using namespace lattice;

TEST(ModelGradcheck, EveryParameterTensorWithDropout) {
  const ModelConfig m = modeltest::small_model(/*dropout=*/0.1);
  const int64_t b = 2, s = m.seq_len;
  GPT gpt(m, modeltest::layout(Recompute::none, DType::fp32), 7);
  modeltest::randomize_params(gpt, 500);
  const modeltest::Tokens tok(b, s, m.vocab, 9);
  const MicroBatch mb = tok.rows(0, b, s);
  const uint64_t step = 3;
  const float scale = 1.0f / float(b * s);

  // Analytic gradient of the mean loss.
  gpt.zero_grads();
  const double loss = gpt.forward_backward(mb, step, scale) * double(scale);
  EXPECT_GT(loss, 0.0);
  const std::vector<float> grads(gpt.grads(), gpt.grads() + gpt.num_params());

  // forward_backward accumulates: a second call adds the same gradient again.
  const double loss2 = gpt.forward_backward(mb, step, scale) * double(scale);
  EXPECT_EQ(loss, loss2);
  for (int64_t i = 0; i < gpt.num_params(); i += 97) EXPECT_FLOAT_EQ(gpt.grads()[i], 2.0f * grads[size_t(i)]);

  // Dropout really is on: another step draws other masks and gives another loss.
  EXPECT_NE(gpt.forward_backward(mb, step + 1, scale), gpt.forward_backward(mb, step, scale));

  auto f = [&] { return gpt.forward_backward(mb, step, scale) * double(scale); };

  // Padded vocabulary rows of the tied embedding are never an input and never predicted.
  const int64_t h = m.hidden, Vp = m.padded_vocab();
  ASSERT_GT(Vp, m.vocab);
  for (int64_t i = int64_t(m.vocab) * h; i < Vp * h; ++i)
    ASSERT_EQ(grads[size_t(gpt.table().wte() + i)], 0.0f) << "gradient on a padded vocabulary row";

  uint32_t seed = 1000;
  for (const ParamInfo& p : gpt.table().params()) {
    const float* g = grads.data() + p.offset;
    ASSERT_GT(gradcheck::norm(g, p.numel), 0.0) << p.name << " has no gradient";
    // Step 1e-3 along a unit-rms direction: at 1e-2 the model (loss ~8, sharp attention) is curved
    // enough that even the extrapolated difference is off by a few percent along the gradient.
    gradcheck::check_directions(p.name, f, gpt.params() + p.offset, g, p.numel, 1e-3f, seed++);
  }
}
