#include "tensor/memory_tracker.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <new>

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
  int64_t live = 0, peak = 0, reserved = 0, reserved_peak = 0;
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
  static MemoryTracker trackers[kMemoryCategories];
  return trackers[int(c)];
}

int64_t MemoryTracker::accounted_live_bytes() { return read_total(&Totals::live); }
int64_t MemoryTracker::accounted_peak_bytes() { return read_total(&Totals::peak); }
std::array<int64_t, kMemoryCategories> MemoryTracker::accounted_peak_by_category() {
  std::lock_guard lock(totals().mu);
  return totals().at_peak;
}
int64_t MemoryTracker::reserved_bytes() { return read_total(&Totals::reserved); }
int64_t MemoryTracker::reserved_peak_bytes() { return read_total(&Totals::reserved_peak); }

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

void* MemoryTracker::allocate(size_t bytes, int layer, const char* op) {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  void* ptr = nullptr;
  const size_t cls = size_class(bytes);
  auto it = free_by_size_.find(cls);
  if (it != free_by_size_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    ptr = std::aligned_alloc(64, cls);
    if (!ptr) throw std::bad_alloc();
  }
  // A block's pages become resident as requests write them: count the most any request used of it.
  size_t& used = used_[ptr];
  if (bytes > used) {
    t.reserved += int64_t(bytes - used);
    t.reserved_peak = std::max(t.reserved_peak, t.reserved);
    used = bytes;
  }
  live_blocks_[ptr] = Block{bytes, layer, op};
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
  free_by_size_[size_class(it->second.bytes)].push_back(ptr);
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
  for (auto& [size, ptrs] : free_by_size_)
    for (void* p : ptrs) {
      t.reserved -= int64_t(used_[p]);
      used_.erase(p);
      std::free(p);
    }
  free_by_size_.clear();
}

}  // namespace lattice
