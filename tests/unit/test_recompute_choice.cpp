// The recompute chooser (docs/design.md §4) against brute force over every valid plan in {n,s,c,~}ⁿ,
// under the real stage_activation_peak: least FLOPs within the budget, ties to the lower peak, then to
// fewer checkpoints; and the budgets at a uniform mode's peak, the error below the least peak, Chen's
// unit-cost model and a 200-layer stage.
// Past the usual length on purpose: the chooser's cases share the brute force they are checked against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/recompute_choice.hpp"
#include "core/error.hpp"
#include "core/recompute_plan.hpp"

using namespace lattice;
using namespace lattice::analysis;

namespace {

using Mode = LayerRecompute;

LayerModeCost& mode_cost(StageRecomputeCosts& c, Mode m) { return c.mode[size_t(m)]; }

// One layer's costs in the structure the model gives them (whole bytes and FLOPs, so every sum is
// exact): A all activations, S the s² tensors kept, S2 those tensors re-made at full precision, I the
// checkpointed input.
StageRecomputeCosts layer_costs(double A, double S, double S2, double I, double F_full, double F_sel, double H,
                                double f, double fixed) {
  StageRecomputeCosts c;
  mode_cost(c, Mode::none) = {A, A, 0};
  mode_cost(c, Mode::selective) = {A - S, A - S + S2, F_sel};
  mode_cost(c, Mode::checkpoint) = {I, A, F_full};
  mode_cost(c, Mode::in_segment) = {0, A, F_full};
  c.head = H, c.in_flight = f, c.fixed = fixed;
  return c;
}

enum class CostKind {
  realistic,
  selective_tail_above_segment,
  input_is_whole_layer,
  selective_tail_zero,
  selective_free,             // FLOPs tie across selective counts: the peak decides
  none_dearer_than_selective,  // not a model's costs, but the interface allows them
  arbitrary,                   // any kept, live and FLOPs the fast path takes
  arbitrary_in_segment_kept    // any at all with kept ≥ 0, in_segment keeping bytes too: the general search
};

StageRecomputeCosts arbitrary_costs(std::mt19937_64& rng, bool in_segment_kept) {
  auto between = [&](int64_t lo, int64_t hi) { return double(std::uniform_int_distribution<int64_t>(lo, hi)(rng)); };
  StageRecomputeCosts c;
  const double none_tail = between(0, 50000), selective_tail = between(0, 50000);
  for (Mode m : {Mode::none, Mode::selective, Mode::checkpoint, Mode::in_segment}) {
    LayerModeCost& u = mode_cost(c, m);
    u.kept = m == Mode::in_segment && !in_segment_kept ? 0 : between(0, 50000);
    u.flops = between(0, 20000);
  }
  mode_cost(c, Mode::none).live = mode_cost(c, Mode::none).kept + none_tail;
  mode_cost(c, Mode::selective).live = mode_cost(c, Mode::selective).kept + selective_tail;
  const double least_segment_tail = in_segment_kept ? 0 : std::max(none_tail, selective_tail);
  mode_cost(c, Mode::checkpoint).live = mode_cost(c, Mode::checkpoint).kept + least_segment_tail + between(0, 50000);
  mode_cost(c, Mode::in_segment).live = between(0, 50000);
  c.head = between(0, 1) ? 0 : between(0, 100000);
  c.in_flight = between(1, 3);
  c.fixed = between(0, 1000000);
  return c;
}

StageRecomputeCosts random_costs(std::mt19937_64& rng, CostKind kind) {
  if (kind == CostKind::arbitrary || kind == CostKind::arbitrary_in_segment_kept)
    return arbitrary_costs(rng, kind == CostKind::arbitrary_in_segment_kept);
  auto between = [&](int64_t lo, int64_t hi) { return double(std::uniform_int_distribution<int64_t>(lo, hi)(rng)); };
  const double A = between(1000, 50000), S = between(0, int64_t(A) / 2);
  double I = between(1, int64_t(A) - 1);
  // Selective's tail (live − kept) is S2; a one-layer segment's is A − I, a none layer's 0.
  double S2 = between(0, int64_t(A - I));
  if (kind == CostKind::selective_tail_above_segment) S2 = between(int64_t(A - I) + 1, int64_t(4 * A));
  if (kind == CostKind::input_is_whole_layer) I = A, S2 = between(0, int64_t(A));
  if (kind == CostKind::selective_tail_zero) S2 = 0;
  const double F_sel = between(1, 5000);
  double F_full = F_sel + between(1, 15000);
  if (between(0, 2) == 0) F_full = F_sel * between(2, 4);  // a whole multiple: FLOPs tie across shapes
  // A quarter of the time no head and one micro-batch: the blocks' own terms set the peak.
  const bool bare = between(0, 3) == 0;
  const double H = bare ? 0 : between(0, int64_t(3 * A)), f = bare ? 1 : between(1, 4), fixed = between(0, 1000000);
  StageRecomputeCosts c = layer_costs(A, S, S2, I, F_full, kind == CostKind::selective_free ? 0 : F_sel, H, f, fixed);
  if (kind == CostKind::none_dearer_than_selective) mode_cost(c, Mode::none).flops = F_sel + between(1, 1000);
  return c;
}

void all_valid_plans(int n, std::vector<Mode>& prefix, std::vector<std::vector<Mode>>& out) {
  if (int(prefix.size()) == n) return out.push_back(prefix);
  for (Mode m : {Mode::none, Mode::selective, Mode::checkpoint, Mode::in_segment}) {
    if (m == Mode::in_segment && (prefix.empty() || !forward_recomputed(prefix.back()))) continue;
    prefix.push_back(m);
    all_valid_plans(n, prefix, out);
    prefix.pop_back();
  }
}

int checkpoints(const std::vector<Mode>& plan) { return int(std::count(plan.begin(), plan.end(), Mode::checkpoint)); }

struct Scored {
  std::vector<Mode> plan;
  double peak, flops;
  int checkpoints;
};

std::vector<Scored> score_all(const StageRecomputeCosts& c, int n, bool allow_selective) {
  std::vector<std::vector<Mode>> plans;
  std::vector<Mode> prefix;
  all_valid_plans(n, prefix, plans);
  std::vector<Scored> scored;
  for (const auto& p : plans)
    if (allow_selective || std::find(p.begin(), p.end(), Mode::selective) == p.end())
      scored.push_back({p, stage_activation_peak(c, p), recompute_flops(c, p), checkpoints(p)});
  return scored;
}

// The brute-force answer: least (FLOPs, peak, checkpoints) among the plans within the budget.
const Scored* brute_force_choice(const std::vector<Scored>& all, double budget) {
  const Scored* best = nullptr;
  for (const Scored& s : all)
    if (s.peak <= budget && (!best || std::tie(s.flops, s.peak, s.checkpoints) <
                                          std::tie(best->flops, best->peak, best->checkpoints)))
      best = &s;
  return best;
}

void expect_consistent(const StageRecomputeCosts& c, int n, bool allow_selective, const RecomputeChoice& got) {
  ASSERT_EQ(int(got.plan.size()), n);
  EXPECT_EQ(got.peak, stage_activation_peak(c, got.plan));
  EXPECT_EQ(got.flops, recompute_flops(c, got.plan));
  if (!allow_selective) {
    EXPECT_EQ(std::count(got.plan.begin(), got.plan.end(), Mode::selective), 0);
  }
}

// Every budget between the least peak and all-none's (and every plan's exact peak and a byte below it).
int check_against_brute_force(const StageRecomputeCosts& c, int n, bool allow_selective, std::mt19937_64& rng) {
  const std::vector<Scored> all = score_all(c, n, allow_selective);
  const Scored* least = &all.front();
  for (const Scored& s : all)
    if (std::tie(s.peak, s.flops) < std::tie(least->peak, least->flops)) least = &s;
  const double none_peak = stage_activation_peak(c, std::vector<Mode>(n, Mode::none));
  std::vector<double> budgets = {least->peak - 1, none_peak, none_peak + 1};
  for (int i = 0; i <= 8; ++i) budgets.push_back(least->peak + (none_peak - least->peak) * i / 8);
  for (int i = 0; i < 6; ++i) {
    const double exact = all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng)].peak;
    budgets.insert(budgets.end(), {exact, exact - 1});
  }
  const RecomputeChoice least_got = least_peak_recompute(c, n, allow_selective);
  expect_consistent(c, n, allow_selective, least_got);
  EXPECT_EQ(least_got.peak, least->peak);
  EXPECT_EQ(least_got.flops, least->flops);
  int checked = 0;
  for (double budget : budgets) {
    const Scored* want = brute_force_choice(all, budget);
    const std::string where = "n " + std::to_string(n) + ", budget " + std::to_string(budget) +
                              (allow_selective ? "" : ", no selective");
    if (!want) {
      EXPECT_THROW(choose_recompute(c, n, budget, allow_selective), InputError) << where;
      continue;
    }
    const RecomputeChoice got = choose_recompute(c, n, budget, allow_selective);
    expect_consistent(c, n, allow_selective, got);
    EXPECT_LE(got.peak, budget) << where;
    EXPECT_EQ(got.flops, want->flops) << where << ": got " << recompute_plan_text(got.plan) << ", brute force "
                                      << recompute_plan_text(want->plan);
    EXPECT_EQ(got.peak, want->peak) << where << ": got " << recompute_plan_text(got.plan);
    EXPECT_EQ(checkpoints(got.plan), want->checkpoints) << where << ": got " << recompute_plan_text(got.plan);
    ++checked;
  }
  return checked;
}

