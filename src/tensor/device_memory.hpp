#pragma once
// Where the run's device keeps its buffers, and the raw operations host code may apply to them:
// allocate and release, zero, copy within the device and across to and from the host, and the
// fp32 ⇄ bf16 casts a kept activation's storage needs (tensor/stored.hpp). The backend seam
// (backend/device_ops.hpp) installs it once, when the run picks its device; until then, and for
// --device cpu, it is host memory and every operation is the host's own. The tracking allocator
// draws the categories the device computes on from it (category_on_device). docs/design.md §18.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tensor/memory_tracker.hpp"

namespace lattice {

struct DeviceMemory {
  const char* name;
  // Host code may read and write the buffers directly (the CPU's memory): the model's host loops
  // that predate the seam are then still correct, and copies may be skipped.
  bool host_addressable;
  // Its pages are the process's RAM, counted in its resident set (the host's, the guarded arena's; not
  // a GPU's): what the summary reconciles with the peak RSS.
  bool in_process_ram;
  void* (*allocate)(size_t bytes);  // nullptr when the device has no memory left
  void (*release)(void* ptr);
  void (*fill_zero)(void* dst, size_t bytes);
  void (*copy)(void* dst, const void* src, size_t bytes);          // device → device
  void (*to_device)(void* dst, const void* host_src, size_t bytes);  // host → device
  void (*to_host)(void* host_dst, const void* src, size_t bytes);    // device → host
  void (*to_bf16)(const float* src, uint16_t* dst, int64_t n);       // both on the device
  void (*from_bf16)(const uint16_t* src, float* dst, int64_t n);
  // What the device's own allocator reports in use now, and what its context took before lattice
  // allocated anything (null where there is nothing beyond the tracked bytes to reconcile: the host).
  int64_t (*driver_used_bytes)();
  int64_t (*context_bytes)();
  // Whether `ptr` lies in this memory (null: never asked, the host's): communication stages such
  // spans through the host (comm/device_staging.hpp).
  bool (*holds)(const void* ptr);
};

// The host's: aligned_alloc, memset, memcpy, tensor/bf16's casts.
const DeviceMemory& host_memory();
// The run's device memory (host_memory() until set_device_memory).
const DeviceMemory& device_memory();
// Installs `m` (a static the caller keeps alive) and returns the device categories' cached blocks
// to their old memory first, so no buffer of one memory is recycled as the other's.
void set_device_memory(const DeviceMemory& m);

// The categories the device computes on: activations, model states, workspaces, and the buffers the
// model writes for communication (SP's rank-major packing, pipeline messages), which the
// communicator stages through the host for MPI (comm/device_staging.hpp). The token files and
// checkpoint and offload I/O stay host memory on every device.
constexpr bool category_on_device(MemoryCategory c) {
  return c == MemoryCategory::activations || c == MemoryCategory::model_states || c == MemoryCategory::workspaces ||
         c == MemoryCategory::communication || c == MemoryCategory::pipeline;
}

// Host ⇄ device copies of n elements of T through device_memory().
template <class T>
void copy_to_device(T* dst, const T* host_src, int64_t n) {
  if (n > 0) device_memory().to_device(dst, host_src, size_t(n) * sizeof(T));
}
template <class T>
void copy_to_host(T* host_dst, const T* src, int64_t n) {
  if (n > 0) device_memory().to_host(host_dst, src, size_t(n) * sizeof(T));
}

// A tracked buffer of the device that grows as std::vector does (zero-filled new elements, the old
// ones kept, the same capacity rule as libstdc++'s resize, so the tracked bytes are tracked_vector's)
// but whose elements only device operations touch: the model's workspaces (model/workspace.hpp).
// Its category must be one the device computes on.
template <class T, MemoryCategory C>
class DeviceVector {
  static_assert(category_on_device(C), "a DeviceVector lives in a category the device computes on");

 public:
  DeviceVector() = default;
  explicit DeviceVector(size_t n) { resize(n); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  ~DeviceVector() { free_block(); }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  void resize(size_t n) {
    if (n > capacity_) {
      const size_t cap = std::max(n, 2 * size_);  // libstdc++: size + max(size, n − size)
      T* grown = static_cast<T*>(MemoryTracker::of(C).allocate(cap * sizeof(T), kNoLayer, "vector"));
      if (size_) device_memory().copy(grown, ptr_, size_ * sizeof(T));
      free_block();
      ptr_ = grown, capacity_ = cap;
    }
    if (n > size_) device_memory().fill_zero(ptr_ + size_, (n - size_) * sizeof(T));
    size_ = n;
  }

 private:
  void free_block() {
    if (ptr_) MemoryTracker::of(C).release(ptr_);
    ptr_ = nullptr, capacity_ = 0;
  }
  T* ptr_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace lattice
