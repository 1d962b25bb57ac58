#include "tensor/kept_bytes.hpp"

#include "tensor/memory_tracker.hpp"

namespace lattice {

KeptBytesProbe::KeptBytesProbe(int layers)
    : layers_(layers), per_layer_(size_t(layers), 0), before_(size_t(layers) + 2, 0) {}

void KeptBytesProbe::before_forward(int l0, int l1) {
  const MemoryTracker& t = MemoryTracker::activations();
  for (int l = l0; l < l1; ++l) before_[size_t(l)] = t.live_bytes_of_layer(l);
  before_[size_t(layers_)] = t.live_bytes_of_layer(kEmbeddingLayer);
  before_[size_t(layers_) + 1] = t.live_bytes_of_layer(kHeadLayer);
}

void KeptBytesProbe::after_forward(int l0, int l1) {
  const MemoryTracker& t = MemoryTracker::activations();
  for (int l = l0; l < l1; ++l) per_layer_[size_t(l)] = t.live_bytes_of_layer(l) - before_[size_t(l)];
  if (l0 == 0) embedding_ = t.live_bytes_of_layer(kEmbeddingLayer) - before_[size_t(layers_)];
  if (l1 == layers_) head_ = t.live_bytes_of_layer(kHeadLayer) - before_[size_t(layers_) + 1];
  if (l0 != 0) return;
  by_op_.clear();
  for (const auto& [tag, bytes] : t.live_by_op())
    if (tag.rfind("layer0/", 0) == 0 || tag.rfind("embedding/", 0) == 0 || tag.rfind("head/", 0) == 0)
      by_op_[tag] = bytes;
}

}  // namespace lattice