void brute_force_trials(CostKind kind, uint64_t seed, int trials_per_size, int min_layers = 1, int max_layers = 7) {
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int n = min_layers; n <= max_layers; ++n)
    for (int trial = 0; trial < trials_per_size; ++trial) {
      const StageRecomputeCosts c = random_costs(rng, kind);
      checked += check_against_brute_force(c, n, true, rng);
      checked += check_against_brute_force(c, n, false, rng);
      if (testing::Test::HasFailure()) return;
    }
  EXPECT_GT(checked, (max_layers - min_layers + 1) * trials_per_size * 10);
}

// GPT-2-small-like bytes for 12 layers (A/I = 25.5), fp32 s² tensors re-made at the size kept; no head
// and one micro-batch in flight (a one-stage run's first layers).
StageRecomputeCosts gpt2_small_like() {
  const double I = 3145728, A = 25.5 * I, S = 28311552;
  return layer_costs(A, S, S, I, 15300820992.0, 805306368.0, 0, 1, 500.0 * 1024 * 1024);
}

std::string mib(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

double peak_of(const StageRecomputeCosts& c, const std::string& plan) {
  return stage_activation_peak(c, parse_recompute_plan(plan));
}

std::string chosen(const StageRecomputeCosts& c, int n, double budget, bool allow_selective = true) {
  return recompute_plan_text(choose_recompute(c, n, budget, allow_selective).plan);
}

}  // namespace

