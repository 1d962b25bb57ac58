// The tracking allocator's measured bytes per layer against the formula module (docs/design.md §3–4):
// fp32 and bf16, none/selective/full and full for the first layer only, dropout on and off.
// The formulas leave out LayerNorm statistics (2 floats a token per LayerNorm), hence the 2%.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "analysis/formulas.hpp"
#include "analysis/memory_categories.hpp"
#include "core/recompute_plan.hpp"
#include "model/gpt.hpp"
#include "tensor/kept_bytes.hpp"
#include "model_test_util.hpp"
#include "tensor/memory_tracker.hpp"

using namespace lattice;

namespace {

constexpr int kLayers = 2, kHidden = 64, kHeads = 4, kSeq = 32, kRows = 2;

analysis::ActivationShape shape_of(const ModelConfig& m, DType dt, int64_t b) {
  analysis::ActivationShape x;
  x.s = m.seq_len, x.b = b, x.h = m.hidden, x.a = m.heads;
  x.v = m.padded_vocab();
  x.t = 1, x.sp = false;
  x.d = bytes_of(dt);
  x.dropout = m.dropout > 0.0;
  return x;
}

void expect_within(int64_t measured, int64_t formula, double rel, const std::string& what) {
  ASSERT_GT(formula, 0) << what;
  EXPECT_GE(measured, formula) << what << ": measured below the formula (a kept tensor is missing)";
  EXPECT_LE(std::fabs(double(measured - formula)), rel * double(formula))
      << what << ": measured " << measured << " vs formula " << formula;
}

struct Case {
  DType dt;
  double dropout;
  Recompute r;
  int recompute_layers;
};

std::string describe(const Case& c) {
  return std::string(to_string(c.dt)) + ", dropout " + std::to_string(c.dropout) + ", recompute " +
         to_string(c.r) + (c.recompute_layers >= 0 ? " (first " + std::to_string(c.recompute_layers) + ")" : "");
}

// A model and the probe that measures what its forwards keep.
struct Probed {
  GPT gpt;
  KeptBytesProbe kept;
  Probed(const ModelConfig& m, const LayoutConfig& layout) : gpt(m, layout, 3), kept(m.layers) {}
};

// Runs one training micro-batch; returns the activation peak during it (and its loss in *loss).
int64_t run_step(Probed& p, const modeltest::Tokens& tok, double* loss = nullptr) {
  auto& tracker = MemoryTracker::activations();
  const int64_t live_before = tracker.live_bytes();
  tracker.reset_peak();
  GPT& gpt = p.gpt;
  const int L = gpt.config().layers;
  gpt.zero_grads();
  const MicroBatch mb = tok.rows(0, kRows, kSeq);
  p.kept.before_forward(0, L);
  const double l = gpt.forward_chunk(mb, 0, 1, true, kSeq, 0, L, nullptr, nullptr);
  if (loss) *loss = l;
  p.kept.after_forward(0, L);
  gpt.backward_chunk(mb, 0, 1, 1.0f / float(kRows * kSeq), kSeq, 0, L, nullptr, nullptr);
  EXPECT_EQ(tracker.live_bytes(), live_before) << "activations still live after backward";
  return tracker.peak_bytes() - live_before;
}

}  // namespace

