#pragma once
// The host CUDA of scripts/cuda-host-check.sh and cuda-host-trainer.sh: what src/cuda's kernels,
// lattice_cuda_check and the backend need from the CUDA runtime, run on the CPU with no GPU. A launch
// runs its blocks one after another; a block's threads are fibers on one OS thread (stack slots made
// once by ucontext, switched by _setjmp/_longjmp), switched only where CUDA threads wait for one
// another (__syncthreads, __syncwarp, the shuffles, and the warp's tensor-core operations of
// tests/host_sim/mma_emulated.inc), so a run is deterministic (in the order chosen: first to last, or
// last to first under LATTICE_HOST_SIM_SCHEDULE=reverse). What a GPU would leave undefined stops
// the program with one line naming the kernel and the launch's place: a warp operation some of whose
// lanes have exited or wait elsewhere, a barrier not every live thread reaches (deadlock), a launch
// past CUDA's limits or its kernel's __launch_bounds__, dynamic shared memory past the card's or past
// 48 KiB on a kernel not opted in to it (cudaFuncSetAttribute). Device memory is host memory ending
// at a guard page (rounded to 256 bytes as cudaMalloc aligns), so a read well past a buffer's end
// faults, and filled with 0xff bytes (NaN), so a result never written shows. One header past the
// usual length on purpose: it stands in for cuda_runtime.h, which the sources include as one file.
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one at a time, so one copy of a kernel's shared array serves every block in turn.
#define __shared__ static

// ---- types ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMultiProcessorCount = 16 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaFuncAttributes {
  int ptxVersion = 90, binaryVersion = 90, numRegs = 0, maxThreadsPerBlock = 1024;
  size_t sharedSizeBytes = 0;
};
struct cudaDeviceProp {
  char name[256] = "host simulation (no GPU)";
  int major = 9, minor = 0, multiProcessorCount = 1;
  size_t totalGlobalMem = size_t(1) << 34, sharedMemPerBlockOptin = 232448;
};

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(8) int2 { int x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
constexpr int warpSize = 32;

// CUDA's min and max take mixed integer types (the kernels' int64_t against int).
template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) { using T = std::common_type_t<A, B>; return T(a) < T(b) ? T(a) : T(b); }
template <class A, class B>
inline std::common_type_t<A, B> max(A a, B b) { using T = std::common_type_t<A, B>; return T(a) < T(b) ? T(b) : T(a); }
using std::fmaxf;
using std::fminf;
using std::isfinite;
using std::isnan;
using std::isinf;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return uint32_t((uint64_t(a) * b) >> 32); }
template <class T>
inline T __ldg(const T* p) { return *p; }

