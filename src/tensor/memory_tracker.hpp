#pragma once
// The tracking allocator: every buffer that grows with the model, the batch, the micro-batch count or
// the layout is allocated here under a category and a (layer, op) tag, so the memory report shows
// measured bytes, not a formula (docs/design.md §4, "Every byte a rank holds").
// Buffers are recycled by size: a training step allocates the same shapes every time, so after
// the first step no allocation reaches the system allocator (and no pages are faulted anew).
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/region.hpp"  // layer ids, kEmbeddingLayer and kHeadLayer for the outside parts

namespace lattice {

struct DeviceMemory;  // tensor/device_memory.hpp

// What a buffer is for. Activations kept for backward and model states (params, grads, optimizer)
// are the two halves of the paper's picture; the rest are what a rank also holds.
enum class MemoryCategory {
  activations,    // kept for backward, by layer and op
  model_states,   // weights, gradients, optimizer states, ZeRO's transient buckets
  communication,  // collective scratch and staging (ring chunks, SP's rank-major packing)
  pipeline,       // messages between stages: the send pool, the receive buffer
  workspaces,     // reusable staging of the kernels (GEMM scratchpads, attention tiles, MoE routing)
  data,           // the token files and each micro-batch's tokens
  checkpoint_io,  // what a save or a load holds beyond the states themselves
  offload_io,     // --offload-optimizer: the read-ahead and write-back staging of states kept on disk
  count
};
inline constexpr int kMemoryCategories = int(MemoryCategory::count);
const char* category_name(MemoryCategory c);

class MemoryTracker {
 public:
  // One tracker per category, built on first use (so before any buffer it serves, which it outlives);
  // at exit the recycled blocks go back to the system (LeakSanitizer would report them otherwise).
  static MemoryTracker& of(MemoryCategory c);
  static MemoryTracker& activations() { return of(MemoryCategory::activations); }
  MemoryCategory category() const { return category_; }
  // Whether this category's buffers are the run's device memory (tensor/device_memory.hpp).
  bool on_device() const;
  static MemoryTracker& model_states() { return of(MemoryCategory::model_states); }
  ~MemoryTracker() { release_cache(); }

  // Thread-safe (one process-wide lock: a step makes a few hundred allocations, most on one thread).
  // The block is the run's device memory when this category is on the device, unless `host_only`
  // (a buffer host code reads and writes element by element: tracked_vector).
  void* allocate(size_t bytes, int layer, const char* op, bool host_only = false);
  void release(void* ptr);

  int64_t live_bytes() const { return live_; }
  int64_t peak_bytes() const { return peak_; }  // since the last reset_peak() (the trainer's: a step)
  void reset_peak() { peak_ = live_; }
  int64_t run_peak_bytes() const { return run_peak_; }  // since start, never reset
  // All categories together at one instant: the accounted bytes (live requests) and the reserved
  // bytes, each with its peak. Reserved = over every block obtained from the system (live or kept for
  // recycling), the most bytes any request has used of it: the pages that became resident, since a
  // block's size-class tail past the largest request is never written.
  static int64_t accounted_live_bytes();
  static int64_t accounted_peak_bytes();
  // What each category held at the instant of the accounted peak (they sum to it): which buffers
  // make the peak, where the per-category peaks need not coincide.
  static std::array<int64_t, kMemoryCategories> accounted_peak_by_category();
  static int64_t reserved_bytes();
  static int64_t reserved_peak_bytes();
  // The reserved bytes in the process's RAM (all of them but a GPU's), at their peak: what the peak
  // RSS is reconciled with.
  static int64_t ram_reserved_bytes();
  static int64_t ram_reserved_peak_bytes();
  // Of the accounted bytes, those in the device's memory (tensor/device_memory.hpp; all of them on
  // the CPU too, where the device's memory is the host's), live and at their own peak.
  static int64_t device_live_bytes();
  static int64_t device_peak_bytes();
  // The blocks held from the device's memory (live or kept for recycling, whole size classes): what
  // the device's allocator sees of lattice, now and at its peak.
  static int64_t device_held_bytes();
  static int64_t device_held_peak_bytes();
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
    bool device;
  };
  struct SystemBlock {
    size_t size;                   // its size class
    size_t used;                   // the most bytes a request used of it
    const DeviceMemory* memory;  // where it came from (null: the host's aligned_alloc)
  };
  void return_to_system(void* ptr, const SystemBlock& b);
  MemoryCategory category_ = MemoryCategory::count;
  std::unordered_map<void*, Block> live_blocks_;
  std::unordered_map<size_t, std::vector<void*>> free_by_size_[2];  // [0] host blocks, [1] the device's
  std::unordered_map<void*, SystemBlock> system_;  // every block obtained from the system
  int64_t live_ = 0, peak_ = 0, run_peak_ = 0;
};

