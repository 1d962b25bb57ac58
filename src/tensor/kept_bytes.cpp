#include "tensor/kept_bytes.hpp"

#include <cstdlib>

#include "tensor/memory_tracker.hpp"

namespace lattice {

KeptBytesProbe::KeptBytesProbe(int layers)
    : layers_(layers), per_layer_(size_t(layers), 0), before_(size_t(layers) + 2, 0), layer_ops_(size_t(layers)) {}

void KeptBytesProbe::before_forward(int l0, int l1) {
  const MemoryTracker& t = MemoryTracker::activations();
  for (int l = l0; l < l1; ++l) before_[size_t(l)] = t.live_bytes_of_layer(l);
  before_[size_t(layers_)] = t.live_bytes_of_layer(kEmbeddingLayer);
  before_[size_t(layers_) + 1] = t.live_bytes_of_layer(kHeadLayer);
  ops_before_ = t.live_by_op();
}

void KeptBytesProbe::after_forward(int l0, int l1) {
  const MemoryTracker& t = MemoryTracker::activations();
  for (int l = l0; l < l1; ++l) per_layer_[size_t(l)] = t.live_bytes_of_layer(l) - before_[size_t(l)];
  if (l0 == 0) embedding_ = t.live_bytes_of_layer(kEmbeddingLayer) - before_[size_t(layers_)];
  if (l1 == layers_) head_ = t.live_bytes_of_layer(kHeadLayer) - before_[size_t(layers_) + 1];
  const auto live = t.live_by_op();
  for (int l = l0; l < l1; ++l) layer_ops_[size_t(l)].clear();
  for (const auto& [tag, bytes] : live) {
    const size_t slash = tag.find('/');
    if (tag.rfind("layer", 0) != 0 || slash == std::string::npos) continue;
    const int l = std::atoi(tag.c_str() + 5);
    if (l < l0 || l >= l1) continue;
    const auto was = ops_before_.find(tag);
    const int64_t kept = bytes - (was == ops_before_.end() ? 0 : was->second);
    if (kept) layer_ops_[size_t(l)][tag.substr(slash + 1)] = kept;
  }
  if (l0 != 0) return;
  by_op_.clear();
  for (const auto& [tag, bytes] : live)
    if (tag.rfind("layer0/", 0) == 0 || tag.rfind("embedding/", 0) == 0 || tag.rfind("head/", 0) == 0)
      by_op_[tag] = bytes;
}

}  // namespace lattice
