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

ParallelLayout make_layout(int world, int tp, int pp, int ep) {
  require(world >= 1 && world <= kMaxWorld,
          "world size must be between 1 and " + std::to_string(kMaxWorld) + " (got " + std::to_string(world) + ")");
  require(tp >= 1, "tensor-model-parallel size must be at least 1 (got " + std::to_string(tp) + ")");
  require(pp >= 1, "pipeline-model-parallel size must be at least 1 (got " + std::to_string(pp) + ")");
  require(ep >= 1, "--expert-model-parallel-size must be at least 1 (got " + std::to_string(ep) + ")");
  const int64_t model = int64_t(tp) * pp;
  require(model <= world, "t·p = " + std::to_string(model) + " needs at least " + std::to_string(model) +
                              " ranks but the world size is " + std::to_string(world));
  require(world % model == 0,
          "world size " + std::to_string(world) + " is not divisible by t·p = " + std::to_string(model));
  const int dp = int(world / model);
  // EP groups are cut from DP groups, so e must divide N_d (Megatron-Core's rule).
  require(dp % ep == 0, "--expert-model-parallel-size " + std::to_string(ep) +
                            " does not divide the data-parallel size " + std::to_string(dp) + " (world " +
                            std::to_string(world) + " / t·p = " + std::to_string(model) + ")");
  return ParallelLayout{world, tp, pp, dp, ep};
}

RankCoords coords_of(const ParallelLayout& l, int rank) {
  check_rank(l, rank);
  const int dp_rank = (rank / l.tp) % l.dp;
  return RankCoords{rank % l.tp, dp_rank, rank / (l.tp * l.dp), dp_rank % l.ep, dp_rank / l.ep};
}

int rank_of(const ParallelLayout& l, const RankCoords& c) {
  return c.tp_rank + l.tp * c.dp_rank + l.tp * l.dp * c.pp_rank;
}

Groups tp_groups(const ParallelLayout& l) {
  Groups out;
  for (int start = 0; start < l.world; start += l.tp) {
    std::vector<int> g;
    for (int i = 0; i < l.tp; ++i) g.push_back(start + i);
    out.push_back(std::move(g));
  }
  return out;
}

// Megatron's order: stage by stage, then by tp_rank; members by dp_rank.
Groups dp_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int t = 0; t < l.tp; ++t) {
      std::vector<int> g;
      for (int d = 0; d < l.dp; ++d) g.push_back(rank_of(l, {t, d, stage}));
      out.push_back(std::move(g));
    }
  return out;
}

// One pipeline per (dp_rank, tp_rank), i.e. per rank of stage 0; members in stage order.
Groups pp_groups(const ParallelLayout& l) {
  Groups out;
  const int per_stage = l.tp * l.dp;
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
  for (int d = 0; d < l.dp; ++d) {
    std::vector<int> g;
    for (int stage = 0; stage < l.pp; ++stage)
      for (int t = 0; t < l.tp; ++t) g.push_back(rank_of(l, {t, d, stage}));
    out.push_back(std::move(g));
  }
  return out;
}

// Megatron-Core's order: stage by stage, then by EP block, then by tp_rank.
Groups ep_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int block = 0; block < l.dp / l.ep; ++block)
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> g;
        for (int i = 0; i < l.ep; ++i) g.push_back(rank_of(l, {t, block * l.ep + i, stage}));
        out.push_back(std::move(g));
      }
  return out;
}

// One group per (stage, EP position, tp_rank); members by dp_rank, i.e. by expert_dp_rank.
Groups expert_dp_groups(const ParallelLayout& l) {
  Groups out;
  for (int stage = 0; stage < l.pp; ++stage)
    for (int position = 0; position < l.ep; ++position)
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> g;
        for (int d = position; d < l.dp; d += l.ep) g.push_back(rank_of(l, {t, d, stage}));
        out.push_back(std::move(g));
      }
  return out;
}

RankGroups groups_of(const ParallelLayout& l, int rank) {
  const RankCoords c = coords_of(l, rank);
  RankGroups r;
  for (int t = 0; t < l.tp; ++t) r.tp.push_back(rank_of(l, {t, c.dp_rank, c.pp_rank}));
  for (int d = 0; d < l.dp; ++d) r.dp.push_back(rank_of(l, {c.tp_rank, d, c.pp_rank}));
  for (int s = 0; s < l.pp; ++s) r.pp.push_back(rank_of(l, {c.tp_rank, c.dp_rank, s}));
  if (c.pp_rank == 0 || c.pp_rank == l.pp - 1) {
    r.embedding.push_back(r.pp.front());
    if (l.pp > 1) r.embedding.push_back(r.pp.back());
  }
  for (int s = 0; s < l.pp; ++s)
    for (int t = 0; t < l.tp; ++t) r.model.push_back(rank_of(l, {t, c.dp_rank, s}));
  const int block_start = c.dp_rank - c.ep_rank;
  for (int i = 0; i < l.ep; ++i) r.ep.push_back(rank_of(l, {c.tp_rank, block_start + i, c.pp_rank}));
  for (int d = c.ep_rank; d < l.dp; d += l.ep) r.expert_dp.push_back(rank_of(l, {c.tp_rank, d, c.pp_rank}));
  return r;
}

}  // namespace lattice::parallel
