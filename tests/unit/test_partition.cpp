// Pipeline partitions: StagePartition's counts and parsing, PipeDream's dynamic program against
// brute force over every composition, its memory cap, and the planner's costs against the planner.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "analysis/memory_categories.hpp"
#include "analysis/partition.hpp"
#include "core/error.hpp"
#include "core/stage_partition.hpp"
#include "plan/auto_partition.hpp"
#include "plan/memory_model.hpp"
#include "plan/evaluate.hpp"

using namespace lattice;
using namespace lattice::analysis;

namespace {

// Every composition of L into p positive parts.
void compositions(int L, int p, std::vector<int>& prefix, const std::function<void(const std::vector<int>&)>& f) {
  if (p == 1) {
    prefix.push_back(L);
    f(prefix);
    prefix.pop_back();
    return;
  }
  for (int c = 1; c <= L - (p - 1); ++c) {
    prefix.push_back(c);
    compositions(L - c, p - 1, prefix, f);
    prefix.pop_back();
  }
}

struct RandomCosts {
  std::vector<double> t, a;
  std::vector<double> head_t, stage_fixed, in_flight;
  PartitionCosts costs(int L, int p) const {
    PartitionCosts c;
    c.layers = L, c.stages = p;
    c.seconds = [this, p](int r, int i, int j) {
      double s = r == p - 1 ? head_t[0] : 0.0;
      for (int l = i; l < j; ++l) s += t[size_t(l)];
      return s;
    };
    c.bytes = [this](int r, int i, int j) {
      double b = stage_fixed[size_t(r)];
      for (int l = i; l < j; ++l) b += in_flight[size_t(r)] * a[size_t(l)];
      return b;
    };
    return c;
  }
};

RandomCosts random_costs(std::mt19937& rng, int L, int p) {
  std::uniform_real_distribution<double> u(0.1, 1.0);
  RandomCosts r;
  for (int l = 0; l < L; ++l) r.t.push_back(u(rng)), r.a.push_back(u(rng));
  r.head_t.push_back(3 * u(rng));
  for (int s = 0; s < p; ++s) r.stage_fixed.push_back(2 * u(rng)), r.in_flight.push_back(p - s);
  return r;
}

}  // namespace

