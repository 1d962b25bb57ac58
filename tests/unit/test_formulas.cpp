// The formula module against docs/design.md's closed forms (d = 2) for the paper's four models, and
// the MFU/HFU the paper reports (docs/design.md §7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "analysis/formulas.hpp"
#include "analysis/recompute_choice.hpp"
#include "core/error.hpp"
#include "plan/evaluate.hpp"
#include "plan/paper_models.hpp"

using namespace lattice;
using namespace lattice::analysis;

namespace {

struct Dims {
  int64_t s, b, h, a, t;
};

ActivationShape shape(const Dims& d, bool sp, int t) {
  ActivationShape x;
  x.s = d.s;
  x.b = d.b;
  x.h = d.h;
  x.a = d.a;
  x.v = 51200;
  x.t = t;
  x.sp = sp;
  x.d = 2;
  x.dropout = true;
  return x;
}

std::vector<Dims> paper_dims() {
  std::vector<Dims> out;
  for (const auto& m : plan::paper_models()) out.push_back({2048, m.micro_batch, m.hidden, m.heads, 8});
  return out;
}

}  // namespace

// Table 2, d = 2, in integers: sbh·k plus as²b·5 over t. The paper's shapes divide exactly.
TEST(Formulas, Table2RowsEqualSpecClosedFormsForPaperModels) {
  for (const Dims& d : paper_dims()) {
    const int64_t sbh = d.s * d.b * d.h, as2b = d.a * d.s * d.s * d.b, t = d.t;
    SCOPED_TRACE("h=" + std::to_string(d.h));
    // no parallelism: sbh(34 + 5as/h)
    EXPECT_EQ(layer_activation_bytes(shape(d, false, 1), false, false), 34 * sbh + 5 * as2b);
    // TP: sbh(10 + 24/t + 5as/(ht))
    EXPECT_EQ(layer_activation_bytes(shape(d, false, 8), false, false), 10 * sbh + 24 * sbh / t + 5 * as2b / t);
    // TP + SP: sbh/t (34 + 5as/h)
    EXPECT_EQ(layer_activation_bytes(shape(d, true, 8), false, false), (34 * sbh + 5 * as2b) / t);
    // TP + selective: sbh(10 + 24/t)
    EXPECT_EQ(layer_activation_bytes(shape(d, false, 8), false, true), 10 * sbh + 24 * sbh / t);
    // TP + SP + selective: 34 sbh / t
    EXPECT_EQ(layer_activation_bytes(shape(d, true, 8), false, true), 34 * sbh / t);
    // full recompute: 2sbh (and its sequence shard under SP)
    EXPECT_EQ(layer_activation_bytes(shape(d, false, 8), true, false), 2 * sbh);
    EXPECT_EQ(layer_activation_bytes(shape(d, true, 8), true, false), 2 * sbh / t);
  }
}

TEST(Formulas, GeneralDSplitsIntoReplicatedDividedAndAttention) {
  const Dims d{128, 2, 64, 4, 4};
  for (int bytes : {2, 4}) {
    ActivationShape x = shape(d, false, 4);
    x.d = bytes;
    const int64_t sbh = d.s * d.b * d.h, as2b = d.a * d.s * d.s * d.b;
    const LayerBytes parts = layer_activation_parts(x);
    EXPECT_EQ(parts.replicated, sbh * (4 * bytes + 2));
    EXPECT_EQ(parts.tp_divided, sbh * 12 * bytes / 4);
    EXPECT_EQ(parts.attention, as2b * (2 * bytes + 1) / 4);
  }
}

// Eq. 5: L layers' worth of the per-layer row on the first stage, times 1 + (p-1)/(pm).
TEST(Formulas, FirstStageIsLTimesTheRowWithTheInterleavedFactor) {
  for (const auto& m : plan::paper_models()) {
    const plan::PlanRequest r = plan::paper_request(m, Recompute::selective, true);
    const ActivationShape x = plan::activation_shape(r);
    const double row = double(layer_activation_bytes(x, false, true));
    double expect = m.layers * row;
    if (m.pp > 1 && m.virtual_stages > 1) expect *= 1.0 + double(m.pp - 1) / (m.pp * m.virtual_stages);
    EXPECT_DOUBLE_EQ(first_stage_layer_bytes(x, r.layout, m.layers), expect) << m.name;
  }
}