namespace sim {

// ---- the launch: blocks in turn, a block's threads as fibers ----
struct Cfg {
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
};

struct Barrier {
  int arrived = 0;
  uint64_t gen = 0;
  int extra = 0;  // __syncthreads_or's predicate
  int result = 0;
};
// A CUDA thread of the running block. Threads are switched by _setjmp/_longjmp, which, unlike
// swapcontext, make no system call to save the signal mask at every switch.
struct Fiber {
  jmp_buf resume{};
  uint3 idx{};
  bool started = false, done = false;
  Barrier* waiting = nullptr;  // the barrier and the generation it waits past
  uint64_t wait_gen = 0;
};

struct Slot {
  ucontext_t ctx{};
  jmp_buf idle{};
  bool parked = false;
};

struct State {
  const char* kernel = nullptr;  // the kernel running, or none between launches
  uint3 block_idx{};
  dim3 grid, block;
  std::vector<Fiber> fibers;
  std::deque<Slot> slots;  // never moves a slot: a context points into itself
  void* body = nullptr;     // the running launch's kernel call and how to invoke it
  void (*invoke)(void*) = nullptr;
  size_t stack_bytes = 256 * 1024;
  int current = -1;
  ucontext_t scheduler{};
  jmp_buf scheduler_jmp{};
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<int> warp_live, warp_size;
  int live = 0;
  std::vector<uint64_t> exchange;  // the shuffles' values, a slot a thread
  std::vector<const void*> exchange_ptr;
  alignas(128) unsigned char dynamic_shared[256 * 1024];
  size_t dynamic_bytes = 0;
  cudaError_t last_error = cudaSuccess;
  long long launches = 0;
  uint64_t block_serial = 0;  // counts the blocks run, so per-block state knows a new one began
  // Each kernel's dynamic shared memory limit set by cudaFuncSetAttribute; unset, CUDA's default 48 KiB.
  std::map<const void*, size_t> smem_optin;
  bool in_block = false;  // a block of the launch is running (what a failure names)
  // LATTICE_HOST_SIM_SCHEDULE=reverse runs a launch's blocks, and a block's threads between their
  // waits, last first. A kernel whose result depends on the order (a read of shared or global memory
  // another thread writes with no barrier between, a block reading what another block of the launch
  // writes) then gives other bits: a GPU promises neither order.
  bool reverse = false;
};
inline State& state() {
  static State s = [] {
    State fresh;
    const char* order = std::getenv("LATTICE_HOST_SIM_SCHEDULE");
    if (order && std::strcmp(order, "reverse") == 0) fresh.reverse = true;
    else if (order && *order && std::strcmp(order, "forward") != 0) {
      std::fprintf(stderr, "cuda host sim: LATTICE_HOST_SIM_SCHEDULE is forward or reverse, not %s\n", order);
      std::exit(2);
    }
    return fresh;
  }();
  return s;
}

[[noreturn]] inline void fail(const char* what) {
  const State& s = state();
  if (!s.kernel)  // a runtime or library call between launches
    std::fprintf(stderr, "cuda host sim: %s (outside a kernel)\n", what);
  else if (!s.in_block)  // the launch itself, before any block ran
    std::fprintf(stderr, "cuda host sim: %s: launch of %s\n", what, s.kernel);
  else
    std::fprintf(stderr, "cuda host sim: %s: kernel %s, block (%u,%u,%u)\n", what, s.kernel, s.block_idx.x,
                 s.block_idx.y, s.block_idx.z);
  std::exit(70);
}

inline int linear_tid() {
  const State& s = state();
  const uint3& t = s.fibers[size_t(s.current)].idx;
  return int(t.x + s.block.x * (t.y + s.block.y * t.z));
}
inline int warp_of() { return linear_tid() / 32; }
inline int lane_of() { return linear_tid() % 32; }

inline void yield() {
  State& s = state();
  if (!_setjmp(s.fibers[size_t(s.current)].resume)) _longjmp(s.scheduler_jmp, 1);
}
// Wait until `expected` threads have arrived at b (the last one releases the others).
inline void arrive_and_wait(Barrier& b, int expected) {
  State& s = state();
  if (++b.arrived >= expected) {
    b.arrived = 0, ++b.gen;
    b.result = b.extra, b.extra = 0;
    return;
  }
  Fiber& f = s.fibers[size_t(s.current)];
  f.waiting = &b, f.wait_gen = b.gen;
  while (b.gen == f.wait_gen) yield();
  f.waiting = nullptr;
}
inline void sync_block() { arrive_and_wait(state().block_barrier, state().live); }
// A warp operation: every lane of the warp takes part (CUDA leaves it undefined otherwise).
inline void sync_warp() {
  State& s = state();
  const int w = warp_of();
  if (s.warp_live[size_t(w)] != s.warp_size[size_t(w)]) fail("a warp operation with lanes that have exited");
  arrive_and_wait(s.warp_barriers[size_t(w)], s.warp_size[size_t(w)]);
}

// A thread's end: CUDA counts only live threads at __syncthreads, and a warp operation some of whose
// lanes have left is undefined.
inline void thread_exit() {
  State& s = state();
  Fiber& f = s.fibers[size_t(s.current)];
  f.done = true;
  --s.live;
  --s.warp_live[size_t(warp_of())];
  if (s.warp_barriers[size_t(warp_of())].arrived > 0) fail("a warp operation with lanes that have exited");
  Barrier& b = s.block_barrier;  // those waiting at __syncthreads no longer wait for this thread
  if (b.arrived > 0 && b.arrived >= s.live) b.arrived = 0, ++b.gen, b.result = b.extra, b.extra = 0;
}

// A stack slot serves thread t of every block of every launch: made once (getcontext, makecontext and
// one swapcontext, each a system call), it runs a thread's body, parks, and is handed the next one.
inline void slot_main() {
  for (;;) {
    State& s = state();
    s.invoke(s.body);
    thread_exit();
    Slot& slot = s.slots[size_t(s.current)];
    slot.parked = true;
    if (!_setjmp(slot.idle)) _longjmp(s.scheduler_jmp, 1);
  }
}

// getcontext returns twice: in a function of its own, no caller's local can be clobbered (GCC's
// -Wclobbered, under the sanitizers' instrumentation).
__attribute__((noinline)) inline void make_fiber_context(ucontext_t& ctx, char* stack, size_t bytes) {
  getcontext(&ctx);
  ctx.uc_stack.ss_sp = stack;
  ctx.uc_stack.ss_size = bytes;
  ctx.uc_link = nullptr;
  makecontext(&ctx, &slot_main, 0);
}

inline Slot& slot_at(size_t i) {
  State& s = state();
  while (s.slots.size() <= i) {
    // A guard page below each stack: an overflow faults instead of writing into its neighbour.
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    char* p = static_cast<char*>(mmap(nullptr, s.stack_bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) fail("no memory for the fibers' stacks");
    mprotect(p, page, PROT_NONE);
    s.slots.emplace_back();
    make_fiber_context(s.slots.back().ctx, p + page, s.stack_bytes);
  }
  return s.slots[i];
}

// Runs thread t until it waits or ends. Its own function: nothing here changes between _setjmp and the
// _longjmp back, so no local of the scheduler's loop can be clobbered.
__attribute__((noinline)) inline void switch_to(int t) {
  State& s = state();
  Fiber& f = s.fibers[size_t(t)];
  if (!_setjmp(s.scheduler_jmp)) {
    if (f.started) _longjmp(f.resume, 1);
    f.started = true;
    Slot& slot = s.slots[size_t(t)];
    if (slot.parked) {
      slot.parked = false;
      _longjmp(slot.idle, 1);
    }
    swapcontext(&s.scheduler, &slot.ctx);  // the slot's first thread
  }
}

template <class Body>
void run_block(Body& body) {
  State& s = state();
  const int n = int(s.block.x * s.block.y * s.block.z), warps = (n + 31) / 32;
  s.fibers.assign(size_t(n), Fiber{});
  s.warp_barriers.assign(size_t(warps), Barrier{});
  s.warp_live.assign(size_t(warps), 0);
  s.warp_size.assign(size_t(warps), 0);
  s.exchange.assign(size_t(n), 0);
  s.exchange_ptr.assign(size_t(n), nullptr);
  s.block_barrier = Barrier{};
  s.live = n;
  s.body = &body;
  s.invoke = [](void* b) { (*static_cast<Body*>(b))(); };
  slot_at(size_t(n - 1));
  for (int t = 0; t < n; ++t) {
    ++s.warp_live[size_t(t / 32)], ++s.warp_size[size_t(t / 32)];
    s.fibers[size_t(t)].idx = {unsigned(t) % s.block.x, unsigned(t) / s.block.x % s.block.y,
                               unsigned(t) / (s.block.x * s.block.y)};
  }
  for (int remaining = n; remaining > 0;) {
    bool progress = false;
    for (int i = 0; i < n; ++i) {
      const int t = s.reverse ? n - 1 - i : i;
      Fiber& f = s.fibers[size_t(t)];
      if (f.done || (f.waiting && f.waiting->gen == f.wait_gen)) continue;
      s.current = t;
      switch_to(t);
      progress = true;
      if (f.done) --remaining;
    }
    if (!progress) fail("deadlock: live threads wait at barriers the others never reach");
  }
  s.current = -1;
}

}  // namespace sim

// ---- what kernels read ----
#define threadIdx (::sim::state().fibers[size_t(::sim::state().current)].idx)
#define blockIdx (::sim::state().block_idx)
#define blockDim (::sim::state().block)
#define gridDim (::sim::state().grid)

inline void __syncthreads() { sim::sync_block(); }
inline int __syncthreads_or(int pred) {
  sim::State& s = sim::state();
  s.block_barrier.extra |= pred ? 1 : 0;
  sim::sync_block();
  return s.block_barrier.result;
}
inline void __syncwarp(unsigned = 0xffffffffu) { sim::sync_warp(); }
[[noreturn]] inline void __trap() { sim::fail("__trap"); }

namespace sim {
template <class T>
T shuffle(T v, int src_lane) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  State& s = state();
  const int me = linear_tid(), base = me & ~31;
  sync_warp();  // the slots are free: every lane has read the previous exchange
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  s.exchange[size_t(me)] = bits;
  sync_warp();
  const int src = base + (src_lane & 31);
  if (src >= int(s.exchange.size())) fail("a shuffle from a lane past the block");
  T out;
  std::memcpy(&out, &s.exchange[size_t(src)], sizeof(T));
  return out;
}
}  // namespace sim
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) { return sim::shuffle(v, sim::lane_of() ^ mask); }
template <class T>
T __shfl_sync(unsigned, T v, int src) { return sim::shuffle(v, src); }
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned d) {
  const int l = sim::lane_of();
  return sim::shuffle(v, l + int(d) < 32 ? l + int(d) : l);
}

