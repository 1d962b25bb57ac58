#include "engine/owned_grads.hpp"

#include <algorithm>
#include <cmath>

#include "optim/optimizer.hpp"

namespace lattice::parallel {

void finish_sequence_parallel(const ParamTable& table, comm::Communicator& tp, const OwnedGrads& g) {
  for (const auto& p : table.params())
    if (p.sequence_partial)
      for_each_owned(g, p.offset, p.offset + p.numel, [&](float* v, int64_t n) { tp.all_reduce({v, size_t(n)}); });
}

double global_grad_norm(const ParamTable& table, const OwnedGrads& g, comm::Communicator* tp,
                        comm::Communicator* shard, comm::Communicator* pp, bool count_wte, comm::Communicator* ep) {
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // squares of [TP-sharded, replicated] × [dense, experts]
  for (const auto& p : table.params()) {
    if (!count_wte && p.offset == table.wte()) continue;
    for_each_owned(g, p.offset, p.offset + p.numel, [&](float* v, int64_t n) {
      const double norm = lattice::grad_norm(v, n);
      sums[(p.split == Split::replicated ? 1 : 0) + (p.expert ? 2 : 0)] += float(norm * norm);
    });
  }
  if (shard && shard->size() > 1) shard->all_reduce({sums, 4});
  else if (ep && ep->size() > 1) ep->all_reduce({sums + 2, 2});
  if (pp && pp->size() > 1) pp->all_reduce({sums, 4});
  if (tp && tp->size() > 1) {
    tp->all_reduce({sums, 1});
    tp->all_reduce({sums + 2, 1});
  }
  return std::sqrt(double(sums[0]) + double(sums[1]) + double(sums[2]) + double(sums[3]));
}

void scale_grads(const OwnedGrads& g, float factor) {
  for (size_t i = 0; i < g.pieces.size(); ++i) lattice::scale_grads(g.data[i], g.pieces[i].size(), factor);
}

bool all_finite(const OwnedGrads& g) {
  int bad = 0;
  for (size_t i = 0; i < g.pieces.size(); ++i) {
    const float* v = g.data[i];
    const int64_t n = g.pieces[i].size();
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > 65536)
    for (int64_t k = 0; k < n; ++k) bad |= !std::isfinite(v[k]);
  }
  return bad == 0;
}

}  // namespace lattice::parallel
