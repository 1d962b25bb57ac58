#include "tensor/memory_tracker.hpp"

#include <cstdlib>
#include <new>

namespace lattice {

MemoryTracker& MemoryTracker::activations() {
  static MemoryTracker tracker;
  return tracker;
}

MemoryTracker& MemoryTracker::model_states() {
  static MemoryTracker tracker;
  return tracker;
}

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
  live_blocks_[ptr] = Block{bytes, layer, op};
  live_ += int64_t(bytes);
  if (live_ > peak_) peak_ = live_;
  return ptr;
}

void MemoryTracker::release(void* ptr) {
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) return;
  live_ -= int64_t(it->second.bytes);
  free_by_size_[size_class(it->second.bytes)].push_back(ptr);
  live_blocks_.erase(it);
}

int64_t MemoryTracker::live_bytes_of_layer(int layer) const {
  int64_t sum = 0;
  for (const auto& [ptr, b] : live_blocks_)
    if (b.layer == layer) sum += int64_t(b.bytes);
  return sum;
}

std::map<std::string, int64_t> MemoryTracker::live_by_op() const {
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
  int64_t sum = 0;
  for (const auto& [ptr, b] : live_blocks_)
    if (op == b.op) sum += int64_t(b.bytes);
  return sum;
}

void MemoryTracker::release_cache() {
  for (auto& [size, ptrs] : free_by_size_)
    for (void* p : ptrs) std::free(p);
  free_by_size_.clear();
}

}  // namespace lattice
