#pragma once
// Which part of the model the calling thread is computing, named by the model as it enters each
// layer (LayerRegion) and read by measurement from outside the math — the tensor-parallel traffic
// counters attribute bytes to layers by it. Layer ids: 0..L-1, or the two outside parts.
namespace lattice {

inline constexpr int kEmbeddingLayer = -1;
inline constexpr int kHeadLayer = -2;
inline constexpr int kNoLayer = -3;

inline int& current_layer() {
  thread_local int layer = kNoLayer;
  return layer;
}

// [construction, destruction) is layer `l`'s work.
class LayerRegion {
 public:
  explicit LayerRegion(int l) : previous_(current_layer()) { current_layer() = l; }
  ~LayerRegion() { current_layer() = previous_; }
  LayerRegion(const LayerRegion&) = delete;
  LayerRegion& operator=(const LayerRegion&) = delete;

 private:
  int previous_;
};

}  // namespace lattice