TEST(Formulas, ExtrasOutsideTheLayers) {
  const Dims d{2048, 1, 6144, 64, 8};
  const int64_t sbh = d.s * d.b * d.h;
  const ActivationShape x = shape(d, false, 8);
  // p > 1: only the embedding dropout masks of p micro-batches.
  EXPECT_EQ(extra_activation_bytes(x, 4, 4), sbh * 4);
  // p == 1: plus the final LN input and output-projection input (d·sbh each, sharded by t only under
  // SP) and, with bf16 activations (d = 2), the bf16 logits 2sbv/t with each row's maximum and sum 8sb
  // (the probabilities made again in backward).
  EXPECT_EQ(extra_activation_bytes(x, 1, 1), sbh + 2 * sbh * 2 + 2 * d.s * d.b * 51200 / 8 + 8 * d.s * d.b);
  const ActivationShape xs = shape(d, true, 8);
  EXPECT_EQ(extra_activation_bytes(xs, 1, 1), sbh / 8 + 2 * sbh * 2 / 8 + 2 * d.s * d.b * 51200 / 8 + 8 * d.s * d.b);
  // fp32 activations keep the fp32 probabilities, the paper's 4sbv/t.
  ActivationShape x32 = x;
  x32.d = 4;
  EXPECT_EQ(extra_activation_bytes(x32, 1, 1), sbh + 2 * sbh * 4 + 4 * d.s * d.b * 51200 / 8);
}

// The refusals' kept part: the formulas' own bytes where they can count them (a layer per layer, the
// head's at p = 1), and past 2^62 no int64 product formed, still past any machine.
TEST(Formulas, KeptActivationBoundIsTheFormulasOrPastAnyMachine) {
  const ActivationShape x = shape(Dims{2048, 4, 6144, 64, 8}, true, 8);  // the paper's 22B layer
  EXPECT_EQ(kept_activation_bound(x, 3, false, true, false), 3.0 * double(layer_activation_bytes(x, false, true)));
  EXPECT_EQ(kept_activation_bound(x, 2, true, false, true),
            2.0 * double(layer_activation_bytes(x, true, false)) + double(extra_activation_bytes(x, 1, 1)));
  ActivationShape huge = x;
  huge.s = huge.b = huge.a = int64_t(1) << 20;  // 9·a·s²·b = 9·2^80: uncountable in int64
  EXPECT_THROW(require_countable_activations(huge), InputError);
  EXPECT_GE(kept_activation_bound(huge, 1, false, false, true), 0x1p80);
  ActivationShape wide = x;  // the logits' 4·s·b·v alone past 2^62
  wide.b = int64_t(1) << 30, wide.v = int64_t(1) << 20;
  EXPECT_GE(kept_activation_bound(wide, 1, false, false, true), 0x1p62);
}

// docs/design.md §8: 16Ψ; ZeRO-1 4Ψ + 12Ψ/N; ZeRO-2 2Ψ + 14Ψ/N; ZeRO-3 16Ψ/N.
TEST(Formulas, ModelStateBytesFollowZeroStages) {
  const int64_t psi = 1000000, n = 8;
  EXPECT_EQ(model_state_bytes(psi, n, 0, true).total(), 16 * psi);
  EXPECT_EQ(model_state_bytes(psi, n, 1, true).total(), 4 * psi + 12 * psi / n);
  EXPECT_EQ(model_state_bytes(psi, n, 2, true).total(), 2 * psi + 14 * psi / n);
  EXPECT_EQ(model_state_bytes(psi, n, 3, true).total(), 16 * psi / n);
  EXPECT_EQ(model_state_bytes(psi, 1, 0, false).total(), 16 * psi);  // fp32: 4 + 4 + 8
}

