#include "tensor/memory_tracker.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <new>

#include "tensor/device_memory.hpp"

namespace lattice {

const char* category_name(MemoryCategory c) {
  static const char* const names[kMemoryCategories] = {"activations", "model_states", "communication", "pipeline",
                                                       "workspaces",  "data",         "checkpoint_io", "offload_io"};
  return names[int(c)];
}

namespace {
// The process-wide lock and totals (function statics: built before the first tracker's first use).
struct Totals {
  std::mutex mu;
  int64_t live = 0, peak = 0, reserved = 0, reserved_peak = 0, device_live = 0, device_peak = 0, device_held = 0,
          device_held_peak = 0;
  int64_t ram_reserved = 0, ram_reserved_peak = 0;  // of `reserved`, the blocks in the process's RAM
  // A block's resident bytes changing by `delta` (under the lock).
  void add_reserved(int64_t delta, const DeviceMemory* memory) {
    reserved += delta;
    reserved_peak = std::max(reserved_peak, reserved);
    if (!memory || memory->in_process_ram) {
      ram_reserved += delta;
      ram_reserved_peak = std::max(ram_reserved_peak, ram_reserved);
    }
  }
  std::array<int64_t, kMemoryCategories> at_peak{};  // each category's live bytes when `peak` was reached
};
Totals& totals() {
  static Totals t;
  return t;
}
int64_t read_total(int64_t Totals::*field) {
  std::lock_guard lock(totals().mu);
  return totals().*field;
}
}  // namespace

MemoryTracker& MemoryTracker::of(MemoryCategory c) {
  totals();  // constructed first, so destroyed after every tracker
  static MemoryTracker* const trackers = [] {
    static MemoryTracker t[kMemoryCategories];
    for (int i = 0; i < kMemoryCategories; ++i) t[i].category_ = MemoryCategory(i);
    return t;
  }();
  return trackers[int(c)];
}

bool MemoryTracker::on_device() const { return category_on_device(category_); }

void zero_device_bytes(void* ptr, size_t bytes) {
  if (bytes) device_memory().fill_zero(ptr, bytes);
}

// A block goes back to the memory it came from, even when the run's device memory has changed since.
void MemoryTracker::return_to_system(void* ptr, const SystemBlock& b) {
  if (b.memory) {
    b.memory->release(ptr);
    totals().device_held -= int64_t(b.size);  // (under the lock: every caller holds it)
  } else {
    std::free(ptr);
  }
}

int64_t MemoryTracker::accounted_live_bytes() { return read_total(&Totals::live); }
int64_t MemoryTracker::accounted_peak_bytes() { return read_total(&Totals::peak); }
std::array<int64_t, kMemoryCategories> MemoryTracker::accounted_peak_by_category() {
  std::lock_guard lock(totals().mu);
  return totals().at_peak;
}
int64_t MemoryTracker::reserved_bytes() { return read_total(&Totals::reserved); }
int64_t MemoryTracker::reserved_peak_bytes() { return read_total(&Totals::reserved_peak); }
int64_t MemoryTracker::ram_reserved_bytes() { return read_total(&Totals::ram_reserved); }
int64_t MemoryTracker::ram_reserved_peak_bytes() { return read_total(&Totals::ram_reserved_peak); }
int64_t MemoryTracker::device_live_bytes() { return read_total(&Totals::device_live); }
int64_t MemoryTracker::device_peak_bytes() { return read_total(&Totals::device_peak); }
int64_t MemoryTracker::device_held_bytes() { return read_total(&Totals::device_held); }
int64_t MemoryTracker::device_held_peak_bytes() { return read_total(&Totals::device_held_peak); }

namespace {
// Freed blocks are recycled by size class, not exact size: sizes that change every step (an MoE
// layer's routed rows) then reuse a few classes instead of growing the cache without bound. Classes
// are eighths of a power of two (at most 12.5% over the request); the accounting keeps the request.
size_t size_class(size_t bytes) {
  if (bytes <= 4096) return (bytes + 63) / 64 * 64;
  size_t p = 4096;
  while (p * 2 <= bytes) p *= 2;
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}
}  // namespace

void* MemoryTracker::allocate(size_t bytes, int layer, const char* op, bool host_only) {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  void* ptr = nullptr;
  const bool device = on_device() && !host_only;
  const size_t cls = size_class(bytes);
  auto& spare = free_by_size_[device];
  auto it = spare.find(cls);
  if (it != spare.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    const DeviceMemory* memory = device ? &device_memory() : nullptr;
    ptr = memory ? memory->allocate(cls) : std::aligned_alloc(64, cls);
    if (!ptr) throw std::bad_alloc();
    system_[ptr] = SystemBlock{cls, 0, memory};
    if (memory) {
      t.device_held += int64_t(cls);
      t.device_held_peak = std::max(t.device_held_peak, t.device_held);
    }
  }
  // A block's pages become resident as requests write them: count the most any request used of it.
  size_t& used = system_[ptr].used;
  if (bytes > used) {
    t.add_reserved(int64_t(bytes - used), system_[ptr].memory);
    used = bytes;
  }
  live_blocks_[ptr] = Block{bytes, layer, op, device};
  if (device) {
    t.device_live += int64_t(bytes);
    t.device_peak = std::max(t.device_peak, t.device_live);
  }
  live_ += int64_t(bytes);
  peak_ = std::max(peak_, live_);
  run_peak_ = std::max(run_peak_, live_);
  t.live += int64_t(bytes);
  if (t.live > t.peak) {
    t.peak = t.live;
    for (int c = 0; c < kMemoryCategories; ++c) t.at_peak[size_t(c)] = of(MemoryCategory(c)).live_;
  }
  return ptr;
}

void MemoryTracker::release(void* ptr) {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) return;
  live_ -= int64_t(it->second.bytes);
  t.live -= int64_t(it->second.bytes);
  if (it->second.device) t.device_live -= int64_t(it->second.bytes);
  const auto sys = system_.find(ptr);
  if (it->second.device && sys->second.memory != &device_memory()) {
    // From the memory the run used before it picked its device: not recycled as the device's.
    t.add_reserved(-int64_t(sys->second.used), sys->second.memory);
    return_to_system(ptr, sys->second);
    system_.erase(sys);
  } else {
    free_by_size_[it->second.device][size_class(it->second.bytes)].push_back(ptr);
  }
  live_blocks_.erase(it);
}