TEST(StagePartition, EvenAndExplicitCountsAndRanksChunks) {
  LayoutConfig l;
  l.pp = 2;
  l.virtual_stages = 2;
  const StagePartition even = StagePartition::of(l, 8);
  EXPECT_EQ(even.counts(), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(even.layers_of_rank(1, 2), (std::vector<int>{2, 3, 6, 7}));
  l.stage_layers = {1, 3, 2, 2};
  const StagePartition given = StagePartition::of(l, 8);
  EXPECT_EQ(given.layers_of_rank(0, 2), (std::vector<int>{0, 4, 5}));
  EXPECT_EQ(given.counts(), (std::vector<int>{1, 3, 2, 2}));
  l.stage_layers = {1, 3, 2, 1};
  EXPECT_THROW(StagePartition::of(l, 8), InputError);  // adds up to 7
  l.stage_layers = {4, 4};
  EXPECT_THROW(StagePartition::of(l, 8), InputError);  // two counts for p·m = 4
  l.stage_layers.clear();
  EXPECT_THROW(StagePartition::of(l, 6), InputError);  // 6 layers, 4 even stages
}

TEST(StagePartition, ParsesCountsAndRefusesAnythingElse) {
  EXPECT_EQ(parse_layer_counts("3,4,4,1", "--pipeline-layers"), (std::vector<int>{3, 4, 4, 1}));
  EXPECT_EQ(layer_counts_text({3, 4, 4, 1}), "3,4,4,1");
  for (const char* bad : {"", ",", "3,", ",3", "3,,4", "3;4", "0,4", "-1,5", "3.5", "x", "3 ,4", "99999999999"})
    EXPECT_THROW(parse_layer_counts(bad, "--pipeline-layers"), InputError) << bad;
}

// The dynamic program's slowest stage equals the best of every composition, for random costs with
// and without a memory cap, and its partition is one of those that fit.
TEST(Partition, DynamicProgramEqualsBruteForce) {
  std::mt19937 rng(7);
  int checked = 0, refused = 0;
  for (int L = 1; L <= 10; ++L)
    for (int p = 1; p <= std::min(L, 4); ++p)
      for (int trial = 0; trial < 5; ++trial) {
        const RandomCosts rc = random_costs(rng, L, p);
        const PartitionCosts c = rc.costs(L, p);
        for (double cap : {1e9, 2.0 + 0.6 * L}) {
          double best = 1e300;
          std::vector<int> prefix;
          compositions(L, p, prefix, [&](const std::vector<int>& counts) {
            const Partition e = evaluate_partition(c, counts);
            if (e.peak_bytes <= cap) best = std::min(best, e.slowest_seconds);
          });
          if (best == 1e300) {
            EXPECT_THROW(partition_layers(c, cap), InputError);
            ++refused;
            continue;
          }
          const Partition got = partition_layers(c, cap);
          int sum = 0;
          for (int k : got.counts) {
            sum += k;
            EXPECT_GE(k, 1);
          }
          EXPECT_EQ(sum, L);
          EXPECT_EQ(int(got.counts.size()), p);
          EXPECT_NEAR(got.slowest_seconds, best, 1e-12) << "L=" << L << " p=" << p;
          EXPECT_LE(got.peak_bytes, cap);
          EXPECT_DOUBLE_EQ(evaluate_partition(c, got.counts).slowest_seconds, got.slowest_seconds);
          ++checked;
        }
      }
  EXPECT_GT(checked, 200);  // both kinds of case were exercised
  EXPECT_GT(refused, 2);
}

// The whole dynamic program, every (stage, first, last) weighed: what partition_layers answered before
// it skipped the stages costlier than the even split's slowest.
std::vector<int> whole_program(const PartitionCosts& c, double cap, bool by_bytes) {
  const int L = c.layers, p = c.stages;
  const double inf = std::numeric_limits<double>::infinity();
  const auto& key = by_bytes ? c.bytes : c.seconds;
  const auto& tie = by_bytes ? c.seconds : c.bytes;
  struct Cell {
    double best, tie;
    int from;
  };
  std::vector<std::vector<Cell>> A(size_t(p), std::vector<Cell>(size_t(L) + 1, Cell{inf, inf, -1}));
  for (int j = 1; j <= L - (p - 1); ++j)
    if (c.bytes(0, 0, j) <= cap) A[0][size_t(j)] = {key(0, 0, j), tie(0, 0, j), 0};
  for (int r = 1; r < p; ++r)
    for (int i = r; i < L - (p - 1 - r); ++i) {
      const Cell prev = A[size_t(r - 1)][size_t(i)];
      if (prev.from < 0) continue;
      for (int j = i + 1; j <= L - (p - 1 - r); ++j) {
        if (c.bytes(r, i, j) > cap) {
          if (c.bytes(r, i, j) == inf) continue;  // a length the segments do not divide: longer ones may fit
          break;
        }
        const double best = std::max(prev.best, key(r, i, j)), second = std::max(prev.tie, tie(r, i, j));
        Cell& cell = A[size_t(r)][size_t(j)];
        if (best < cell.best || (best == cell.best && second < cell.tie)) cell = {best, second, i};
      }
    }
  if (A[size_t(p - 1)][size_t(L)].from < 0) return {};
  std::vector<int> counts(static_cast<size_t>(p));
  for (int r = p - 1, j = L; r >= 0; --r) {
    const int i = A[size_t(r)][size_t(j)].from;
    counts[size_t(r)] = j - i;
    j = i;
  }
  return counts;
}

// Skipping the stages costlier than a feasible partition's slowest leaves the answer the whole
// program gives, counts and ties included: on costs of whole numbers, where most partitions tie, with
// and without a cap, and for the smallest peak named when nothing fits.
TEST(Partition, BoundedProgramChoosesAsTheWholeOne) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(1, 3);
  int fitted = 0, refused = 0, uneven_bound = 0;
  for (int L = 2; L <= 40; L += 3)
    for (int p = 2; p <= std::min(L, 7); ++p)
      for (int trial = 0; trial < 4; ++trial) {
        RandomCosts rc;
        for (int l = 0; l < L; ++l) rc.t.push_back(small(rng)), rc.a.push_back(small(rng));
        rc.head_t = {double(small(rng) - 1)};
        for (int s = 0; s < p; ++s) rc.stage_fixed.push_back(small(rng) - 1), rc.in_flight.push_back(p - s);
        PartitionCosts c = rc.costs(L, p);
        // Every third trial as uniform segments of k = 2 make a stage's bytes: infinite where k does
        // not divide its length (the library skips those and weighs longer stages).
        if (trial % 3 == 2) {
          const auto finite = c.bytes;
          c.bytes = [finite](int r, int i, int j) {
            return (j - i) % 2 == 0 ? finite(r, i, j) : std::numeric_limits<double>::infinity();
          };
        }
        // A cap the even split meets (the bound prunes), one it may miss (no bound: the whole program),
        // and one nothing meets.
        for (double cap : {1e9, 1.5 * p * L, double(p)}) {
          const std::vector<int> want = whole_program(c, cap, false);
          if (want.empty()) {
            const std::vector<int> least = whole_program(c, std::numeric_limits<double>::infinity(), true);
            try {
              partition_layers(c, cap);
              ADD_FAILURE() << "L=" << L << " p=" << p << " cap " << cap << ": no partition fits, yet one was given";
            } catch (const InputError& e) {
              EXPECT_NE(std::string(e.what()).find(" at " + layer_counts_text(least)), std::string::npos) << e.what();
            }
            ++refused;
            continue;
          }
          EXPECT_EQ(partition_layers(c, cap).counts, want) << "L=" << L << " p=" << p << " cap " << cap;
          ++fitted;
          if (L % p != 0) ++uneven_bound;
        }
      }
  EXPECT_GT(fitted, 300);
  EXPECT_GT(refused, 50);
  EXPECT_GT(uneven_bound, 100);
}