// docs/design.md §5: a rank's traffic in a step, counted by direction from its stage and its passes.
// (The CLI tests hold these against the bytes the communicators counted.)
TEST(Formulas, StepTrafficCountsTheRanksPassesAndStage) {
  const double unit = 2.0 * (2 - 1) / 2 * (16 * 2 * 32) * 4;  // one all-reduce of s·b·h fp32, t = 2
  const StageTraffic model{4, 0, true, true, false};
  StageTraffic model_sp = model;
  model_sp.sequence_parallel = true;
  // A whole model's step: (4L + 2) all-reduces a micro-batch, with or without SP (paper §4.3).
  EXPECT_DOUBLE_EQ(tp_conjugate_bytes(16, 2, 32, 2, model, StepPasses::whole(3)), (4 * 4 + 2) * 3 * unit);
  EXPECT_DOUBLE_EQ(tp_conjugate_bytes(16, 2, 32, 2, model_sp, StepPasses::whole(3)), (4 * 4 + 2) * 3 * unit);
  EXPECT_EQ(tp_conjugate_bytes(16, 2, 32, 1, model, StepPasses::whole(3)), 0.0);
  // A first stage of two layers, one re-run, in a drained PipeDream-2BW step: 4 forwards, 5 backwards.
  const StepPasses drained{4, 5, 2};
  StageTraffic first{2, 1, true, false, false};
  EXPECT_DOUBLE_EQ(tp_conjugate_bytes(16, 2, 32, 2, first, drained), (4 * (4 + 1) + 5 * (4 + 2)) * unit);
  first.sequence_parallel = true;  // the embedding's ḡ: half forward, half backward
  EXPECT_DOUBLE_EQ(tp_conjugate_bytes(16, 2, 32, 2, first, drained), (4 * 4.5 + 5 * 6.5) * unit);
  // The ring at c = 2: a pair is 2·b·(s/c)·h/t fp32; c − 1 a layer forward, 2c − 1 backward, c − 1 a re-run.
  const double pair = 2.0 * 2 * 8 * 16 * 4;
  EXPECT_DOUBLE_EQ(cp_bytes(CpComm::p2p, 16, 2, 32, 2, 2, true, first, drained), (4 * 2 * 1 + 5 * (2 * 3 + 1)) * pair);
  // Ulysses: 4 exchanges forward, 5 backward with fused attention, 4 more a re-run; (c−1)/c of b·(s/c)·h/t leaves.
  const double exchange = 0.5 * 2 * 8 * 16 * 4;
  EXPECT_DOUBLE_EQ(cp_bytes(CpComm::a2a, 16, 2, 32, 2, 2, true, first, drained),
                   (4 * 2 * 4 + 5 * (2 * 5 + 4)) * exchange);
  // Data parallelism: 2Ψ an update (ZeRO 0-1); ZeRO-2 a reduce-scatter a backward and a gather an update.
  EXPECT_DOUBLE_EQ(dp_bytes(1000, 4, 1, drained), 2 * 0.75 * 4 * 1000 * 2);
  EXPECT_DOUBLE_EQ(dp_bytes(1000, 4, 2, drained, 0, 10), 0.75 * 4 * (5 * 1010 + 2 * 1000));
  EXPECT_EQ(dp_bytes(1000, 4, 0, {4, 3, 0}), 0.0);  // PipeDream-2BW's first step completes no batch
  EXPECT_DOUBLE_EQ(dp_bytes(1000, 4, 3, StepPasses::whole(2), 50, 10), 0.75 * 4 * (2 * 1010 + 2 * 2000 + 2 * 50));
}

TEST(Formulas, ShardParametersMatchTheModelOnOneRankAndSplitUnderTP) {
  ModelConfig m;
  m.layers = 8;
  m.hidden = 256;
  m.heads = 8;
  m.seq_len = 128;
  m.vocab = 1000;
  EXPECT_EQ(shard_parameters(m, 1, 1), m.num_params());
  const int64_t h = m.hidden;
  // t = 4, p = 2: four layers of 12h²/4 + 7h/4 + 6h, the vocabulary shard and positions.
  EXPECT_EQ(shard_parameters(m, 4, 2), 4 * (12 * h * h / 4 + 7 * h / 4 + 6 * h) +
                                           int64_t(m.padded_vocab(4)) / 4 * h + m.seq_len * h);
}