TEST(RecomputeChoice, MatchesBruteForceOnRealisticCosts) { brute_force_trials(CostKind::realistic, 19, 40); }

// A selective tail above a one-layer segment's (8-bit kept s² tensors, S2 > A − I), a checkpoint as large
// as the layer (Chen's unit cost, where every tail ties at 0 for one-layer units), a selective layer
// that re-makes nothing (its tail ties with none's).
TEST(RecomputeChoice, MatchesBruteForceOnUnusualCosts) {
  brute_force_trials(CostKind::selective_tail_above_segment, 20, 15);
  brute_force_trials(CostKind::input_is_whole_layer, 21, 15);
  brute_force_trials(CostKind::selective_tail_zero, 22, 15);
  brute_force_trials(CostKind::selective_free, 23, 15);
  brute_force_trials(CostKind::none_dearer_than_selective, 24, 15);
  brute_force_trials(CostKind::arbitrary, 28, 25);
  brute_force_trials(CostKind::arbitrary_in_segment_kept, 29, 15);
}

// Nine layers: selective counts well inside the range the fast path narrows by the budget.
TEST(RecomputeChoice, MatchesBruteForceAtNineLayers) {
  brute_force_trials(CostKind::realistic, 25, 10, 8, 9);
  brute_force_trials(CostKind::none_dearer_than_selective, 26, 5, 9, 9);
  brute_force_trials(CostKind::selective_free, 27, 5, 9, 9);
  brute_force_trials(CostKind::arbitrary, 30, 10, 9, 9);
}

