#include "backend/guarded_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "tensor/bf16.hpp"

namespace lattice {

namespace {

// One reserved region, bump-allocated in whole pages; freed blocks are reused by size. The region is
// readable and writable only while at least one seam operation is open (any thread).
class Arena {
 public:
  static Arena& get() {
    static Arena a;
    return a;
  }
  void* allocate(size_t bytes) {
    const size_t size = (bytes + page_ - 1) / page_ * page_;
    std::lock_guard lock(mu_);
    if (!base_) return nullptr;
    char* p = nullptr;
    auto& spare = free_[size];
    if (!spare.empty()) {
      p = spare.back();
      spare.pop_back();
    } else {
      if (top_ + size > kReserve) return nullptr;
      p = base_ + top_;
      top_ += size;
      if (open_ > 0) protect(p, size, PROT_READ | PROT_WRITE);
    }
    sizes_[p] = size;
    return p;
  }
  void release(void* ptr) {
    std::lock_guard lock(mu_);
    const auto it = sizes_.find(static_cast<char*>(ptr));
    if (it == sizes_.end()) return;
    free_[it->second].push_back(it->first);
    sizes_.erase(it);
  }
  int64_t mapped() {
    std::lock_guard lock(mu_);
    return int64_t(top_);
  }
  bool holds(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + kReserve;
  }
  void open() {
    std::lock_guard lock(mu_);
    if (open_++ == 0 && top_) protect(base_, top_, PROT_READ | PROT_WRITE);
  }
  void close() {
    std::lock_guard lock(mu_);
    if (--open_ == 0 && top_) protect(base_, top_, PROT_NONE);
  }

 private:
  static constexpr size_t kReserve = size_t(64) << 30;  // address space only (MAP_NORESERVE)
  Arena() : page_(size_t(sysconf(_SC_PAGESIZE))) {
    void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  static void protect(char* p, size_t n, int prot) {
    if (mprotect(p, n, prot) != 0) throw std::bad_alloc();  // the kernel refused: no memory for its tables
  }
  std::mutex mu_;
  size_t page_;
  char* base_ = nullptr;
  size_t top_ = 0;
  int open_ = 0;
  std::unordered_map<size_t, std::vector<char*>> free_;
  std::unordered_map<char*, size_t> sizes_;
};

// Device memory is open for the duration of one seam operation.
struct Open {
  Open() { Arena::get().open(); }
  ~Open() { Arena::get().close(); }
  Open(const Open&) = delete;
  Open& operator=(const Open&) = delete;
};

void* g_allocate(size_t bytes) { return Arena::get().allocate(bytes); }
void g_release(void* p) { Arena::get().release(p); }
void g_fill_zero(void* dst, size_t bytes) {
  Open o;
  host_memory().fill_zero(dst, bytes);
}
void g_copy(void* dst, const void* src, size_t bytes) {
  Open o;
  host_memory().copy(dst, src, bytes);
}
void g_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  Open o;
  to_bf16(src, dst, n);
}
void g_from_bf16(const uint16_t* src, float* dst, int64_t n) {
  Open o;
  from_bf16(src, dst, n);
}

// Its "driver" reports the region's pages handed out (whole pages per block), its context nothing:
// the summary's reconciliation runs here as on a GPU.
int64_t g_used() { return Arena::get().mapped(); }
int64_t g_context() { return 0; }
bool g_holds(const void* p) { return Arena::get().holds(p); }

const DeviceMemory kGuardedMemory = {"cpu-guarded", false,       true,       g_allocate, g_release, g_fill_zero, g_copy, g_copy,
                                     g_copy,        g_to_bf16,   g_from_bf16, g_used,   g_context, g_holds};

// A device operation reads and writes device memory only: a host pointer given to one (a staging
// buffer, a file's mapping) is the other half of what a GPU would fault on.
[[noreturn]] void host_pointer(const char* op) {
  std::fprintf(stderr, "lattice: internal error: --device cpu-guarded: %s was given host memory\n", op);
  std::abort();
}
template <class T>
void check_arg(const char* op, const T& a) {
  if constexpr (std::is_pointer_v<T>) {
    if (a && !Arena::get().holds(a)) host_pointer(op);
  } else if constexpr (std::is_same_v<T, GemmOperand>) {
    if (a.ptr && !Arena::get().holds(a.ptr)) host_pointer(op);
  } else if constexpr (std::is_same_v<T, FlashOperands>) {  // the operands and the room to widen them
    for (const void* p : {a.q, a.k, a.v, static_cast<const void*>(a.q32), static_cast<const void*>(a.k32),
                          static_cast<const void*>(a.v32)})
      if (p && !Arena::get().holds(p)) host_pointer(op);
  } else if constexpr (std::is_same_v<T, FlashRowsRooms>) {
    for (const float* p : {a.dq, a.dk, a.dv, a.dout, a.out})
      if (p && !Arena::get().holds(p)) host_pointer(op);
  } else if constexpr (std::is_same_v<T, GradPieceSums>) {  // host arrays naming device runs
    for (size_t i = 0; i < a.count; ++i)
      if (a.pieces[i].data && !Arena::get().holds(a.pieces[i].data)) host_pointer(op);
  } else if constexpr (std::is_same_v<T, AdamWSegments>) {
    for (size_t i = 0; i < a.count; ++i) {
      const AdamWSegment& s = a.segments[i];
      for (const void* p : {static_cast<const void*>(s.m), static_cast<const void*>(s.v),
                            static_cast<const void*>(s.w), static_cast<const void*>(s.w16),
                            static_cast<const void*>(s.grad)})
        if (p && !Arena::get().holds(p)) host_pointer(op);
    }
  }
}

// Each entry of the CPU's table, its pointers checked, run with device memory open.
template <auto Member>
struct Guard;
template <class R, class... A, R (*DeviceOps::*Member)(A...)>
struct Guard<Member> {
  static const char* name;
  static R call(A... a) {
    (check_arg(name, a), ...);
    Open o;
    return (cpu_ops().*Member)(a...);
  }
};
template <class R, class... A, R (*DeviceOps::*Member)(A...)>
const char* Guard<Member>::name = "a device operation";

DeviceOps make_guarded_ops() {
  DeviceOps g = cpu_ops();
  g.device = Device::cpu_guarded;
#define LATTICE_GUARD(op) g.op = &Guard<&DeviceOps::op>::call, Guard<&DeviceOps::op>::name = #op;
  LATTICE_DEVICE_OPS(LATTICE_GUARD)
#undef LATTICE_GUARD
  return g;
}

}  // namespace

const DeviceMemory& guarded_memory() { return kGuardedMemory; }
const DeviceOps& guarded_ops() {
  static const DeviceOps ops = make_guarded_ops();
  return ops;
}

}  // namespace lattice
