#pragma once
// Megatron-LM's process groups as pure functions of (world, t, p): no MPI here, so the layout
// logic is unit-tested on its own and `lattice groups` can print any layout without launching it.
// Rank order (docs/design.md §9): TP fastest, then DP, then PP — rank = tp_rank + t·dp_rank + t·N_d·pp_rank.
#include <vector>

namespace lattice::parallel {

struct ParallelLayout {
  int world = 1;
  int tp = 1;  // tensor-model-parallel size t
  int pp = 1;  // pipeline-model-parallel size p
  int dp = 1;  // data-parallel size N_d = world / (t·p), derived
};

// Validates and derives DP; throws lattice::InputError with one line, e.g.
// "world size 6 is not divisible by t·p = 4".
ParallelLayout make_layout(int world, int tp, int pp);

struct RankCoords {
  int tp_rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
};
RankCoords coords_of(const ParallelLayout& layout, int rank);  // rank must be in [0, world)
int rank_of(const ParallelLayout& layout, const RankCoords& c);

// Each list holds every group of that kind; each group lists its ranks in the order of their rank
// inside the group (a PP group in stage order, an embedding group as {first stage, last stage}).
using Groups = std::vector<std::vector<int>>;
Groups tp_groups(const ParallelLayout& layout);              // consecutive ranks: [0,1],[2,3],...
Groups dp_groups(const ParallelLayout& layout);              // stride t within one stage
Groups pp_groups(const ParallelLayout& layout);              // stride t·N_d across stages
Groups embedding_groups(const ParallelLayout& layout);       // first and last stage of each pipeline
Groups model_parallel_groups(const ParallelLayout& layout);  // the t·p ranks sharing one dp_rank

// The groups one rank belongs to. `embedding` is empty when the rank is in neither the first nor
// the last stage (p > 2); with p = 1 it is the rank alone.
struct RankGroups {
  std::vector<int> tp, dp, pp, embedding, model;
};
RankGroups groups_of(const ParallelLayout& layout, int rank);

}  // namespace lattice::parallel