TEST(ActivationMemory, PerLayerBytesMatchFormula) {
  std::vector<Case> cases;
  for (DType dt : {DType::fp32, DType::bf16})
    for (double p : {0.1, 0.0}) {
      for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) cases.push_back({dt, p, r, -1});
      cases.push_back({dt, p, Recompute::full, 1});
    }
  for (const Case& c : cases) {
    const ModelConfig m = modeltest::small_model(c.dropout, kLayers, kHidden, kHeads, kSeq, 256);
    Probed gpt(m, modeltest::layout(c.r, c.dt, c.recompute_layers));
    const modeltest::Tokens tok(kRows, kSeq, m.vocab, 2);
    run_step(gpt, tok);
    const auto x = shape_of(m, c.dt, kRows);
    const auto& kept = gpt.kept.per_layer();
    ASSERT_EQ(int(kept.size()), kLayers);
    for (int l = 0; l < kLayers; ++l) {
      const bool full = c.r == Recompute::full && (c.recompute_layers < 0 || l < c.recompute_layers);
      const bool selective = c.r == Recompute::selective;
      const std::string what = describe(c) + ", layer " + std::to_string(l);
      if (full)  // only the layer input: exact
        EXPECT_EQ(kept[size_t(l)], analysis::layer_activation_bytes(x, true, false)) << what;
      else
        expect_within(kept[size_t(l)], analysis::layer_activation_bytes(x, false, selective), 0.02, what);
    }
    expect_within(gpt.kept.outside(), analysis::extra_activation_bytes(x, 1, 1), 0.02,
                  describe(c) + ", outside the layers");
  }
}

// The rows of the table differ by what they should: selective saves exactly the s² part, and
// dropout 0 keeps no masks (the measured difference, not the formula's).
TEST(ActivationMemory, MeasuredDifferencesBetweenModes) {
  const ModelConfig m = modeltest::small_model(0.1, kLayers, kHidden, kHeads, kSeq, 256);
  const ModelConfig m0 = modeltest::small_model(0.0, kLayers, kHidden, kHeads, kSeq, 256);
  const modeltest::Tokens tok(kRows, kSeq, m.vocab, 2);
  const int64_t sbh = int64_t(kSeq) * kRows * kHidden, as2b = int64_t(kHeads) * kSeq * kSeq * kRows;
  for (DType dt : {DType::fp32, DType::bf16}) {
    const int64_t d = bytes_of(dt);
    Probed none(m, modeltest::layout(Recompute::none, dt)), sel(m, modeltest::layout(Recompute::selective, dt));
    Probed none0(m0, modeltest::layout(Recompute::none, dt));
    run_step(none, tok), run_step(sel, tok), run_step(none0, tok);
    for (int l = 0; l < kLayers; ++l) {
      // softmax output (d) + mask (1) + dropout output (d) per attention score.
      EXPECT_EQ(none.kept.per_layer()[size_t(l)] - sel.kept.per_layer()[size_t(l)], as2b * (2 * d + 1))
          << to_string(dt);
      // Without dropout: no two residual masks, no attention mask and no separate dropout output.
      EXPECT_EQ(none.kept.per_layer()[size_t(l)] - none0.kept.per_layer()[size_t(l)],
                2 * sbh + as2b * (d + 1))
          << to_string(dt);
    }
    EXPECT_EQ(none.kept.outside() - none0.kept.outside(), sbh) << "embedding mask";
  }
}

TEST(ActivationMemory, PeakOrderingAcrossModes) {
  for (DType dt : {DType::fp32, DType::bf16}) {
    const ModelConfig m = modeltest::small_model(0.1, 3, kHidden, kHeads, kSeq, 256);
    const modeltest::Tokens tok(kRows, kSeq, m.vocab, 2);
    Probed none(m, modeltest::layout(Recompute::none, dt));
    Probed sel(m, modeltest::layout(Recompute::selective, dt));
    Probed full(m, modeltest::layout(Recompute::full, dt));
    const int64_t p_none = run_step(none, tok), p_sel = run_step(sel, tok), p_full = run_step(full, tok);
    EXPECT_LT(p_sel, p_none) << to_string(dt);
    EXPECT_LT(p_full, p_sel) << to_string(dt);
    // The peak is at least everything kept at the end of the forward.
    int64_t kept_none = none.kept.outside();
    for (int64_t k : none.kept.per_layer()) kept_none += k;
    EXPECT_GE(p_none, kept_none) << to_string(dt);
  }
}

