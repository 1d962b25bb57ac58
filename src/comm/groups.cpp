#include "comm/groups.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace lattice::parallel {

namespace {
constexpr int kMaxWorld = 1 << 20;  // guards against absurd flags, far above any real launch

void check_rank(const ParallelLayout& l, int rank) {
  if (rank < 0 || rank >= l.world)
    throw std::out_of_range("rank " + std::to_string(rank) + " outside world of " + std::to_string(l.world));
}
}  // namespace

ParallelLayout make_layout(int world, int tp, int pp, int ep, int cp) {
  require(world >= 1 && world <= kMaxWorld,
          "world size must be between 1 and " + std::to_string(kMaxWorld) + " (got " + std::to_string(world) + ")");
  require(tp >= 1, "tensor-model-parallel size must be at least 1 (got " + std::to_string(tp) + ")");
  require(pp >= 1, "pipeline-model-parallel size must be at least 1 (got " + std::to_string(pp) + ")");
  require(ep >= 1, "--expert-model-parallel-size must be at least 1 (got " + std::to_string(ep) + ")");
  require(cp >= 1, "--context-parallel-size must be at least 1 (got " + std::to_string(cp) + ")");
  const int64_t model = int64_t(tp) * pp * cp;
  // Named as the user knows the product: t·p without CP, as before.
  const std::string product = cp > 1 ? "t·c·p = " : "t·p = ";
  require(model <= world, product + std::to_string(model) + " needs at least " + std::to_string(model) +
                              " ranks but the world size is " + std::to_string(world));
  require(world % model == 0,
          "world size " + std::to_string(world) + " is not divisible by " + product + std::to_string(model));
  const int dp = int(world / model);
  // EP groups are cut from the DP-with-CP ranks (Megatron-Core folds experts over dp × cp), so e must
  // divide N_d·c.
  const std::string replicas = cp > 1 ? "data-parallel × context-parallel size N_d·c = " : "data-parallel size ";
  require((int64_t(dp) * cp) % ep == 0, "--expert-model-parallel-size " + std::to_string(ep) + " does not divide the " +
                                            replicas + std::to_string(int64_t(dp) * cp) + " (world " +
                                            std::to_string(world) + " / " + product + std::to_string(model) + ")");
  return ParallelLayout{world, tp, pp, dp, ep, cp};
}

RankCoords coords_of(const ParallelLayout& l, int rank) {
  check_rank(l, rank);
  const int dp_rank = (rank / (l.tp * l.cp)) % l.dp, cp_rank = (rank / l.tp) % l.cp;
  const int folded = cp_rank + l.cp * dp_rank;  // position among the N_d·c ranks of one weight shard
  return RankCoords{rank % l.tp, dp_rank, rank / (l.tp * l.cp * l.dp), folded % l.ep, folded / l.ep, cp_rank};
}

int rank_of(const ParallelLayout& l, const RankCoords& c) {
  return c.tp_rank + l.tp * (c.cp_rank + l.cp * (c.dp_rank + l.dp * c.pp_rank));
}

namespace {
// The coordinates (tp, dp, pp, cp) as rank_of reads them.
RankCoords at(int tp_rank, int dp_rank, int pp_rank, int cp_rank = 0) {
  RankCoords c;
  c.tp_rank = tp_rank, c.dp_rank = dp_rank, c.pp_rank = pp_rank, c.cp_rank = cp_rank;
  return c;
}
// The rank at position j of the DP-with-CP ranks of (tp_rank, stage): j = cp_rank + c·dp_rank, the
// index expert parallelism folds over.
int folded_rank(const ParallelLayout& l, int tp_rank, int stage, int j) {
  return rank_of(l, at(tp_rank, j / l.cp, stage, j % l.cp));
}
}  // namespace

Groups tp_groups(const ParallelLayout& l) {
  Groups out;
  for (int start = 0; start < l.world; start += l.tp) {
    std::vector<int> g;
    for (int i = 0; i < l.tp; ++i) g.push_back(start + i);
    out.push_back(std::move(g));
  }
  return out;
}

// Ordered by first member (by dp_rank, then tp_rank); members by cp_rank.
Groups cp_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int d = 0; d < l.dp; ++d)
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> g;
        for (int c = 0; c < l.cp; ++c) g.push_back(rank_of(l, at(t, d, stage, c)));
        out.push_back(std::move(g));
      }
  return out;
}

