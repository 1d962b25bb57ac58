// α–β costs of the collective algorithms and the choice between them.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/collectives.hpp"

using namespace lattice::plan;

namespace {
const Link kLink{1e-5, 1e-9};  // 10 µs, 1 GB/s
}

TEST(PlanCollectives, RingAllReduceIsTwoReduceScatterHalves) {
  const double n = 1e8;
  EXPECT_DOUBLE_EQ(ring_all_reduce(8, kLink, n), 2 * 7 * 1e-5 + 2.0 * 7 / 8 * n * 1e-9);
  EXPECT_DOUBLE_EQ(ring_all_reduce(8, kLink, n), 2 * ring_half(8, kLink, n));
  EXPECT_EQ(ring_all_reduce(1, kLink, n), 0);
}

TEST(PlanCollectives, HalvingDoublingHasLogLatencyAndFoldsInExtraRanks) {
  const double n = 1e6;
  EXPECT_DOUBLE_EQ(halving_doubling_all_reduce(8, kLink, n), 2 * 3 * 1e-5 + 2.0 * 7 / 8 * n * 1e-9);
  // 13 ranks (the seed's example): 8-rank core plus a full-size step before and after.
  EXPECT_DOUBLE_EQ(halving_doubling_all_reduce(13, kLink, n),
                   halving_doubling_all_reduce(8, kLink, n) + 2 * (1e-5 + n * 1e-9));
  EXPECT_GT(halving_doubling_all_reduce(13, kLink, n), halving_doubling_all_reduce(16, kLink, n));
}

TEST(PlanCollectives, SmallMessagesPreferLogLatencyLargeOnesBandwidth) {
  GroupTopology g;
  g.size = 64;
  g.per_node = 64;
  g.intra = g.inter = kLink;
  EXPECT_NE(all_reduce(g, 8).algorithm, Algorithm::ring);  // latency bound: log-depth wins
  const CollectiveCost big = all_reduce(g, 1e10);
  EXPECT_LE(big.seconds, ring_all_reduce(64, kLink, 1e10));
  EXPECT_LE(big.seconds, tree_all_reduce(64, kLink, 1e10));
}

TEST(PlanCollectives, TwoDimensionalTorusWinsAcrossNodesWithFastInsideLinks) {
  GroupTopology g;
  g.size = 64;
  g.per_node = 8;
  g.intra = {2e-6, 1.0 / 200e9};
  g.inter = {1e-5, 1.0 / 20e9};
  const CollectiveCost c = all_reduce(g, 1e9);
  EXPECT_EQ(c.algorithm, Algorithm::torus2d);
  EXPECT_DOUBLE_EQ(c.seconds, torus2d_all_reduce(8, 8, g.intra, g.inter, 1e9));
  EXPECT_LT(c.seconds, ring_all_reduce(64, g.inter, 1e9));
}

TEST(PlanCollectives, GroupTopologyFollowsTheRankStride) {
  Hardware hw;
  hw.devices_per_node = 8;
  EXPECT_EQ(group_topology(hw, 8, 1).nodes(), 1);   // TP group: consecutive ranks
  EXPECT_EQ(group_topology(hw, 16, 2).per_node, 4);  // DP group with t = 2
  EXPECT_EQ(group_topology(hw, 16, 2).nodes(), 4);
  EXPECT_EQ(group_topology(hw, 4, 64).per_node, 1);  // PP group strides past nodes
}