// A none layer that keeps more than a selective one whose tail is large: the selective block's top
// rises with z, the none block's falls, and the least peak is where they cross (z = 4 of 9), not at an
// end; segments are too costly to compete.
TEST(RecomputeChoice, LeastPeakWhereTheBlocksCross) {
  StageRecomputeCosts c;
  mode_cost(c, Mode::none) = {100, 100, 0};
  mode_cost(c, Mode::selective) = {10, 510, 1};
  mode_cost(c, Mode::checkpoint) = {1000, 100000, 5};
  mode_cost(c, Mode::in_segment) = {0, 100000, 5};
  const RecomputeChoice least = least_peak_recompute(c, 9);
  EXPECT_EQ(recompute_plan_text(least.plan), "ssssnnnnn");
  EXPECT_EQ(least.peak, 540);
  std::mt19937_64 rng(9);
  EXPECT_GT(check_against_brute_force(c, 9, true, rng), 10);
}

TEST(RecomputeChoice, BudgetAtNoneAndSelectivePeaks) {
  const StageRecomputeCosts c = gpt2_small_like();
  const std::string none(12, 'n');
  EXPECT_EQ(chosen(c, 12, peak_of(c, none)), none);
  EXPECT_EQ(chosen(c, 12, peak_of(c, none) * 4), none);
  // A byte below none's peak: one selective layer, the cheapest recompute there is.
  EXPECT_EQ(chosen(c, 12, peak_of(c, none) - 1), "snnnnnnnnnnn");
  // At selective everywhere's peak the top layer stays none: same peak, fewer FLOPs.
  const double all_selective = peak_of(c, std::string(12, 's'));
  EXPECT_EQ(peak_of(c, "sssssssssssn"), all_selective);
  EXPECT_EQ(chosen(c, 12, all_selective), "sssssssssssn");
  // A byte below, no mix of selective and none fits (a full layer costs 19 selective ones): a segment.
  const std::string below = chosen(c, 12, all_selective - 1);
  EXPECT_NE(below.find('c'), std::string::npos) << below;
  // Without selective, none's peak less a byte needs one full layer: the bottom one.
  EXPECT_EQ(chosen(c, 12, peak_of(c, none) - 1, false), "cnnnnnnnnnnn");
}

TEST(RecomputeChoice, BudgetAtFullPeakAndBelowTheLeastPeak) {
  const StageRecomputeCosts c = gpt2_small_like();
  // Full (every layer its own checkpoint) has the least peak; its top layer may stay none for free.
  const double full = peak_of(c, std::string(12, 'c'));
  EXPECT_EQ(chosen(c, 12, full), "cccccccccccn");
  EXPECT_EQ(least_peak_recompute(c, 12).peak, full);
  try {
    choose_recompute(c, 12, full - 1);
    ADD_FAILURE() << "a budget below the least peak was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "no recompute plan fits " + mib(full - 1) + ": the least peak is " + mib(full) + " (cccccccccccn)");
  }
  EXPECT_THROW(choose_recompute(c, 12, 0), InputError);
  EXPECT_THROW(choose_recompute(c, -1, full), InputError);
}

