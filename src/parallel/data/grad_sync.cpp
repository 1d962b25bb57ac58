#include "parallel/data/grad_sync.hpp"

namespace lattice::parallel {

GradientSync::GradientSync(comm::Communicator* dp, const ParamTable& table, int layers)
    : dp_(dp), launched_(size_t(layers), false) {
  const auto& params = table.params();
  for (int l = 0; l < layers; ++l) {
    const auto [begin, end] = table.layer_range(l);
    layer_ranges_.push_back({begin, end});
  }
  rest_.push_back({params[0].offset, params[1].offset + params[1].numel});
  rest_.push_back({params[params.size() - 2].offset, params.back().offset + params.back().numel});
}

void GradientSync::layer_ready(float* grads, int layer) {
  if (!active() || launched_[size_t(layer)]) return;
  const Range& r = layer_ranges_[size_t(layer)];
  pending_.push_back(dp_->all_reduce_async({grads + r.begin, size_t(r.end - r.begin)}));
  launched_[size_t(layer)] = true;
}

void GradientSync::finish(float* grads) {
  if (!active()) return;
  for (size_t l = 0; l < launched_.size(); ++l) layer_ready(grads, int(l));
  for (const Range& r : rest_) pending_.push_back(dp_->all_reduce_async({grads + r.begin, size_t(r.end - r.begin)}));
  for (auto& h : pending_) h.wait();
  pending_.clear();
  launched_.assign(launched_.size(), false);
}

}  // namespace lattice::parallel