// Megatron's order: stage by stage, then by first member (cp_rank, tp_rank); members by dp_rank.
Groups dp_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int c = 0; c < l.cp; ++c)
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> g;
        for (int d = 0; d < l.dp; ++d) g.push_back(rank_of(l, at(t, d, stage, c)));
        out.push_back(std::move(g));
      }
  return out;
}

Groups dp_cp_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int t = 0; t < l.tp; ++t) {
      std::vector<int> g;
      for (int d = 0; d < l.dp; ++d)
        for (int c = 0; c < l.cp; ++c) g.push_back(rank_of(l, at(t, d, stage, c)));
      out.push_back(std::move(g));
    }
  return out;
}

// One pipeline per rank of stage 0; members in stage order.
Groups pp_groups(const ParallelLayout& l) {
  Groups out;
  const int per_stage = l.tp * l.cp * l.dp;
  for (int first = 0; first < per_stage; ++first) {
    std::vector<int> g;
    for (int stage = 0; stage < l.pp; ++stage) g.push_back(first + stage * per_stage);
    out.push_back(std::move(g));
  }
  return out;
}

// The tied word embedding lives on the first stage (input) and the last (output projection);
// its gradient is summed between the two.
Groups embedding_groups(const ParallelLayout& l) {
  Groups out;
  for (const auto& pipeline : pp_groups(l)) {
    if (pipeline.size() == 1)
      out.push_back({pipeline.front()});
    else
      out.push_back({pipeline.front(), pipeline.back()});
  }
  return out;
}

Groups model_parallel_groups(const ParallelLayout& l) {
  Groups out;
  for (int d = 0; d < l.dp; ++d)
    for (int c = 0; c < l.cp; ++c) {
      std::vector<int> g;
      for (int stage = 0; stage < l.pp; ++stage)
        for (int t = 0; t < l.tp; ++t) g.push_back(rank_of(l, at(t, d, stage, c)));
      out.push_back(std::move(g));
    }
  return out;
}

// Megatron-Core's order: stage by stage, then by EP block, then by tp_rank. A block is e consecutive
// positions j = cp_rank + c·dp_rank of the DP-with-CP ranks: stride t, across CP ranks first.
Groups ep_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int block = 0; block < l.dp * l.cp / l.ep; ++block)
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> g;
        for (int i = 0; i < l.ep; ++i) g.push_back(folded_rank(l, t, stage, block * l.ep + i));
        out.push_back(std::move(g));
      }
  return out;
}

// One group per (stage, EP position, tp_rank); members by expert_dp_rank = j / e.
Groups expert_dp_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int position = 0; position < l.ep; ++position)
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> g;
        for (int j = position; j < l.dp * l.cp; j += l.ep) g.push_back(folded_rank(l, t, stage, j));
        out.push_back(std::move(g));
      }
  return out;
}

RankGroups groups_of(const ParallelLayout& l, int rank) {
  const RankCoords c = coords_of(l, rank);
  RankGroups r;
  const int t0 = c.tp_rank, d0 = c.dp_rank, s0 = c.pp_rank, c0 = c.cp_rank;
  for (int t = 0; t < l.tp; ++t) r.tp.push_back(rank_of(l, at(t, d0, s0, c0)));
  for (int d = 0; d < l.dp; ++d) r.dp.push_back(rank_of(l, at(t0, d, s0, c0)));
  for (int s = 0; s < l.pp; ++s) r.pp.push_back(rank_of(l, at(t0, d0, s, c0)));
  if (c.pp_rank == 0 || c.pp_rank == l.pp - 1) {
    r.embedding.push_back(r.pp.front());
    if (l.pp > 1) r.embedding.push_back(r.pp.back());
  }
  for (int s = 0; s < l.pp; ++s)
    for (int t = 0; t < l.tp; ++t) r.model.push_back(rank_of(l, at(t, d0, s, c0)));
  const int block_start = c.expert_dp_rank * l.ep;
  for (int i = 0; i < l.ep; ++i) r.ep.push_back(folded_rank(l, t0, s0, block_start + i));
  for (int j = c.ep_rank; j < l.dp * l.cp; j += l.ep) r.expert_dp.push_back(folded_rank(l, t0, s0, j));
  for (int k = 0; k < l.cp; ++k) r.cp.push_back(rank_of(l, at(t0, d0, s0, k)));
  for (int d = 0; d < l.dp; ++d)
    for (int k = 0; k < l.cp; ++k) r.dp_cp.push_back(rank_of(l, at(t0, d, s0, k)));
  return r;
}

}  // namespace lattice::parallel