TEST(RecomputeChoice, IsDeterministic) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const StageRecomputeCosts c = random_costs(rng, CostKind::realistic);
    const double least = least_peak_recompute(c, 30).peak, none = peak_of(c, std::string(30, 'n'));
    const double budget = least + (none - least) * trial / 20;
    const RecomputeChoice a = choose_recompute(c, 30, budget), b = choose_recompute(c, 30, budget);
    EXPECT_EQ(a.plan, b.plan);
    EXPECT_EQ(a.peak, b.peak);
    EXPECT_EQ(a.flops, b.flops);
  }
}

// Chen et al.'s unit cost (I = A, no head, one micro-batch): uniform segments of √n layers are the best
// uniform ones, at (2√n − 1)·A; the chooser's least peak, free to vary lengths (n ≤ T(T+1)/2 for
// lengths T, T − 1, …), is T·A with between √n and T units.
TEST(RecomputeChoice, ChenUnitCostNearSqrtNSegments) {
  const double A = 1000;
  const StageRecomputeCosts c = layer_costs(A, 0, 0, A, 1, 1, 0, 1, 0);
  for (int n : {16, 36, 49, 100}) {
    const int root = int(std::lround(std::sqrt(n)));
    int best_k = 0;
    double best_uniform = 0;
    for (int k = 1; k <= n; ++k) {
      if (n % k != 0) continue;
      std::string plan;
      for (int j = 0; j < n / k; ++j) plan.append(1, 'c').append(k - 1, '~');
      const double peak = peak_of(c, plan);
      if (best_k == 0 || peak < best_uniform) best_k = k, best_uniform = peak;
    }
    EXPECT_EQ(best_k, root) << n;
    EXPECT_EQ(best_uniform, (2 * root - 1) * A) << n;
    int T = 1;
    while (T * (T + 1) / 2 < n) ++T;
    const RecomputeChoice least = least_peak_recompute(c, n, false);
    EXPECT_EQ(least.peak, T * A) << n;
    const std::string text = recompute_plan_text(least.plan);
    const int units = int(std::count(text.begin(), text.end(), 'c') + std::count(text.begin(), text.end(), 'n'));
    EXPECT_GE(units, root) << text;
    EXPECT_LE(units, T) << text;
    const RecomputeChoice at_uniform = choose_recompute(c, n, best_uniform, false);
    EXPECT_LE(at_uniform.peak, best_uniform);
    EXPECT_LE(at_uniform.flops, double(n));
  }
}

// 200 layers a stage (the planner's --search calls the chooser for every layout): completes, fits.
TEST(RecomputeChoice, TwoHundredLayersComplete) {
  std::mt19937_64 rng(200);
  for (int trial = 0; trial < 3; ++trial) {
    const StageRecomputeCosts c = random_costs(rng, CostKind::realistic);
    for (bool allow_selective : {true, false}) {
      const RecomputeChoice least = least_peak_recompute(c, 200, allow_selective);
      const double none = peak_of(c, std::string(200, 'n'));
      double previous_flops = least.flops;
      for (double share : {0.0, 0.01, 0.25, 0.5, 0.99, 1.0}) {
        const double budget = least.peak + (none - least.peak) * share;
        const RecomputeChoice got = choose_recompute(c, 200, budget, allow_selective);
        expect_consistent(c, 200, allow_selective, got);
        EXPECT_LE(got.peak, budget);
        EXPECT_LE(got.flops, previous_flops);  // a larger budget never costs more
        previous_flops = got.flops;
      }
      EXPECT_EQ(previous_flops, 0);
    }
  }
}