// --pack-masks (docs/design.md §4): every dropout mask kept at one bit an element. The per-layer
// bytes follow the 1-bit formula (sbh(16d + 2/8) + as²b(2d + 1/8)), the layer saves exactly 7/8 of
// its masks against the byte masks, and the gradients are bit-identical.
TEST(ActivationMemory, PackedMasksKeepOneBitAndTrainTheSame) {
  const ModelConfig m = modeltest::small_model(0.1, kLayers, kHidden, kHeads, kSeq, 256);
  const modeltest::Tokens tok(kRows, kSeq, m.vocab, 2);
  const int64_t sbh = int64_t(kSeq) * kRows * kHidden, as2b = int64_t(kHeads) * kSeq * kSeq * kRows;
  for (DType dt : {DType::fp32, DType::bf16})
    for (Recompute r : {Recompute::none, Recompute::selective}) {
      LayoutConfig bytes = modeltest::layout(r, dt), bits = bytes;
      bits.pack_masks = true;
      Probed a(m, bytes), b(m, bits);
      run_step(a, tok), run_step(b, tok);
      auto x = shape_of(m, dt, kRows);
      x.packed_masks = true;
      const std::string what = std::string(to_string(dt)) + ", recompute " + to_string(r);
      for (int l = 0; l < kLayers; ++l) {
        expect_within(b.kept.per_layer()[size_t(l)], analysis::layer_activation_bytes(x, false, r == Recompute::selective),
                      0.02, what);
        const int64_t masks = 2 * sbh + (r == Recompute::selective ? 0 : as2b);
        EXPECT_EQ(a.kept.per_layer()[size_t(l)] - b.kept.per_layer()[size_t(l)], masks - masks / 8) << what;
      }
      EXPECT_EQ(a.kept.outside() - b.kept.outside(), sbh - sbh / 8) << what << ", embedding mask";
      expect_within(b.kept.outside(), analysis::extra_activation_bytes(x, 1, 1), 0.02, what + ", outside");
      ASSERT_EQ(a.gpt.num_params(), b.gpt.num_params());
      for (int64_t i = 0; i < a.gpt.num_params(); ++i)
        ASSERT_EQ(a.gpt.grads()[i], b.gpt.grads()[i]) << what << ", gradient " << i;
    }
}

// --activation-compression fp8 (Gist's delayed precision reduction): the GeLU and FC2 inputs and the
// attention's softmax and dropout outputs are kept in 8 bits (measured = the formula), the forward
// still computes at full precision (the same loss), and the gradients move by what 8-bit inputs
// to the backward cost: a few percent of each gradient's norm, not more.
TEST(ActivationMemory, Fp8KeptTensorsAreCountedAndGradientsStayClose) {
  const ModelConfig m = modeltest::small_model(0.1, kLayers, kHidden, kHeads, kSeq, 256);
  const modeltest::Tokens tok(kRows, kSeq, m.vocab, 2);
  const int64_t big = int64_t(kSeq) * kRows * 4 * kHidden, as2b = int64_t(kHeads) * kSeq * kSeq * kRows;
  for (DType dt : {DType::fp32, DType::bf16})
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
      LayoutConfig plain = modeltest::layout(r, dt), fp8 = plain;
      fp8.fp8_kept = true;
      Probed a(m, plain), b(m, fp8);
      double loss_a = 0, loss_b = 0;
      run_step(a, tok, &loss_a), run_step(b, tok, &loss_b);
      auto x = shape_of(m, dt, kRows);
      x.fp8_kept = true;
      const std::string what = std::string(to_string(dt)) + ", recompute " + to_string(r);
      const int d = dt == DType::fp32 ? 4 : 2;
      for (int l = 0; l < kLayers; ++l) {
        expect_within(b.kept.per_layer()[size_t(l)],
                      analysis::layer_activation_bytes(x, r == Recompute::full, r == Recompute::selective), 0.02, what);
        // GeLU and FC2 inputs: d bytes → 1 + 1/32; the two s² tensors likewise when kept.
        const int64_t s2 = r == Recompute::none ? 2 * as2b : 0;
        const int64_t saved = r == Recompute::full ? 0 : (2 * big + s2) * d - (2 * big + s2) * 33 / 32;
        EXPECT_EQ(a.kept.per_layer()[size_t(l)] - b.kept.per_layer()[size_t(l)], saved) << what;
      }
      EXPECT_EQ(loss_a, loss_b) << what << ": the forward is not compressed";
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < a.gpt.num_params(); ++i) {
        const double e = double(a.gpt.grads()[i]) - double(b.gpt.grads()[i]);
        diff += e * e, norm += double(a.gpt.grads()[i]) * double(a.gpt.grads()[i]);
      }
      const double rel = std::sqrt(diff / norm);
      EXPECT_GT(rel, 0.0) << what << ": the backward read 8-bit values";
      EXPECT_LT(rel, 0.05) << what;
      std::printf("%s: gradient moved by %.4f of its norm\n", what.c_str(), rel);
    }
}

