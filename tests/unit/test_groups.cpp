// Megatron-LM's process groups (docs/design.md §9), checked against the example in Megatron's
// initialize_model_parallel docstring: 16 ranks, t = 2, p = 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "comm/groups.hpp"
#include "report/groups_svg.hpp"

using namespace lattice;
using namespace lattice::parallel;

namespace {

// Every rank of the world appears in exactly one group.
void expect_partition(const Groups& groups, int world) {
  std::vector<int> seen(size_t(world), 0);
  for (const auto& g : groups)
    for (int r : g) {
      ASSERT_GE(r, 0);
      ASSERT_LT(r, world);
      ++seen[size_t(r)];
    }
  for (int r = 0; r < world; ++r) EXPECT_EQ(seen[size_t(r)], 1) << "rank " << r;
}

std::string error_of_cp(int world, int tp, int pp, int ep, int cp) {
  try {
    make_layout(world, tp, pp, ep, cp);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
std::string error_of(int world, int tp, int pp, int ep = 1) { return error_of_cp(world, tp, pp, ep, 1); }

}  // namespace

TEST(Groups, MegatronExample16Ranks) {
  const ParallelLayout l = make_layout(16, 2, 4);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(tp_groups(l), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(dp_groups(l), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(pp_groups(l), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(embedding_groups(l), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(model_parallel_groups(l),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
}

TEST(Groups, EveryRankInExactlyOneGroupOfEachKind) {
  for (auto [world, tp, pp] : {std::tuple{16, 2, 4}, {8, 8, 1}, {8, 1, 8}, {24, 2, 3}, {1, 1, 1}, {12, 3, 2}}) {
    SCOPED_TRACE(std::to_string(world) + " " + std::to_string(tp) + " " + std::to_string(pp));
    const ParallelLayout l = make_layout(world, tp, pp);
    expect_partition(tp_groups(l), world);
    expect_partition(dp_groups(l), world);
    expect_partition(pp_groups(l), world);
    expect_partition(model_parallel_groups(l), world);
    EXPECT_EQ(tp_groups(l).size(), size_t(world / tp));
    EXPECT_EQ(dp_groups(l).size(), size_t(tp * pp));
    EXPECT_EQ(pp_groups(l).size(), size_t(world / pp));
  }
}

TEST(Groups, RankFormulaRoundTrips) {
  const ParallelLayout l = make_layout(24, 2, 3);
  for (int r = 0; r < l.world; ++r) {
    const RankCoords c = coords_of(l, r);
    EXPECT_EQ(r, c.tp_rank + l.tp * c.dp_rank + l.tp * l.dp * c.pp_rank);
    EXPECT_EQ(rank_of(l, c), r);
  }
  const RankCoords c = coords_of(l, 13);  // 13 = 1 + 2·2 + 8·1
  EXPECT_EQ(c.tp_rank, 1);
  EXPECT_EQ(c.dp_rank, 2);
  EXPECT_EQ(c.pp_rank, 1);
  EXPECT_THROW(coords_of(l, 24), std::out_of_range);
}

TEST(Groups, GroupsOfARankAreItsRowsInTheLists) {
  const ParallelLayout l = make_layout(16, 2, 4);
  for (int r = 0; r < l.world; ++r) {
    const RankGroups mine = groups_of(l, r);
    auto holds = [r](const std::vector<int>& g) { return std::find(g.begin(), g.end(), r) != g.end(); };
    auto find_in = [&](const Groups& all) {
      for (const auto& g : all)
        if (holds(g)) return g;
      return std::vector<int>{};
    };
    EXPECT_EQ(mine.tp, find_in(tp_groups(l)));
    EXPECT_EQ(mine.dp, find_in(dp_groups(l)));
    EXPECT_EQ(mine.pp, find_in(pp_groups(l)));
    EXPECT_EQ(mine.embedding, find_in(embedding_groups(l)));
    EXPECT_EQ(mine.model, find_in(model_parallel_groups(l)));
  }
  EXPECT_TRUE(groups_of(l, 5).embedding.empty());  // stage 1 of 4: no tied embedding
}

TEST(Groups, EmbeddingGroupIsOneRankWithoutPipeline) {
  const ParallelLayout l = make_layout(4, 2, 1);
  EXPECT_EQ(embedding_groups(l), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(groups_of(l, 3).embedding, std::vector<int>{3});
  EXPECT_EQ(embedding_groups(make_layout(4, 1, 2)), (Groups{{0, 2}, {1, 3}}));
}

TEST(Groups, BadLayoutsNameTheCause) {
  EXPECT_EQ(error_of(6, 2, 2), "world size 6 is not divisible by t·p = 4");
  EXPECT_EQ(error_of(2, 2, 2), "t·p = 4 needs at least 4 ranks but the world size is 2");
  EXPECT_NE(error_of(4, 0, 1).find("tensor-model-parallel size must be at least 1"), std::string::npos);
  EXPECT_NE(error_of(4, 1, -1).find("pipeline-model-parallel size must be at least 1"), std::string::npos);
  EXPECT_NE(error_of(0, 1, 1).find("world size must be between 1"), std::string::npos);
  EXPECT_EQ(error_of(65536, 65536, 65536).find("t·p = 4294967296"), 0u);  // no int overflow
}

// Expert parallelism (docs/design.md §9): EP and expert-DP groups cut each DP group.
TEST(ExpertGroups, World8Tp2Ep2) {
  const ParallelLayout l = make_layout(8, 2, 1, 2);  // N_d = 4: DP {0,2,4,6}, {1,3,5,7}
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.ep, 2);
  EXPECT_EQ(ep_groups(l), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(expert_dp_groups(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  const RankCoords c = coords_of(l, 6);  // tp 0, dp 3
  EXPECT_EQ(c.dp_rank, 3);
  EXPECT_EQ(c.ep_rank, 1);
  EXPECT_EQ(c.expert_dp_rank, 1);
  EXPECT_EQ(groups_of(l, 6).ep, (std::vector<int>{4, 6}));
  EXPECT_EQ(groups_of(l, 6).expert_dp, (std::vector<int>{2, 6}));
}

TEST(ExpertGroups, World16Tp2Pp2Ep2) {
  const ParallelLayout l = make_layout(16, 2, 2, 2);  // N_d = 4 per stage
  EXPECT_EQ(ep_groups(l), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(expert_dp_groups(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
}

TEST(ExpertGroups, World16Tp1Ep4) {
  const ParallelLayout l = make_layout(16, 1, 2, 4);  // N_d = 8: two EP blocks of 4 per stage
  EXPECT_EQ(ep_groups(l), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(expert_dp_groups(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
}

TEST(ExpertGroups, EpTimesExpertDpIsDp) {
  for (auto [world, tp, pp, ep] : {std::tuple{8, 2, 1, 2}, {16, 2, 2, 2}, {24, 1, 3, 4}, {24, 2, 1, 12}, {12, 3, 1, 1},
                                   {8, 1, 1, 8}, {1, 1, 1, 1}, {36, 1, 2, 3}}) {
    SCOPED_TRACE(std::to_string(world) + " " + std::to_string(tp) + " " + std::to_string(pp) + " " +
                 std::to_string(ep));
    const ParallelLayout l = make_layout(world, tp, pp, ep);
    const Groups eps = ep_groups(l), edps = expert_dp_groups(l);
    expect_partition(eps, world);
    expect_partition(edps, world);
    EXPECT_EQ(eps.size(), size_t(world / ep));
    EXPECT_EQ(edps.size(), size_t(tp * pp * ep));
    for (int r = 0; r < world; ++r) {
      const RankGroups g = groups_of(l, r);
      const RankCoords c = coords_of(l, r);
      ASSERT_EQ(g.ep.size(), size_t(ep));
      ASSERT_EQ(g.expert_dp.size(), size_t(l.dp / ep));
      EXPECT_EQ(g.ep[size_t(c.ep_rank)], r);  // a rank's place in its group is its coordinate
      EXPECT_EQ(g.expert_dp[size_t(c.expert_dp_rank)], r);
      EXPECT_EQ(c.dp_rank, c.expert_dp_rank * ep + c.ep_rank);
      EXPECT_NE(std::find(eps.begin(), eps.end(), g.ep), eps.end()) << "rank " << r;
      EXPECT_NE(std::find(edps.begin(), edps.end(), g.expert_dp), edps.end()) << "rank " << r;
      // Each EP group lies inside its DP group, and EP × expert-DP is that DP group.
      std::vector<int> product;
      for (int a : g.ep) {
        EXPECT_NE(std::find(g.dp.begin(), g.dp.end(), a), g.dp.end()) << "EP member " << a << " of rank " << r;
        for (int b : groups_of(l, a).expert_dp) product.push_back(b);
      }
      std::sort(product.begin(), product.end());
      EXPECT_EQ(product, g.dp) << "rank " << r;
    }
  }
}

TEST(ExpertGroups, EpOfOneIsEveryRankAloneAndExpertDpIsDp) {
  const ParallelLayout l = make_layout(16, 2, 4);
  EXPECT_EQ(l.ep, 1);
  EXPECT_EQ(expert_dp_groups(l), dp_groups(l));
  for (const auto& g : ep_groups(l)) EXPECT_EQ(g.size(), 1u);
}

TEST(ExpertGroups, BadEpNamesTheFlag) {
  EXPECT_EQ(error_of(4, 2, 1, 4),
            "--expert-model-parallel-size 4 does not divide the data-parallel size 2 (world 4 / t·p = 2)");
  EXPECT_EQ(error_of(12, 1, 2, 4),
            "--expert-model-parallel-size 4 does not divide the data-parallel size 6 (world 12 / t·p = 2)");
  EXPECT_EQ(error_of(4, 1, 1, 0), "--expert-model-parallel-size must be at least 1 (got 0)");
  EXPECT_EQ(error_of(4, 1, 1, -2), "--expert-model-parallel-size must be at least 1 (got -2)");
  EXPECT_EQ(error_of(6, 2, 2, 2), "world size 6 is not divisible by t·p = 4");  // t·p is checked first
  EXPECT_EQ(error_of(1, 1, 1, 2).find("--expert-model-parallel-size 2 does not divide"), 0u);
}

TEST(GroupsSvg, DrawsEveryRankOncePerPanel) {
  const std::string svg = groups_svg(make_layout(16, 2, 4));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t cells = 0;
  for (size_t at = svg.find("class='cell'"); at != std::string::npos; at = svg.find("class='cell'", at + 1)) ++cells;
  EXPECT_EQ(cells, 4u * 16u);
  EXPECT_NE(svg.find("Embedding groups (4)"), std::string::npos);
  EXPECT_THROW(groups_svg(make_layout(kMaxSvgRanks * 2, 1, 1)), InputError);
  EXPECT_EQ(svg.find("Expert-parallel groups"), std::string::npos);  // e = 1: no EP panels
}

TEST(GroupsSvg, ExpertPanelsWhenEpAboveOne) {
  const std::string svg = groups_svg(make_layout(16, 2, 2, 2));
  size_t cells = 0;
  for (size_t at = svg.find("class='cell'"); at != std::string::npos; at = svg.find("class='cell'", at + 1)) ++cells;
  EXPECT_EQ(cells, 6u * 16u);
  EXPECT_NE(svg.find("Expert-parallel groups (8)"), std::string::npos);
  EXPECT_NE(svg.find("Expert-data-parallel groups (8)"), std::string::npos);
  EXPECT_LT(svg.find("Expert-parallel groups"), svg.find("Expert-data-parallel groups"));
}

// Context parallelism in Megatron-Core's order (tp, cp, dp, pp): world 16, t 2, c 2, p 2, N_d 2.
TEST(Groups, ContextParallelOrder) {
  const ParallelLayout l = make_layout(16, 2, 2, 1, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(cp_groups(l), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(dp_groups(l), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(dp_cp_groups(l), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(pp_groups(l), (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(model_parallel_groups(l), (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  for (int r = 0; r < l.world; ++r) {
    const RankCoords c = coords_of(l, r);
    EXPECT_EQ(rank_of(l, c), r);
    EXPECT_EQ(r, c.tp_rank + 2 * c.cp_rank + 4 * c.dp_rank + 8 * c.pp_rank);
    const RankGroups g = groups_of(l, r);  // the lists above, from the rank's side
    EXPECT_TRUE(std::find(cp_groups(l).begin(), cp_groups(l).end(), g.cp) != cp_groups(l).end());
    EXPECT_TRUE(std::find(dp_cp_groups(l).begin(), dp_cp_groups(l).end(), g.dp_cp) != dp_cp_groups(l).end());
    EXPECT_TRUE(std::find(dp_groups(l).begin(), dp_groups(l).end(), g.dp) != dp_groups(l).end());
  }
  // Without CP, DP-with-CP is DP and every rank is its own CP group.
  const ParallelLayout one = make_layout(8, 2, 2);
  EXPECT_EQ(dp_cp_groups(one), dp_groups(one));
  EXPECT_EQ(cp_groups(one).size(), size_t(8));
  try {
    make_layout(6, 2, 1, 1, 2);
    ADD_FAILURE() << "6 ranks with t·c = 4";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "world size 6 is not divisible by t·c·p = 4");
  }
}

// Expert parallelism folds over DP × CP (Megatron-Core): the EP blocks are e consecutive positions
// j = cp_rank + c·dp_rank of the N_d·c ranks holding one weight shard, CP ranks first.
TEST(ExpertGroups, FoldedOverContextParallel) {
  // CP 2 × EP 2 on 2 ranks: N_d = 1, so the EP group is the CP group and expert-DP is a rank alone.
  const ParallelLayout two = make_layout(2, 1, 1, 2, 2);
  EXPECT_EQ(two.dp, 1);
  EXPECT_EQ(ep_groups(two), (Groups{{0, 1}}));
  EXPECT_EQ(expert_dp_groups(two), (Groups{{0}, {1}}));
  EXPECT_EQ(coords_of(two, 1).ep_rank, 1);
  EXPECT_EQ(coords_of(two, 1).expert_dp_rank, 0);
  // World 16, t 2, c 2, N_d 4, e 4: the DP-with-CP group of tp 0 is {0,2,4,...,14} (positions 0..7);
  // EP blocks {0,2,4,6} and {8,10,12,14} span two dp_ranks each; expert-DP pairs position j and j + 4.
  const ParallelLayout l = make_layout(16, 2, 1, 4, 2);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(ep_groups(l), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(expert_dp_groups(l), (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  const RankCoords c = coords_of(l, 10);  // tp 0, cp 1, dp 2: position j = 1 + 2·2 = 5
  EXPECT_EQ(c.ep_rank, 1);
  EXPECT_EQ(c.expert_dp_rank, 1);
  for (auto [world, tp, pp, ep, cp] : {std::tuple{2, 1, 1, 2, 2}, {16, 2, 1, 4, 2}, {8, 1, 2, 2, 2}, {12, 1, 1, 4, 2},
                                       {12, 1, 1, 6, 3}, {16, 2, 2, 2, 4}, {8, 2, 1, 1, 2}}) {
    SCOPED_TRACE(std::to_string(world) + " " + std::to_string(tp) + " " + std::to_string(pp) + " " +
                 std::to_string(ep) + " " + std::to_string(cp));
    const ParallelLayout f = make_layout(world, tp, pp, ep, cp);
    const Groups eps = ep_groups(f), edps = expert_dp_groups(f);
    expect_partition(eps, world);
    expect_partition(edps, world);
    EXPECT_EQ(eps.size(), size_t(world / ep));
    for (int r = 0; r < world; ++r) {
      const RankGroups g = groups_of(f, r);
      const RankCoords k = coords_of(f, r);
      ASSERT_EQ(g.ep.size(), size_t(ep));
      ASSERT_EQ(g.expert_dp.size(), size_t(f.dp * cp / ep));
      EXPECT_EQ(g.ep[size_t(k.ep_rank)], r);
      EXPECT_EQ(g.expert_dp[size_t(k.expert_dp_rank)], r);
      EXPECT_EQ(k.cp_rank + cp * k.dp_rank, k.expert_dp_rank * ep + k.ep_rank);
      EXPECT_NE(std::find(eps.begin(), eps.end(), g.ep), eps.end()) << "rank " << r;
      EXPECT_NE(std::find(edps.begin(), edps.end(), g.expert_dp), edps.end()) << "rank " << r;
      // EP × expert-DP is the DP-with-CP group (the one the dense gradients reduce over).
      std::vector<int> product;
      for (int a : g.ep) {
        EXPECT_EQ(coords_of(f, a).tp_rank, k.tp_rank);
        EXPECT_EQ(coords_of(f, a).pp_rank, k.pp_rank);
        for (int b : groups_of(f, a).expert_dp) product.push_back(b);
      }
      std::sort(product.begin(), product.end());
      EXPECT_EQ(product, g.dp_cp) << "rank " << r;
    }
  }
  EXPECT_EQ(error_of_cp(4, 1, 1, 3, 2), "--expert-model-parallel-size 3 does not divide the data-parallel × "
                                        "context-parallel size N_d·c = 4 (world 4 / t·c·p = 2)");
}