namespace sim {
template <class T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(state().dynamic_shared);
}
// The launched kernel's address, the key of its cudaFuncSetAttribute (the rewrite passes the launch's
// kernel expression here).
template <class F>
const void* kernel_key(F* f) {
  return reinterpret_cast<const void*>(f);
}
constexpr size_t kDefaultDynamicSmem = 48 * 1024;
// A kernel's __launch_bounds__(max_threads): the rewrite puts this call first in its body.
inline void launch_bound(long long max_threads) {
  const State& s = state();
  const unsigned long long threads = 1ull * s.block.x * s.block.y * s.block.z;
  if (threads > static_cast<unsigned long long>(max_threads)) {
    char what[160];
    std::snprintf(what, sizeof what, "a block of %llu threads past the kernel's __launch_bounds__(%lld)", threads,
                  max_threads);
    fail(what);
  }
}
template <class Body>
void launch(const Cfg& c, Body body, const char* name, const void* key) {
  State& s = state();
  s.kernel = name;
  ++s.launches;
  const unsigned long long threads = 1ull * c.block.x * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
      c.grid.y > 65535 || c.grid.z > 65535 || c.grid.x > 2147483647u) {
    s.last_error = cudaErrorInvalidConfiguration;
    s.kernel = nullptr;
    return;
  }
  if (c.smem > sizeof s.dynamic_shared) fail("dynamic shared memory past the card's");
  // A GPU refuses such a launch (invalid argument) unless this kernel was opted in to that many bytes.
  if (c.smem > kDefaultDynamicSmem) {
    const auto it = s.smem_optin.find(key);
    if (it == s.smem_optin.end() || it->second < c.smem)
      fail("dynamic shared memory past 48 KiB without cudaFuncSetAttribute(MaxDynamicSharedMemorySize) for "
           "as many bytes on this kernel");
  }
  s.grid = c.grid, s.block = c.block, s.dynamic_bytes = c.smem;
  for (unsigned zi = 0; zi < c.grid.z; ++zi)
    for (unsigned yi = 0; yi < c.grid.y; ++yi)
      for (unsigned xi = 0; xi < c.grid.x; ++xi) {
        s.block_idx = s.reverse ? uint3{c.grid.x - 1 - xi, c.grid.y - 1 - yi, c.grid.z - 1 - zi} : uint3{xi, yi, zi};
        ++s.block_serial;
        std::memset(s.dynamic_shared, 0xff, c.smem);  // what a kernel reads before writing shows
        s.in_block = true;
        run_block(body);
        s.in_block = false;
      }
  s.kernel = nullptr;
}

