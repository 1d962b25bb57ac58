#pragma once
// Megatron-LM's process groups as pure functions of (world, t, c, p, e): no MPI here, so the layout
// logic is unit-tested on its own and `lattice groups` can print any layout without launching it.
// Rank order (docs/design.md §9, Megatron-Core's tp-cp-ep-dp-pp): TP fastest, then CP, then DP, then
// PP — rank = tp_rank + t·cp_rank + t·c·dp_rank + t·c·N_d·pp_rank. Expert parallelism (EP, size e)
// adds no dimension: it folds over DP × CP, cutting the N_d·c ranks of one weight shard (positions
// j = cp_rank + c·dp_rank) into blocks of e consecutive positions, as Megatron-Core does.
#include <vector>

namespace lattice::parallel {

struct ParallelLayout {
  int world = 1;
  int tp = 1;  // tensor-model-parallel size t
  int pp = 1;  // pipeline-model-parallel size p
  int dp = 1;  // data-parallel size N_d = world / (t·p), derived
  int ep = 1;  // expert-model-parallel size e, a divisor of N_d·c
  int cp = 1;  // context-parallel size c: the ranks sharing one sequence (docs/design.md §5.1)
};

// Validates and derives DP; throws lattice::InputError with one line, e.g.
// "world size 6 is not divisible by t·p = 4" or
// "--expert-model-parallel-size 4 does not divide the data-parallel size 2 (world 4 / t·p = 2)"
// (e must divide N_d·c).
// N_d = world / (t·c·p).
ParallelLayout make_layout(int world, int tp, int pp, int ep = 1, int cp = 1);

struct RankCoords {
  int tp_rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int ep_rank = 0;         // j % e, j = cp_rank + c·dp_rank: position in the EP group (which experts it holds)
  int expert_dp_rank = 0;  // j / e: position in the expert-DP group
  int cp_rank = 0;         // position in the CP group: which two of the sequence's 2c chunks it holds
};
RankCoords coords_of(const ParallelLayout& layout, int rank);  // rank must be in [0, world)
int rank_of(const ParallelLayout& layout, const RankCoords& c);  // reads tp_rank, cp_rank, dp_rank, pp_rank

// Each list holds every group of that kind; each group lists its ranks in the order of their rank
// inside the group (a PP group in stage order, an embedding group as {first stage, last stage}).
using Groups = std::vector<std::vector<int>>;
Groups tp_groups(const ParallelLayout& layout);              // consecutive ranks: [0,1],[2,3],...
Groups cp_groups(const ParallelLayout& layout);              // stride t: the c ranks of one sequence
Groups dp_groups(const ParallelLayout& layout);              // stride t·c within one stage
// The N_d·c ranks holding one weight shard (same tp_rank and pp_rank), by rank: gradients are
// reduced (and ZeRO shards) over it, since CP ranks hold the same weights (Megatron-Core's DP-with-CP).
Groups dp_cp_groups(const ParallelLayout& layout);           // stride t within one stage
Groups pp_groups(const ParallelLayout& layout);              // stride t·c·N_d across stages
Groups embedding_groups(const ParallelLayout& layout);       // first and last stage of each pipeline
Groups model_parallel_groups(const ParallelLayout& layout);  // the t·p ranks sharing one dp_rank and cp_rank
// Both cut each DP-with-CP group (same tp_rank and pp_rank) by position j = cp_rank + c·dp_rank;
// listed by stage, then block or EP position, then tp_rank. Without CP, j = dp_rank.
Groups ep_groups(const ParallelLayout& layout);         // positions [k·e, (k+1)·e): stride t
Groups expert_dp_groups(const ParallelLayout& layout);  // positions with one j % e: stride t·e

// The groups one rank belongs to. `embedding` is empty when the rank is in neither the first nor
// the last stage (p > 2); with p = 1 it is the rank alone.
struct RankGroups {
  std::vector<int> tp, dp, pp, embedding, model, ep, expert_dp, cp, dp_cp;
};
RankGroups groups_of(const ParallelLayout& layout, int rank);

}  // namespace lattice::parallel