TEST(Partition, AHeavyHeadMovesLayersOffTheLastStage) {
  RandomCosts rc;
  rc.t.assign(12, 1.0), rc.a.assign(12, 1.0);
  rc.head_t = {3.0};
  rc.stage_fixed.assign(4, 0.0), rc.in_flight.assign(4, 1.0);
  const Partition got = partition_layers(rc.costs(12, 4), 1e9);
  EXPECT_EQ(got.counts.back(), 1);
  EXPECT_DOUBLE_EQ(got.slowest_seconds, 4.0);  // 4 + 4 + 3 + (1 + 3): 11 layers over the first three
}

TEST(Partition, NothingFitsNamesTheSmallestPeak) {
  RandomCosts rc;
  rc.t.assign(4, 1.0), rc.a.assign(4, 1.0);
  rc.head_t = {0.0};
  rc.stage_fixed = {0.0, 0.0}, rc.in_flight = {2.0, 1.0};
  // Stage 0 keeps two micro-batches of its layers: the least peak is 1 layer there (2) and 3 on the last (3).
  try {
    partition_layers(rc.costs(4, 2), 2.5);
    FAIL() << "a cap below every partition's peak was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no partition of 4 layers over 2 pipeline stages"), std::string::npos) << what;
    EXPECT_NE(what.find("at 1,3"), std::string::npos) << what;
  }
  EXPECT_EQ(partition_layers(rc.costs(4, 2), 3.0).counts, (std::vector<int>{1, 3}));
  EXPECT_EQ(partition_layers(rc.costs(4, 2), 1e9).counts, (std::vector<int>{2, 2}));
  EXPECT_THROW(partition_layers(rc.costs(1, 2), 1e9), InputError);  // fewer layers than stages
}

