#include "engine/grad_sync.hpp"

namespace lattice::parallel {

GradientSync::GradientSync(comm::Communicator* dp, const ParamTable& table, int layers)
    : dp_(dp), layer_ranges_(size_t(layers), Range{0, 0}), launched_(size_t(layers), false) {
  for (int l = 0; l < layers; ++l)
    if (table.has_layer(l)) {
      const auto [begin, end] = table.layer_range(l);
      layer_ranges_[size_t(l)] = {begin, end};
    } else {
      launched_[size_t(l)] = true;  // another pipeline stage holds it: nothing to send
    }
  for (const auto& p : table.params())
    if (p.layer < 0) rest_.push_back({p.offset, p.offset + p.numel});
}

void GradientSync::finish(float* grads) {
  if (!active()) return;
  for (size_t l = 0; l < launched_.size(); ++l) layer_ready(grads, int(l));
  for (const Range& r : rest_) pending_.push_back(dp_->all_reduce_async({grads + r.begin, size_t(r.end - r.begin)}));
  for (auto& h : pending_) h.wait();
  pending_.clear();
  for (size_t l = 0; l < launched_.size(); ++l) launched_[l] = layer_ranges_[l].end == layer_ranges_[l].begin;
}

void GradientSync::layer_ready(float* grads, int layer) {
  if (!active() || launched_[size_t(layer)]) return;
  const Range& r = layer_ranges_[size_t(layer)];
  pending_.push_back(dp_->all_reduce_async({grads + r.begin, size_t(r.end - r.begin)}));
  launched_[size_t(layer)] = true;
}


}  // namespace lattice::parallel