// Segments (docs/design.md §3–4): a checkpoint keeps exactly its input, a layer inside a segment
// nothing, and the step's activation peak is the stage peak of the per-layer list
// ((f − 1)·K + max(K + H, max over backward units of kept below + live) + E) within 2%.
TEST(ActivationMemory, SegmentsKeepTheirInputAndPeakAsPredicted) {
  const int L = 6;
  const ModelConfig m = modeltest::small_model(0.1, L, kHidden, kHeads, kSeq, 256);
  const modeltest::Tokens tok(kRows, kSeq, m.vocab, 2);
  auto uniform = [](int k) {
    LayoutConfig l = modeltest::layout(Recompute::full, DType::fp32, k);
    l.recompute_method = RecomputeMethod::uniform;
    return l;
  };
  auto planned = [](const char* text) {
    LayoutConfig l = modeltest::layout(Recompute::none, DType::fp32);
    l.recompute_plan = parse_recompute_plan(text);
    return l;
  };
  const std::vector<std::pair<std::string, LayoutConfig>> cases = {
      {"none", modeltest::layout(Recompute::none, DType::fp32)},
      {"selective", modeltest::layout(Recompute::selective, DType::fp32)},
      {"full", modeltest::layout(Recompute::full, DType::fp32)},
      {"block 2", modeltest::layout(Recompute::full, DType::fp32, 2)},
      {"uniform 2", uniform(2)},
      {"uniform 3", uniform(3)},
      {"uniform 6", uniform(6)},
      {"c~snnc", planned("c~snnc")}};
  const auto x = shape_of(m, DType::fp32, kRows);
  std::map<std::string, int64_t> peaks;
  for (const auto& [name, layout] : cases) {
    Probed p(m, layout);
    const int64_t peak = run_step(p, tok);
    peaks[name] = peak;
    const std::vector<LayerRecompute> modes = layer_recompute(layout, L);
    for (int l = 0; l < L; ++l) {
      const LayerRecompute mode = modes[size_t(l)];
      const int64_t kept = p.kept.per_layer()[size_t(l)];
      if (mode == LayerRecompute::checkpoint) EXPECT_EQ(kept, analysis::layer_kept_bytes(x, mode)) << name << " " << l;
      else if (mode == LayerRecompute::in_segment) EXPECT_EQ(kept, 0) << name << " " << l;
      else expect_within(kept, analysis::layer_kept_bytes(x, mode), 0.001, name + " layer " + std::to_string(l));
    }
    analysis::MemoryCase c{x, m, layout};
    const int64_t predicted = analysis::rank_memory(c, 0).activations;
    std::printf("%-10s %s measured peak %lld, predicted %lld (%.4f)\n", name.c_str(),
                recompute_plan_text(modes).c_str(), (long long)peak, (long long)predicted, double(peak) / double(predicted));
    EXPECT_LE(std::fabs(double(peak - predicted)), 0.005 * double(predicted)) << name;  // exact on this machine
  }
  // Uniform √L here keeps more at its peak than full (a layer's live bytes are ~25 of its inputs).
  EXPECT_LT(peaks["full"], peaks["uniform 3"]);
  EXPECT_LT(peaks["uniform 3"], peaks["uniform 6"]);
}