// ---- device memory: host pages, a buffer's (256-rounded) end against a guard page ----
struct Allocation {
  char* map;
  size_t map_bytes;
};
inline std::map<void*, Allocation>& allocations() {
  static std::map<void*, Allocation> a;
  return a;
}
// Freed mappings by their length, guard page kept, handed to the next allocation of that length: a
// fresh mapping's every page faults once (page faults were a sixth of the kernel check's profile).
// At most 1 GiB is kept, unreadable while it waits (a freed buffer's pointer faults as an unmapped
// one did). Every allocation is filled with 0xff bytes (NaN as fp32 and bf16), as dynamic shared
// memory is: neither zeros nor what the buffer last held can pass for a result a kernel did not write.
struct FreeMaps {
  std::multimap<size_t, char*> maps;
  size_t bytes = 0;
};
inline FreeMaps& free_maps() {
  static FreeMaps f;
  return f;
}
}  // namespace sim

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  const size_t pages = (rounded + page - 1) / page + 1;
  char* m = nullptr;
  sim::FreeMaps& kept = sim::free_maps();
  if (auto it = kept.maps.find(pages * page); it != kept.maps.end()) {
    m = it->second;
    kept.bytes -= pages * page;
    kept.maps.erase(it);
    mprotect(m, (pages - 1) * page, PROT_READ | PROT_WRITE);
  } else {
    m = static_cast<char*>(mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (m == MAP_FAILED) return cudaErrorMemoryAllocation;
    mprotect(m + (pages - 1) * page, page, PROT_NONE);
  }
  char* at = m + (pages - 1) * page - rounded;
  std::memset(at, 0xff, rounded);  // fresh or reused, what a kernel reads before anything wrote it shows
  sim::allocations()[at] = {m, pages * page};
  *p = at;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  void* v = nullptr;
  const cudaError_t e = cudaMalloc(&v, bytes);
  *p = static_cast<T*>(v);
  return e;
}
inline cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  auto& a = sim::allocations();
  auto it = a.find(p);
  if (it == a.end()) return cudaErrorInvalidValue;
  sim::FreeMaps& kept = sim::free_maps();
  if (kept.bytes + it->second.map_bytes <= (size_t(1) << 30)) {
    // Kept, but no access until handed out again: a freed buffer's pointer still faults when used.
    mprotect(it->second.map, it->second.map_bytes - size_t(sysconf(_SC_PAGESIZE)), PROT_NONE);
    kept.maps.emplace(it->second.map_bytes, it->second.map);
    kept.bytes += it->second.map_bytes;
  } else {
    munmap(it->second.map, it->second.map_bytes);
  }
  a.erase(it);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  if (n) std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr) {
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  if (n) std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t = nullptr) { return cudaMemset(d, v, n); }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = sim::state().last_error;
  sim::state().last_error = cudaSuccess;
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return sim::state().last_error; }
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "invalid argument";
  }
}
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void *devicePointer = nullptr, *hostPointer = nullptr;
};
// Device memory: inside a cudaMalloc'd buffer (the allocation at or below p, up to its guard page).
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = cudaPointerAttributes{};
  auto& all = sim::allocations();
  auto it = all.upper_bound(const_cast<void*>(p));
  if (it != all.begin()) {
    --it;
    const char* start = static_cast<const char*>(it->first);
    const char* guard = it->second.map + it->second.map_bytes - size_t(sysconf(_SC_PAGESIZE));
    if (static_cast<const char*>(p) >= start && static_cast<const char*>(p) < guard)
      a->type = cudaMemoryTypeDevice, a->devicePointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}
