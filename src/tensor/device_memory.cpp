#include "tensor/device_memory.hpp"

#include <cstdlib>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/bf16.hpp"

namespace lattice {

namespace {
void* host_allocate(size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
void host_release(void* p) { std::free(p); }
// Large fills and copies (a step's gradient buffer zeroed: 4 bytes a parameter) in one chunk per
// thread: one core's stores do not reach the memory bandwidth both do. Small ones stay on the caller.
constexpr size_t kSplitBytes = size_t(4) << 20;
// fn(begin, end) for each thread's 64-byte-aligned share of [0, bytes); one share where the build has
// no OpenMP (the fuzzers' clang build links none).
template <class F>
void by_thread(size_t bytes, F&& fn) {
#ifdef _OPENMP
#pragma omp parallel
  {
    const size_t t = size_t(omp_get_thread_num()), nt = size_t(omp_get_num_threads());
    fn(bytes * t / nt / 64 * 64, t + 1 == nt ? bytes : bytes * (t + 1) / nt / 64 * 64);
  }
#else
  fn(size_t(0), bytes);
#endif
}
void host_fill_zero(void* dst, size_t bytes) {
  if (bytes < kSplitBytes) {
    if (bytes) std::memset(dst, 0, bytes);
    return;
  }
  char* d = static_cast<char*>(dst);
  by_thread(bytes, [&](size_t begin, size_t end) { std::memset(d + begin, 0, end - begin); });
}
void host_copy(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  if (bytes < kSplitBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  by_thread(bytes, [&](size_t begin, size_t end) { std::memcpy(d + begin, s + begin, end - begin); });
}
void host_to_bf16(const float* src, uint16_t* dst, int64_t n) { to_bf16(src, dst, n); }
void host_from_bf16(const uint16_t* src, float* dst, int64_t n) { from_bf16(src, dst, n); }

const DeviceMemory kHost = {"host",    true,      true,      host_allocate,  host_release, host_fill_zero, host_copy,
                            host_copy, host_copy, host_to_bf16,   host_from_bf16, nullptr,       nullptr,
                            nullptr};
const DeviceMemory* g_memory = &kHost;
}  // namespace

const DeviceMemory& host_memory() { return kHost; }
const DeviceMemory& device_memory() { return *g_memory; }

void set_device_memory(const DeviceMemory& m) {
  if (&m == g_memory) return;
  for (int c = 0; c < kMemoryCategories; ++c)
    if (category_on_device(MemoryCategory(c))) MemoryTracker::of(MemoryCategory(c)).release_cache();
  g_memory = &m;
}

}  // namespace lattice