int64_t MemoryTracker::live_bytes_of_layer(int layer) const {
  std::lock_guard lock(totals().mu);
  int64_t sum = 0;
  for (const auto& [ptr, b] : live_blocks_)
    if (b.layer == layer) sum += int64_t(b.bytes);
  return sum;
}

std::map<std::string, int64_t> MemoryTracker::live_by_op() const {
  std::lock_guard lock(totals().mu);
  std::map<std::string, int64_t> out;
  for (const auto& [ptr, b] : live_blocks_) {
    const std::string where = b.layer == kEmbeddingLayer ? "embedding"
                              : b.layer == kHeadLayer    ? "head"
                                                         : "layer" + std::to_string(b.layer);
    out[where + "/" + b.op] += int64_t(b.bytes);
  }
  return out;
}

int64_t MemoryTracker::live_bytes_of_op(const std::string& op) const {
  std::lock_guard lock(totals().mu);
  int64_t sum = 0;
  for (const auto& [ptr, b] : live_blocks_)
    if (op == b.op) sum += int64_t(b.bytes);
  return sum;
}

void MemoryTracker::release_cache() {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  for (auto& spare : free_by_size_) {
    for (auto& [size, ptrs] : spare)
      for (void* p : ptrs) {
        const auto sys = system_.find(p);
        t.add_reserved(-int64_t(sys->second.used), sys->second.memory);
        return_to_system(p, sys->second);
        system_.erase(sys);
      }
    spare.clear();
  }
}

}  // namespace lattice
