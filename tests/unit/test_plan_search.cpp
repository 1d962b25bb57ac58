// --search: every candidate runs, fits and is ranked by predicted time.
#include <gtest/gtest.h>

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