// Eq. 7 and the two hardware-FLOP forms.
TEST(Formulas, FlopsFormsAgreeWithTheAppendix) {
  const FlopsShape f{512, 2048, 128, 25600, 51200};
  const double model = 72.0 * 512 * 2048 * 128 * 25600.0 * 25600 *
                       (1 + 2048.0 / (6 * 25600) + 51200.0 / (12 * 25600.0 * 128));
  EXPECT_DOUBLE_EQ(model_flops(f), model);
  const double layer_fwd = 24.0 * 512 * 2048 * 128 * 25600.0 * 25600 * (1 + 2048.0 / (6 * 25600));
  EXPECT_DOUBLE_EQ(hardware_flops_counted(f, Recompute::full), model + layer_fwd);
  // Selective re-runs 4Bs²h per layer: the s-term of the bracket becomes 2s/9h (eq. 8: s/3h).
  const double bracket = 72.0 * 512 * 2048 * 128 * 25600.0 * 25600;
  EXPECT_NEAR(hardware_flops_counted(f, Recompute::selective),
              bracket * (1 + 2 * 2048.0 / (9 * 25600) + 51200.0 / (12 * 25600.0 * 128)), 1e-9 * model);
  EXPECT_NEAR(hardware_flops_paper(f, Recompute::selective),
              bracket * (1 + 2048.0 / (3 * 25600) + 51200.0 / (12 * 25600.0 * 128)), 1e-9 * model);
  EXPECT_DOUBLE_EQ(hardware_flops_paper(f, Recompute::none), model);
}

// docs/design.md §7: with the paper's times and 312 TFLOP/s, MFU/HFU within 0.2 points of the paper's.
TEST(Formulas, MfuAndHfuReproduceTable5WithinTwoTenthsOfAPoint) {
  for (const auto& m : plan::paper_models()) {
    const plan::PlanRequest r = plan::paper_request(m, Recompute::selective, true);
    const plan::Utilisation u = plan::utilisation(plan::plan_flops(r), m.gpus, m.this_work_s, 312e12);
    EXPECT_NEAR(100 * u.mfu, m.mfu, 0.2) << m.name;
    EXPECT_NEAR(100 * u.hfu, m.hfu, 0.2) << m.name;
    EXPECT_LT(u.hfu_counted, u.hfu) << m.name;  // 1 + 2s/9h < 1 + s/3h
    EXPECT_GT(u.hfu_counted, u.mfu) << m.name;
  }
}

// docs/design.md §4: the stage peak of a per-layer plan, (f − 1)·K + max(K + H, max_u pre(u) + live(u)) + fixed.
TEST(Formulas, StageActivationPeakOfAPlan) {
  const double I = 10, A = 250, S = 60, S2 = 90, F = 1000, H = 40;
  StageRecomputeCosts c;
  c.mode[size_t(LayerRecompute::none)] = {A, A, 0};
  c.mode[size_t(LayerRecompute::selective)] = {A - S, A - S + S2, 100};
  c.mode[size_t(LayerRecompute::checkpoint)] = {I, A, F};
  c.mode[size_t(LayerRecompute::in_segment)] = {0, A, F};
  c.head = H, c.in_flight = 3, c.fixed = 7;
  // All none: K = 6A, and the head's tensors sit on top of it.
  EXPECT_DOUBLE_EQ(stage_activation_peak(c, parse_recompute_plan("nnnnnn")), 2 * 6 * A + 6 * A + H + 7);
  // Uniform 2: K = 3I; the top segment re-runs two layers over the two checkpoints below it.
  EXPECT_DOUBLE_EQ(stage_activation_peak(c, parse_recompute_plan("c~c~c~")), 2 * 3 * I + (2 * I + 2 * A) + 7);
  EXPECT_DOUBLE_EQ(recompute_flops(c, parse_recompute_plan("c~c~c~")), 6 * F);
  // Every layer a checkpoint (full): K = 6I, one layer live over five inputs.
  EXPECT_DOUBLE_EQ(stage_activation_peak(c, parse_recompute_plan("cccccc")), 2 * 6 * I + (5 * I + A) + 7);
  // A mix: the selective layer's backward holds its re-made s² tensors over c~ (I) below it.
  const double K = I + 2 * (A - S) + A;
  EXPECT_DOUBLE_EQ(stage_activation_peak(c, parse_recompute_plan("c~ssn")),
                   2 * K + std::max({K + H, 2 * A, I + (A - S) + (A - S + S2), I + 2 * (A - S) + A}) + 7);
  EXPECT_DOUBLE_EQ(recompute_flops(c, parse_recompute_plan("c~ssn")), 2 * F + 200);
  EXPECT_THROW(stage_activation_peak(c, parse_recompute_plan("~cn")), InputError);
  EXPECT_THROW(stage_activation_peak(c, parse_recompute_plan("n~")), InputError);
  EXPECT_THROW(parse_recompute_plan("cx"), InputError);
  EXPECT_EQ(recompute_plan_text(parse_recompute_plan("c~sn")), "c~sn");
}

