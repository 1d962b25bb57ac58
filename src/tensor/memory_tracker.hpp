#pragma once
// The tracking allocator: every activation a forward pass keeps for backward is allocated here
// under a (layer, op) tag, so the memory report shows measured bytes, not a formula.
// Buffers are recycled by size: a training step allocates the same shapes every time, so after
// the first step no allocation reaches the system allocator (and no pages are faulted anew).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/region.hpp"  // layer ids, kEmbeddingLayer and kHeadLayer for the outside parts

namespace lattice {

class MemoryTracker {
 public:
  // Activations kept for backward (by layer and op) and model states (params, grads, optimizer)
  // are counted apart: the two halves of the paper's memory picture.
  static MemoryTracker& activations();
  static MemoryTracker& model_states();
  // The trackers are function statics built before any buffer they serve, so they outlive them;
  // at exit the recycled blocks go back to the system (LeakSanitizer would report them otherwise).
  ~MemoryTracker() { release_cache(); }

  void* allocate(size_t bytes, int layer, const char* op);
  void release(void* ptr);

  int64_t live_bytes() const { return live_; }
  int64_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = live_; }
  // Live bytes per layer (kEmbeddingLayer/kHeadLayer for the outside parts).
  int64_t live_bytes_of_layer(int layer) const;
  // Live bytes per "layer/op", for the per-op breakdown of the memory report.
  std::map<std::string, int64_t> live_by_op() const;
  int64_t live_bytes_of_op(const std::string& op) const;  // summed over layers
  void release_cache();  // return recycled buffers to the system

 private:
  struct Block {
    size_t bytes;
    int layer;
    const char* op;
  };
  std::unordered_map<void*, Block> live_blocks_;
  std::unordered_map<size_t, std::vector<void*>> free_by_size_;
  int64_t live_ = 0, peak_ = 0;
};

// A tagged, tracked buffer that frees itself (move-only).
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(size_t bytes, int layer, const char* op, MemoryTracker& tracker = MemoryTracker::activations())
      : tracker_(&tracker), ptr_(bytes ? tracker.allocate(bytes, layer, op) : nullptr), bytes_(bytes) {}
  TrackedBuffer(TrackedBuffer&& o) noexcept : tracker_(o.tracker_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      tracker_ = o.tracker_, ptr_ = o.ptr_, bytes_ = o.bytes_;
      o.ptr_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  ~TrackedBuffer() { reset(); }

  void reset() {
    if (ptr_) tracker_->release(ptr_);
    ptr_ = nullptr, bytes_ = 0;
  }
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  MemoryTracker* tracker_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lattice

namespace lattice {

// A zero-initialised, tracked array of T (flat parameter, gradient and optimizer buffers).
template <class T>
class TrackedArray {
 public:
  TrackedArray() = default;
  TrackedArray(int64_t n, const char* op, MemoryTracker& tracker = MemoryTracker::model_states())
      : buf_(size_t(n) * sizeof(T), 0, op, tracker), n_(n) {
    for (int64_t i = 0; i < n; ++i) data()[i] = T{};
  }
  T* data() { return static_cast<T*>(buf_.data()); }
  const T* data() const { return static_cast<const T*>(buf_.data()); }
  int64_t size() const { return n_; }
  T& operator[](int64_t i) { return data()[i]; }
  const T& operator[](int64_t i) const { return data()[i]; }

 private:
  TrackedBuffer buf_;
  int64_t n_ = 0;
};

}  // namespace lattice
