// --search: every candidate runs, fits and is ranked by predicted time.
#include <gtest/gtest.h>

#include <tuple>

#include "plan/paper_models.hpp"
#include "plan/search.hpp"

using namespace lattice;
using namespace lattice::plan;

TEST(PlanSearch, FindsFittingLayoutsForTheTrillionModelOn3072Gpus) {
  PlanRequest base = paper_request(paper_models()[3], Recompute::none, false);
  base.gpus = 3072;
  base.global_batch = 3072;
  const Hardware& hw = hardware_preset("A100-80GB");
  const SearchResult r = search_layouts(base, hw, 10);
  ASSERT_EQ(r.best.size(), 10u);
  EXPECT_GT(r.considered, 1000u);
  for (size_t i = 0; i < r.best.size(); ++i) {
    const Plan& p = r.best[i];
    EXPECT_EQ(layout_problem(p.request), "");
    EXPECT_TRUE(p.memory.fits());
    EXPECT_LE(p.request.layout.tp, hw.devices_per_node);
    if (i > 0) {
      EXPECT_LE(r.best[i - 1].time.iteration_s, p.time.iteration_s);
    }
  }
  // The paper's own layout (t = 8, p = 64 and SP + selective) fits, so nothing slower than it wins.
  PlanRequest paper = paper_request(paper_models()[3], Recompute::selective, true);
  paper.gpus = 3072;
  paper.layout.dp = 6;
  paper.global_batch = 3072;
  EXPECT_LE(r.best[0].time.iteration_s, plan_time(paper, hw).iteration_s);
}

TEST(PlanSearch, FullRecomputeUsesTheFewestLayersThatFit) {
  PlanRequest base = paper_request(paper_models()[0], Recompute::none, false);
  base.gpu_memory = int64_t(52) * 1000 * 1000 * 1000;  // ~45 GB of states: forces recomputation
  const SearchResult r = search_layouts(base, hardware_preset("A100-80GB"), 200);
  bool saw_partial = false;
  for (const Plan& p : r.best) {
    EXPECT_TRUE(p.memory.fits());
    const LayoutConfig& l = p.request.layout;
    if (l.recompute == Recompute::full && l.recompute_layers > 0) {
      saw_partial = true;
      PlanRequest fewer = p.request;
      fewer.layout.recompute_layers = l.recompute_layers - 1;
      EXPECT_FALSE(plan_memory(fewer).fits());
    }
  }
  EXPECT_TRUE(saw_partial);
}

TEST(PlanSearch, NothingFitsInATinyMemory) {
  PlanRequest base = paper_request(paper_models()[0], Recompute::none, false);
  base.gpu_memory = 1000;
  EXPECT_TRUE(search_layouts(base, hardware_preset("A100-80GB"), 5).best.empty());
}

// The layouts are weighed on several threads and merged in one order: the ranking, its exact ties
// and the counts are those of one thread, whatever the number (here 1, 2 and 5 on any machine).
TEST(PlanSearch, TheRankingDoesNotDependOnTheThreads) {
  // The 22B model on 80 GPUs of 40 GB: about 15,000 layouts, 5,000 fitting, among them stages the
  // partitioner balances (p = 5 over 48 layers), per-stage recompute plans and block N.
  PlanRequest base = paper_request(paper_models()[0], Recompute::none, false);
  base.gpus = 80;
  base.global_batch = 320;
  base.gpu_memory = int64_t(40) * 1000 * 1000 * 1000;
  const Hardware& hw = hardware_preset("A100-80GB");
  const SearchResult one = search_layouts(base, hw, 100000, 0, {}, 1);
  ASSERT_EQ(one.best.size(), one.fitting);  // every fitting layout, ranked
  ASSERT_GT(one.fitting, 1000u);
  bool uneven = false;
  for (const Plan& p : one.best) uneven = uneven || !p.request.layout.stage_layers.empty();
  EXPECT_TRUE(uneven);
  for (int threads : {2, 5}) {
    const SearchResult many = search_layouts(base, hw, 100000, 0, {}, threads);
    EXPECT_EQ(many.considered, one.considered) << threads;
    EXPECT_EQ(many.fitting, one.fitting) << threads;
    ASSERT_EQ(many.best.size(), one.best.size()) << threads;
    for (size_t i = 0; i < one.best.size(); ++i) {
      const LayoutConfig& a = one.best[i].request.layout;
      const LayoutConfig& b = many.best[i].request.layout;
      const auto fields = [](const LayoutConfig& l) {
        return std::make_tuple(l.tp, l.cp, l.pp, l.dp, l.ep, l.virtual_stages, l.sequence_parallel, l.zero,
                               int(l.recompute), l.recompute_layers, int(l.recompute_method));
      };
      EXPECT_EQ(fields(a), fields(b)) << threads << " threads, rank " << i;
      EXPECT_EQ(a.stage_layers, b.stage_layers) << i;
      EXPECT_EQ(a.recompute_plan, b.recompute_plan) << i;
      EXPECT_EQ(one.best[i].request.micro_batch, many.best[i].request.micro_batch) << i;
      EXPECT_EQ(one.best[i].time.iteration_s, many.best[i].time.iteration_s) << i;  // bit for bit
      EXPECT_EQ(one.best[i].memory.total_bytes, many.best[i].memory.total_bytes) << i;
    }
  }
}