// The planner's costs are the planner's own: a stage's bytes are rank_memory of that stage holding
// those layers, and the slowest stage the time model's per-layer seconds plus the head, and the
// re-runs of the block method's first k layers of that stage (k = 3 here, of each stage, as Megatron's
// --recompute-num-layers counts them).
TEST(Partition, PlannerCostsAreThePlannersFigures) {
  plan::PlanRequest r;
  r.model.layers = 10, r.model.hidden = 256, r.model.heads = 8, r.model.seq_len = 128, r.model.vocab = 32768;
  r.layout.pp = 4, r.layout.recompute = Recompute::full, r.layout.recompute_layers = 3;
  r.gpus = 4, r.micro_batch = 1, r.global_batch = 8, r.gpu_memory = int64_t(1) << 40;
  const plan::Hardware& hw = plan::hardware_preset("cpu");
  const PartitionCosts c = plan::partition_costs(r, hw);
  const plan::StageSeconds s = plan::stage_seconds(r, hw);
  const Partition chosen = plan::auto_partition(r, hw, double(r.gpu_memory));
  r.layout.stage_layers = chosen.counts;
  const MemoryCase m = plan::memory_case(r);
  // The layers the engine re-runs under the chosen partition (each stage's first 3), by its own plan.
  const std::vector<LayerRecompute> plan = layer_recompute(r.layout, r.model.layers);
  ASSERT_EQ(s.block_k, 3);
  int first = 0;
  for (int stage = 0; stage < 4; ++stage) {
    const int end = first + chosen.counts[size_t(stage)];
    EXPECT_DOUBLE_EQ(c.bytes(stage, first, end), double(rank_memory(m, stage).accounted_peak)) << stage;
    double seconds = stage == 3 ? s.head : 0.0;
    for (int l = first; l < end; ++l)
      seconds += s.layer[size_t(l)] + (plan[size_t(l)] == LayerRecompute::checkpoint ? s.recompute[size_t(l)] : 0.0);
    EXPECT_DOUBLE_EQ(c.seconds(stage, first, end), seconds);
    first = end;
  }
  EXPECT_GT(s.head, s.layer[5]);  // v = 32768: the head outweighs a layer of h 256
  EXPECT_LT(chosen.counts.back(), chosen.counts.front());
  // The planner's own time model runs the chosen partition no slower than near-even stages.
  EXPECT_EQ(plan::layout_problem(r), "");
  plan::PlanRequest near_even = r;
  near_even.layout.stage_layers = {3, 3, 2, 2};
  EXPECT_LT(plan::plan_time(r, hw).iteration_s, plan::plan_time(near_even, hw).iteration_s);
}

// Uniform k (docs/design.md §3): every chosen stage holds a multiple of k layers, and a candidate
// stage k does not divide never fits.
TEST(Partition, UniformSegmentsPartitionInMultiplesOfK) {
  plan::PlanRequest r;
  r.model.layers = 12, r.model.hidden = 256, r.model.heads = 8, r.model.seq_len = 128, r.model.vocab = 32768;
  r.layout.pp = 3, r.layout.recompute = Recompute::full, r.layout.recompute_layers = 2;
  r.layout.recompute_method = RecomputeMethod::uniform;
  r.gpus = 3, r.micro_batch = 1, r.global_batch = 6, r.gpu_memory = int64_t(1) << 40;
  const plan::Hardware& hw = plan::hardware_preset("cpu");
  const PartitionCosts c = plan::partition_costs(r, hw);
  EXPECT_EQ(c.bytes(0, 0, 3), std::numeric_limits<double>::infinity());
  const Partition chosen = plan::auto_partition(r, hw, double(r.gpu_memory));
  for (int n : chosen.counts) EXPECT_EQ(n % 2, 0) << layer_counts_text(chosen.counts);
  r.layout.stage_layers = chosen.counts;
  EXPECT_EQ(plan::layout_problem(r), "");
  const MemoryCase m = plan::memory_case(r);
  EXPECT_DOUBLE_EQ(c.bytes(0, 0, chosen.counts[0]), double(rank_memory(m, 0).accounted_peak));
}