// The simulated card: 80 GiB, used = what cudaMalloc holds (pages, guard pages included).
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  size_t used = 0;
  for (const auto& [p, a] : sim::allocations()) used += a.map_bytes;
  *total = size_t(80) << 30;
  *free_bytes = *total > used ? *total - used : 0;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { *p = cudaDeviceProp{}; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  const cudaDeviceProp p{};
  switch (a) {
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = int(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
  }
  return cudaSuccess;
}
template <class F>
cudaError_t cudaFuncSetAttribute(F* f, cudaFuncAttribute attr, int value) {
  if (value < 0 || size_t(value) > cudaDeviceProp{}.sharedMemPerBlockOptin) return cudaErrorInvalidValue;
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) sim::state().smem_optin[sim::kernel_key(f)] = size_t(value);
  return cudaSuccess;
}
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) { *a = cudaFuncAttributes{}; return cudaSuccess; }
// Events time the host: every call has finished when it returns, so a recorded event's clock is the
// time its work before it ended (what cuBLASLt's tuner compares in the simulation).
struct CUevent_st {
  double seconds = 0;
};
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st; return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  if (!e) return cudaErrorInvalidValue;
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  e->seconds = double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b) return cudaErrorInvalidValue;
  *ms = float(1e3 * (b->seconds - a->seconds));
  return cudaSuccess;
}
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<uintptr_t>(p); }