// A tagged, tracked buffer that frees itself (move-only).
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(size_t bytes, int layer, const char* op, MemoryTracker& tracker = MemoryTracker::activations(),
                bool host_only = false)
      : tracker_(&tracker), ptr_(bytes ? tracker.allocate(bytes, layer, op, host_only) : nullptr), bytes_(bytes) {}
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

// A std::vector allocator drawing from a category's tracker (tag "vector"), for buffers whose size
// the code grows as it goes: tracked_vector<float, MemoryCategory::communication> v(n). Always host
// memory (host code touches its elements); a device buffer that grows is a DeviceVector
// (tensor/device_memory.hpp).
template <class T, MemoryCategory C>
struct TrackedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = TrackedAllocator<U, C>;
  };
  TrackedAllocator() = default;
  template <class U>
  TrackedAllocator(const TrackedAllocator<U, C>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(MemoryTracker::of(C).allocate(n * sizeof(T), kNoLayer, "vector", /*host_only=*/true));
  }
  void deallocate(T* p, size_t) { MemoryTracker::of(C).release(p); }
  template <class U>
  bool operator==(const TrackedAllocator<U, C>&) const { return true; }
  template <class U>
  bool operator!=(const TrackedAllocator<U, C>&) const { return false; }
};
template <class T, MemoryCategory C>
using tracked_vector = std::vector<T, TrackedAllocator<T, C>>;

}  // namespace lattice

namespace lattice {

// Zeroes bytes of the run's device memory (tensor/device_memory.hpp), for TrackedArray.
void zero_device_bytes(void* ptr, size_t bytes);

// A zero-initialised, tracked array of T (flat parameter, gradient and optimizer buffers).
template <class T>
class TrackedArray {
 public:
  TrackedArray() = default;
  TrackedArray(int64_t n, const char* op, MemoryTracker& tracker = MemoryTracker::model_states())
      : buf_(size_t(n) * sizeof(T), 0, op, tracker), n_(n) {
    if (tracker.on_device()) zero_device_bytes(buf_.data(), buf_.bytes());
    else
      for (int64_t i = 0; i < n; ++i) data()[i] = T{};
  }
  TrackedArray(int64_t n, const char* op, MemoryCategory c) : TrackedArray(n, op, MemoryTracker::of(c)) {}
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

namespace lattice {

// A grow-only, tracked staging array (not zero-filled): ensure(n) keeps the contents' capacity and
// reallocates only to grow, so a workspace reused every step costs one allocation a run. Its tracker
// is built when it is, so a static or thread_local ScratchArray is destroyed before its tracker.
template <class T>
class ScratchArray {
 public:
  // `host_only`: host memory even in a category the device computes on (MPI's own scratch).
  ScratchArray(MemoryCategory c, const char* op, bool host_only = false)
      : tracker_(&MemoryTracker::of(c)), op_(op), host_only_(host_only) {}
  T* ensure(int64_t n) {
    if (n > n_) {
      buf_.reset();  // first: the old and new buffers never coexist (what it held is not kept)
      buf_ = TrackedBuffer(size_t(n) * sizeof(T), kNoLayer, op_, *tracker_, host_only_);
      n_ = n;
    }
    return data();
  }
  T* data() { return static_cast<T*>(buf_.data()); }
  int64_t size() const { return n_; }
  void clear() { buf_.reset(), n_ = 0; }

 private:
  MemoryTracker* tracker_;
  const char* op_;
  bool host_only_;
  TrackedBuffer buf_;
  int64_t n_ = 0;
};

}  // namespace lattice