// Uniform segments (docs/design.md §4): the closed form is the per-layer evaluation, the best divisor
// is the brute force's, and with A = I (Chen's unit cost) it is √n.
TEST(Formulas, UniformSegmentPeakAndBestLength) {
  ActivationShape x = shape({256, 4, 768, 12, 1}, false, 1);
  x.d = 4;
  const double I = double(layer_kept_bytes(x, LayerRecompute::checkpoint));
  const double A = double(layer_live_bytes(x, LayerRecompute::checkpoint));
  EXPECT_EQ(layer_kept_bytes(x, LayerRecompute::in_segment), 0);
  EXPECT_EQ(layer_live_bytes(x, LayerRecompute::in_segment), layer_kept_bytes(x, LayerRecompute::none));
  EXPECT_GT(layer_live_bytes(x, LayerRecompute::selective), layer_kept_bytes(x, LayerRecompute::selective));
  StageRecomputeCosts c;
  for (LayerRecompute m : {LayerRecompute::none, LayerRecompute::selective, LayerRecompute::checkpoint,
                           LayerRecompute::in_segment})
    c.mode[size_t(m)] = {double(layer_kept_bytes(x, m)), double(layer_live_bytes(x, m)), layer_recompute_flops(x, m)};
  for (int n : {12, 24, 48})
    for (int k = 1; k <= n; ++k) {
      if (n % k) continue;
      std::vector<LayerRecompute> plan;
      for (int l = 0; l < n; ++l) plan.push_back(l % k ? LayerRecompute::in_segment : LayerRecompute::checkpoint);
      EXPECT_DOUBLE_EQ(stage_activation_peak(c, plan), std::max(n / k * I, uniform_segment_peak(n, I, A, k)))
          << n << " " << k;
    }
  for (int n : {12, 24, 48, 60}) {
    int best = 1;
    for (int k = 1; k <= n; ++k)
      if (n % k == 0 && uniform_segment_peak(n, I, A, k) < uniform_segment_peak(n, I, A, best)) best = k;
    EXPECT_EQ(best_segment_length(n, I, A).best, best) << n;
    EXPECT_DOUBLE_EQ(best_segment_length(n, I, A).real, std::sqrt(n * I / A));
  }
  EXPECT_EQ(best_segment_length(12, I, A).best, 1);  // A/I ≈ 25.5 at GPT-2-small: full beats uniform √L
  for (int n : {16, 36, 49}) EXPECT_EQ(best_segment_length(n, 1.0, 1.0).best, int(std::lround(std::sqrt(n)))) << n;
  // A segment's layer re-runs 24bsh² + 4bs²h, selective 4bs²h.
  EXPECT_DOUBLE_EQ(layer_recompute_flops(x, LayerRecompute::in_segment),
                   24.0 * 256 * 4 * 768.0 * 768 + 4.0 * 256 * 4 * 256 * 768);
  EXPECT_DOUBLE_EQ(layer_recompute_flops(x, LayerRecompute::selective), 4.0 * 256 * 4 * 256 * 768);
  EXPECT_EQ(layer_recompute_flops(x, LayerRecompute::none), 0.0);
}
