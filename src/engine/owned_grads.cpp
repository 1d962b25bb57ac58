#include "engine/owned_grads.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "backend/device_ops.hpp"
#include "comm/gather_int64.hpp"

namespace lattice::parallel {

void finish_sequence_parallel(const ParamTable& table, comm::Communicator& tp, const OwnedGrads& g) {
  for (const auto& p : table.params())
    if (p.sequence_partial)
      for_each_owned(g, p.offset, p.offset + p.numel, [&](float* v, int64_t n) { tp.all_reduce({v, size_t(n)}); });
}

double global_grad_norm(const ParamTable& table, const OwnedGrads& g, comm::Communicator* tp,
                        comm::Communicator* shard, comm::Communicator* pp, bool count_wte, comm::Communicator* ep) {
  // Each tensor's sum of squares in double, keyed by its place in the whole model's table. Pipeline
  // stages hold whole tensors, so gathering these and adding them in that one order gives every
  // pipeline layout the one-rank norm bit for bit (a clip factor one ulp apart moves every weight).
  // Every owned run of every counted tensor, summed by one device call (one read-back a step).
  std::vector<const ParamInfo*> counted;  // the tensors the norm counts
  std::vector<GradPiece> runs;
  std::vector<size_t> first_run;  // each counted tensor's first run (its runs are adjacent), then the end
  for (const auto& p : table.params()) {
    if (!count_wte && p.offset == table.wte()) continue;
    counted.push_back(&p), first_run.push_back(runs.size());
    for_each_owned(g, p.offset, p.offset + p.numel, [&](float* v, int64_t n) { runs.push_back({v, n}); });
  }
  first_run.push_back(runs.size());
  std::vector<double> run_squares(runs.size());
  dev::grad_sums_squares({runs.data(), run_squares.data(), runs.size()});
  std::vector<int64_t> mine;  // [full_index, category, bits of the sum of squares] per tensor
  for (size_t t = 0; t < counted.size(); ++t) {
    const ParamInfo& p = *counted[t];
    double squares = 0.0;
    for (size_t r = first_run[t]; r < first_run[t + 1]; ++r) {
      const double norm = std::sqrt(run_squares[r]);  // a run's norm squared, as the per-run norm was added
      squares += norm * norm;
    }
    int64_t bits;
    std::memcpy(&bits, &squares, 8);
    mine.insert(mine.end(), {int64_t(p.full_index), (p.split == Split::replicated ? 1 : 0) + (p.expert ? 2 : 0), bits});
  }
  std::vector<std::vector<int64_t>> stages{mine};
  if (pp && pp->size() > 1) stages = comm::all_gather_int64(*pp, mine);
  std::map<int64_t, std::pair<int, double>> by_index;  // summed over stages in rank order (one holds each)
  for (const auto& stage : stages)
    for (size_t i = 0; i + 2 < stage.size(); i += 3) {
      double squares;
      std::memcpy(&squares, &stage[i + 2], 8);
      auto& [category, sum] = by_index[stage[i]];
      category = int(stage[i + 1]), sum += squares;
    }
  double sums[4] = {0.0, 0.0, 0.0, 0.0};  // squares of [TP-sharded, replicated] × [dense, experts]
  for (const auto& [index, entry] : by_index) sums[entry.first] += entry.second;
  // Shards of one tensor (TP, ZeRO, experts over EP) add partial sums: no order reproduces one rank's.
  float partial[4] = {float(sums[0]), float(sums[1]), float(sums[2]), float(sums[3])};
  const bool sharded = (shard && shard->size() > 1) || (ep && ep->size() > 1) || (tp && tp->size() > 1);
  if (!sharded) return std::sqrt(sums[0] + sums[1] + sums[2] + sums[3]);
  if (shard && shard->size() > 1) shard->all_reduce({partial, 4});
  else if (ep && ep->size() > 1) ep->all_reduce({partial + 2, 2});
  if (tp && tp->size() > 1) {
    tp->all_reduce({partial, 1});
    tp->all_reduce({partial + 2, 1});
  }
  return std::sqrt(double(partial[0]) + double(partial[1]) + double(partial[2]) + double(partial[3]));
}

void scale_grads(const OwnedGrads& g, float factor) {
  for (size_t i = 0; i < g.pieces.size(); ++i) dev::scale_grads(g.data[i], g.pieces[i].size(), factor);
}

bool all_finite(const OwnedGrads& g) {
  bool finite = true;
  for (size_t i = 0; i < g.pieces.size(); ++i) finite &= dev::all_finite(g.data[i], g.pieces[i].size());
  return finite;
}

}  // namespace lattice::parallel
