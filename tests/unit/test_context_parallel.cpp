// Context parallelism's load-balanced split (tensor_parallel/context_parallel.hpp, docs/design.md §5.1):
// rank r holds chunks r and 2c−1−r of 2c, every position exactly once, and equal causal work per rank.
#include <gtest/gtest.h>

#include <vector>

#include "analysis/formulas.hpp"
#include "tensor_parallel/context_parallel.hpp"

using namespace lattice::parallel;

TEST(ContextParallel, ChunksRAnd2cMinus1MinusR) {
  const int64_t S = 32;
  for (int c : {1, 2, 4}) {
    std::vector<int> seen(S, 0);
    std::vector<int64_t> work;  // keys a causal query row sees, summed over the rank's positions
    for (int r = 0; r < c; ++r) {
      const SequenceSplit x{S, c, r};
      int64_t keys = 0;
      for (int64_t i = 0; i < x.local(); ++i) ++seen[size_t(x.global(i))], keys += x.global(i) + 1;
      work.push_back(keys);
      // local_of inverts global on this rank's positions and is −1 on exactly the S − S/c others.
      int64_t mine = 0;
      for (int64_t g = 0; g < S; ++g) {
        const int64_t i = x.local_of(g);
        if (i < 0) continue;
        ++mine;
        EXPECT_EQ(x.global(i), g) << "c " << c << " r " << r;
      }
      EXPECT_EQ(mine, x.local()) << "c " << c << " r " << r;
      if (c == 4 && r == 1) {  // chunks 1 and 6 of 8, each 4 positions
        EXPECT_EQ(x.global(0), 4);
        EXPECT_EQ(x.global(3), 7);
        EXPECT_EQ(x.global(4), 24);
        EXPECT_EQ(x.global(7), 27);
      }
    }
    for (int64_t p = 0; p < S; ++p) EXPECT_EQ(seen[size_t(p)], 1) << "c " << c << " position " << p;
    for (int64_t w : work) EXPECT_EQ(w, work.front()) << "c " << c;  // the point of the split
  }
}

TEST(ContextParallel, RunsOfConsecutivePositions) {
  const SequenceSplit x{32, 2, 0};  // chunks 0 and 3: positions 0-7, 24-31
  std::vector<std::vector<int64_t>> runs;
  x.runs(4, 8, [&](int64_t local, int64_t global, int64_t n) { runs.push_back({local, global, n}); });
  EXPECT_EQ(runs, (std::vector<std::vector<int64_t>>{{4, 4, 4}, {8, 24, 4}}));
  runs.clear();
  SequenceSplit{32, 1, 0}.runs(3, 10, [&](int64_t local, int64_t global, int64_t n) { runs.push_back({local, global, n}); });
  EXPECT_EQ(runs, (std::vector<std::vector<int64_t>>{{3, 3, 10}}));
}

// Under CP every term of a layer's row is ÷ c (docs/design.md §5.1): the s/c positions' tensors and
// the a/c heads' s² tensors over the whole s; fused attention's log-sum-exp likewise.
TEST(ContextParallel, KeptBytesAreOneCth) {
  for (bool fused : {false, true})
    for (bool sp : {false, true})
      for (bool packed : {false, true}) {
        lattice::analysis::ActivationShape x{64, 2, 128, 8, 512, 2, sp, 2, true, fused, packed, false};
        const int64_t one = lattice::analysis::layer_activation_bytes(x, false, false);
        const int64_t full = lattice::analysis::layer_activation_bytes(x, true, false);
        x.cp = 4;
        EXPECT_EQ(lattice::analysis::layer_activation_bytes(x, false, false) * 4, one);
        EXPECT_EQ(lattice::analysis::layer_activation_bytes(x, true, false) * 4, full);
      }
  // Four exchanges forward, four backward, each b·(s/c)·h/t floats of which (c−1)/c leave the rank.
  lattice::analysis::StageTraffic two_layers;
  two_layers.layers = 2;
  EXPECT_DOUBLE_EQ(lattice::analysis::cp_bytes(lattice::CpComm::a2a, 32, 2, 64, 1, 2, false, two_layers,
                                               lattice::analysis::StepPasses::whole(2)),
                   2.0 * 2 * 8 * 0.5 * (2 * 16 * 64) * 4);
}