// The general search (a selective tail above a one-layer segment's) is offered up to 64 layers a
// stage; past that the chooser says so, and without selective it is the fast path again.
TEST(RecomputeChoice, SelectiveTailAboveSegmentPastTheGeneralSearch) {
  std::mt19937_64 rng(64);
  const StageRecomputeCosts c = random_costs(rng, CostKind::selective_tail_above_segment);
  EXPECT_NO_THROW(least_peak_recompute(c, 64));
  EXPECT_THROW(least_peak_recompute(c, 65), InputError);
  EXPECT_EQ(least_peak_recompute(c, 200, false).plan.size(), 200u);
}

// Backward's extras (ZeRO-2/3's gradient buckets): X_h beside K + H, X_top beside the top unit, X_rest
// beside every unit below it, worked by hand.
TEST(RecomputeChoice, BackwardExtrasEnterThePeak) {
  StageRecomputeCosts c = layer_costs(100, 0, 0, 10, 7, 0, 50, 1, 1000);
  c.head_extra = 30, c.top_extra = 5, c.rest_extra = 200;
  // "nn": layer 0 holds 100 live + 200; the top layer 100 kept below + 100 live + 5; the head 200 + 50 + 30.
  EXPECT_EQ(peak_of(c, "nn"), 1000 + 300);
  // "c~": one unit, the top: 200 live + 5 against 10 kept + 80.
  EXPECT_EQ(peak_of(c, "c~"), 1000 + 205);
  c.rest_extra = 0;
  EXPECT_EQ(peak_of(c, "nn"), 1000 + 280);  // the head's backward is the peak now
  c.head_extra = 0, c.top_extra = 0;
  EXPECT_EQ(peak_of(c, "nn"), 1000 + 250);
}

// With extras the chooser charges every unit max(X_top, X_rest): its choice fits the budget under the
// exact peak, is the brute-force choice under that charge, and never costs fewer FLOPs than the exact
// brute force's (it is conservative, never optimistic).
TEST(RecomputeChoice, BackwardExtrasChoiceFitsAndIsConservative) {
  std::mt19937_64 rng(2026);
  auto between = [&](int64_t lo, int64_t hi) { return double(std::uniform_int_distribution<int64_t>(lo, hi)(rng)); };
  int checked = 0;
  for (int n = 1; n <= 6; ++n)
    for (int trial = 0; trial < 25; ++trial) {
      StageRecomputeCosts c = random_costs(rng, CostKind::realistic);
      c.head_extra = between(0, 60000), c.top_extra = between(0, 30000), c.rest_extra = between(0, 60000);
      StageRecomputeCosts charged = c;
      const double unit = std::max(c.top_extra, c.rest_extra);
      charged.head += c.head_extra - unit, charged.fixed += unit;
      charged.head_extra = charged.top_extra = charged.rest_extra = 0;
      const std::vector<Scored> exact = score_all(c, n, true), conservative = score_all(charged, n, true);
      double lo = exact.front().peak, hi = lo;
      for (const Scored& s : conservative) lo = std::min(lo, s.peak), hi = std::max(hi, s.peak);
      for (int i = 0; i <= 6; ++i) {
        const double budget = lo + (hi - lo) * i / 6;
        const Scored* want = brute_force_choice(conservative, budget);
        const Scored* best_exact = brute_force_choice(exact, budget);
        if (!want) {
          EXPECT_THROW(choose_recompute(c, n, budget), InputError);
          continue;
        }
        const RecomputeChoice got = choose_recompute(c, n, budget);
        EXPECT_EQ(got.peak, stage_activation_peak(c, got.plan));
        EXPECT_LE(got.peak, budget);
        EXPECT_EQ(got.flops, want->flops);
        ASSERT_NE(best_exact, nullptr);
        EXPECT_GE(got.flops, best_exact->flops);
        ++checked;
      }
      if (testing::Test::HasFailure()) return;
    }
  EXPECT_GT(checked, 500);
}
