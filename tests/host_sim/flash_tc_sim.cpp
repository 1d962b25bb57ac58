// Host simulation of src/cuda/flash_attention_tc.cu's mma.sync kernels (scripts/cuda-host-sim.sh cuts
// their text from the sources): one std::thread per CUDA thread, a block barrier for __syncthreads and
// the shuffles, mma.sync and ldmatrix emulated from the PTX ISA's fragment layouts by exchanging the
// lanes' registers and row addresses. Blocks run one after another. The suite runs it as cuda.host_sim (about 40 s).
#include <algorithm>
#include <atomic>
#include <barrier>
#include <mutex>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include "core/fast_divisor.hpp"
#include "kernels/dropout.hpp"
#include "kernels/fast_math.hpp"
#include "kernels/flash_attention.hpp"
#include "random/philox_core.hpp"
#include "tensor/bf16.hpp"
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(x)
#define __shared__
struct Dim { unsigned x = 0, y = 0, z = 0; };
thread_local Dim threadIdx, blockIdx;
Dim gridDim, blockDim;
std::barrier<>* bar;  // the warp operations' exchanges (every thread of the block, in lockstep)
// __syncthreads: its own barrier, which counts the block's phases (the stretches between barriers) for
// the race check below; the warp operations' exchanges do not order shared memory on a GPU and do not
// count.
std::atomic<int> sync_phase{0};
struct NextPhase {
  void operator()() noexcept { ++sync_phase; }
};
std::barrier<NextPhase>* sync_bar;

struct uint4 { uint32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
[[noreturn]] inline void __trap() { std::abort(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
uint32_t shfl_u[1024];
float shfl_f[1024];
void __syncthreads() { sync_bar->arrive_and_wait(); }
float __shfl_xor_sync(unsigned, float v, int off) {
  bar->arrive_and_wait();
  shfl_f[threadIdx.x] = v;
  bar->arrive_and_wait();
  return shfl_f[threadIdx.x ^ unsigned(off)];
}
uint32_t __shfl_sync(unsigned, uint32_t v, int src) {
  bar->arrive_and_wait();
  shfl_u[threadIdx.x] = v;
  bar->arrive_and_wait();
  return shfl_u[(threadIdx.x & ~31u) | unsigned(src)];
}
using std::min; using std::max; using std::fmaxf;
int64_t mma_calls = 0;
namespace lattice::cuda {
namespace detail {
inline uint16_t to_bf16_bits(float f) { return lattice::to_bf16(f); }
inline uint32_t bf16_pair(float a, float b) { return uint32_t(to_bf16_bits(a)) | (uint32_t(to_bf16_bits(b)) << 16); }
using lattice::fast_exp;
}
namespace flash {
using namespace detail;
#include "common.inc"
}
namespace mma {
using namespace detail;
struct Slot { uint32_t a[32][4], b[32][2]; };
Slot slots[32];
float bf(uint32_t w, int half) { return lattice::from_bf16(uint16_t(half ? w >> 16 : w & 0xffff)); }
// The PTX ISA's m16n8k16 layout, read back from every lane's registers.
void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const unsigned w = threadIdx.x >> 5, l = threadIdx.x & 31;
  bar->arrive_and_wait();
  for (int i = 0; i < 4; ++i) slots[w].a[l][i] = a[i];
  slots[w].b[l][0] = b0, slots[w].b[l][1] = b1;
  if (threadIdx.x == 0) ++mma_calls;
  bar->arrive_and_wait();
  auto A = [&](int row, int col) {
    const int lane = (row % 8) * 4 + (col % 8) / 2, reg = (row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0);
    return bf(slots[w].a[lane][reg], col & 1);
  };
  auto B = [&](int k, int n) {
    const int lane = n * 4 + (k % 8) / 2, reg = k >= 8 ? 1 : 0;
    return bf(slots[w].b[lane][reg], k & 1);
  };
  const int g = int(l) >> 2, t = int(l) & 3;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
    d[e] = acc;
  }
}
// The race check on the operand tiles, by 16-byte chunk of shared memory and barrier phase: a copy
// issued into a chunk some thread read in the same phase (no barrier orders the read before the
// write); a read of a chunk whose copy is still in flight, or that landed in the same phase (its
// issuer waited, but no barrier has shown it to the others yet). Reads are the fragments' 32-bit
// loads (word_at) and ldmatrix's rows.
unsigned char* smem_base = nullptr;
size_t smem_bytes = 0;
struct ChunkState { int read = -1, landed = -1; bool in_flight = false; };
std::vector<ChunkState> chunk_state;
std::mutex chunk_mutex;
int races = 0;
void race(const char* what) {
  if (races++ < 5) std::printf("  RACE: %s (block phase %d)\n", what, sync_phase.load());
}
ChunkState* chunk_of(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < smem_base || c >= smem_base + smem_bytes) return nullptr;
  return &chunk_state[size_t(c - smem_base) / 16];
}
void note_read(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(chunk_mutex);
  for (size_t off = 0; off < bytes; off += 4) {
    ChunkState* c = chunk_of(static_cast<const unsigned char*>(p) + off);
    if (!c) continue;
    if (c->in_flight) race("a tile read before its copy landed");
    else if (c->landed == sync_phase) race("a copy read in the phase it landed, before a barrier");
    c->read = std::max(c->read, sync_phase.load());
  }
}
// cp.async: a thread's copies land at its async_wait_all(), not before.
struct PendingCopy { void* dst; unsigned char bytes[16]; };
thread_local std::vector<PendingCopy> pending;
void copy16_async(void* dst, const void* src, bool valid) {
  {
    std::lock_guard<std::mutex> lock(chunk_mutex);
    if (ChunkState* c = chunk_of(dst)) {
      if (c->read == sync_phase) race("a copy issued into a chunk read in the same phase");
      if (c->in_flight) race("two copies in flight into one chunk");
      c->in_flight = true;
    }
  }
  PendingCopy c{dst, {}};
  if (valid) std::memcpy(c.bytes, src, 16);
  pending.push_back(c);
}
void async_commit() {}
void async_wait_all() {
  std::lock_guard<std::mutex> lock(chunk_mutex);
  for (auto& c : pending) {
    std::memcpy(c.dst, c.bytes, 16);
    if (ChunkState* st = chunk_of(c.dst)) st->in_flight = false, st->landed = sync_phase;
  }
  pending.clear();
}
uint32_t word_at(const uint16_t* p) {
  note_read(p, 4);
  return *reinterpret_cast<const uint32_t*>(p);
}
uint32_t bf16x2_rn(float lo, float hi) { return bf16_pair(lo, hi); }  // the device's cvt, but for subnormals
const uint16_t* ldm_rows[1024];
// ldmatrix .m8n8 .x2 .trans from the lanes' row addresses (lanes 0-7 matrix 0, 8-15 matrix 1): lane l
// gets (row 2t, col g) and (row 2t+1, col g) of each.
void load_b_trans(uint32_t& b0, uint32_t& b1, const uint16_t* X, int ld, int k0, int n0) {
  const unsigned l = threadIdx.x & 31, w0 = threadIdx.x & ~31u;
  bar->arrive_and_wait();
  ldm_rows[threadIdx.x] = X + (k0 + int(l & 15)) * ld + n0;
  if (l < 16) note_read(ldm_rows[threadIdx.x], 16);
  bar->arrive_and_wait();
  const int g = int(l) >> 2, t = int(l) & 3;
  uint32_t r[2];
  for (int m = 0; m < 2; ++m) {
    const uint16_t lo = ldm_rows[w0 + 8 * m + 2 * t][g], hi = ldm_rows[w0 + 8 * m + 2 * t + 1][g];
    r[m] = uint32_t(lo) | uint32_t(hi) << 16;
  }
  b0 = r[0], b1 = r[1];
}
#include "mma.inc"
}
using namespace detail;
using namespace flash;
using namespace mma;
inline constexpr int64_t kFlashMaxHeadDim = 128;
namespace {
alignas(128) unsigned char smem[400000];
#include "tc.inc"
}
template <class F> void launch(Dim grid, unsigned threads, F f) {
  gridDim = grid; blockDim = {threads, 1, 1};
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      std::barrier<> b(threads); bar = &b;
      std::barrier<NextPhase> sb(threads); sync_bar = &sb;
      std::memset(smem, 0xff, sizeof smem);
      smem_base = smem, smem_bytes = sizeof smem;
      chunk_state.assign(sizeof smem / 16, ChunkState{});
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          threadIdx = {t, 0, 0}; blockIdx = {bx, by, 0};
          f();
          if (!pending.empty()) race("copies still in flight at the kernel's end");
          bar->arrive_and_drop(), sync_bar->arrive_and_drop();
        });
      for (auto& t : ts) t.join();
    }
}
template <int NC, class TIn>
void fwd(float* out, float* lse, const TIn* q, const TIn* k, const TIn* v, const FlashShape& x, const AttentionDropout& d, bool vec) {
  FlashArgs p = make_args(x, d);
  Dim g{unsigned((x.s + 63) / 64), unsigned(x.b * x.a), 1};
  const bool ahead = std::is_same_v<TIn, uint16_t> && vec;
  auto run = [&]<bool DROP, bool AHEAD>() {
    launch(g, kThreads, [&] { tc_forward_kernel<NC, DROP, AHEAD, TIn>(out, lse, q, k, v, p, vec); });
  };
  if (p.dropout) ahead ? run.template operator()<true, true>() : run.template operator()<true, false>();
  else ahead ? run.template operator()<false, true>() : run.template operator()<false, false>();
}
template <int NC, class TIn>
void bwd(float* dq, float* dk, float* dv, const float* dout, const TIn* q, const TIn* k, const TIn* v, const float* lse, const float* D, const FlashShape& x, const AttentionDropout& d, bool vec) {
  FlashArgs p = make_args(x, d);
  Dim g{unsigned((x.s + 63) / 64), unsigned(x.b * x.a), 1};
  const bool ahead = std::is_same_v<TIn, uint16_t> && vec;
  // dO rounded to bf16 first, as tc_backward does (to_bf16: the CPU's rounding, the device's too).
  const size_t n = size_t(x.b * x.a * x.s * x.dh);
  std::vector<uint16_t> dout16(n);
  for (size_t i = 0; i < n; ++i) dout16[i] = to_bf16_bits(dout[i]);
  auto run = [&]<bool DROP, bool AHEAD>() {
    launch(g, kThreads, [&] { tc_dkdv_kernel<NC, DROP, AHEAD, TIn>(dk, dv, dout16.data(), q, k, v, lse, D, p, vec); });
    launch(g, kThreads, [&] { tc_dq_kernel<NC, DROP, AHEAD, TIn>(dq, dout16.data(), q, k, v, lse, D, p, vec); });
  };
  if (p.dropout) ahead ? run.template operator()<true, true>() : run.template operator()<true, false>();
  else ahead ? run.template operator()<false, true>() : run.template operator()<false, false>();
}
}  // namespace lattice::cuda
using namespace lattice;
std::mt19937_64 rng(1234);
std::vector<float> randn(size_t n, bool b16) {
  std::normal_distribution<float> d(0, 1); std::vector<float> v(n);
  for (auto& x : v) { x = d(rng); if (b16) x = from_bf16(to_bf16(x)); }
  return v;
}
int fails = 0;
void cmp(const char* name, const std::vector<float>& r, const std::vector<float>& g, double tol) {
  double ma = 0, mr = 0; bool nan = false;
  for (size_t i = 0; i < r.size(); ++i) { double d = std::fabs(double(r[i]) - g[i]); if (std::isnan(d) || std::isnan(g[i])) nan = true; ma = std::max(ma, d); mr = std::max(mr, std::fabs(double(r[i]))); }
  const bool ok = !nan && ma / mr <= tol;
  if (!ok) ++fails;
  std::printf("  %-6s max_abs=%.3e rel=%.3e %s\n", name, ma, ma / mr, nan ? "NaN!" : (ok ? "ok" : "FAIL"));
}
void bits(const char* name, const std::vector<float>& a, const std::vector<float>& b) {
  const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  if (!same) ++fails;
  std::printf("  %-6s %s\n", name, same ? "bits equal" : "BITS DIFFER");
}
template <int NC>
void run_case(FlashShape x, float pd) {
  AttentionDropout drop; drop.stream = {0x1234abcdULL, 77, 5, DropoutSite::attention};
  drop.p = pd, drop.first_row = 3, drop.heads_total = 12, drop.head0 = 6;
  const size_t n = size_t(x.b * x.a * x.s * x.dh), rows = size_t(x.b * x.a * x.s);
  auto q = randn(n, true), k = randn(n, true), v = randn(n, true), dout = randn(n, false);
  std::vector<float> o(n), l(rows), dq(n), dk(n), dv(n);
  flash_attention_forward(o.data(), l.data(), q.data(), k.data(), v.data(), x, drop);
  flash_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), o.data(), l.data(), x, drop);
  std::vector<float> D(rows);
  for (size_t r = 0; r < rows; ++r) { float s = 0; for (int64_t e = 0; e < x.dh; ++e) s += dout[r * x.dh + e] * o[r * x.dh + e]; D[r] = s; }
  std::vector<float> go(n, NAN), gl(rows, NAN), gdq(n, NAN), gdk(n, NAN), gdv(n, NAN);
  const double tol = 1.0 / 128;
  std::printf("b%lld a%lld s%lld dh%lld p=%.1f\n", (long long)x.b, (long long)x.a, (long long)x.s, (long long)x.dh, pd);
  cuda::fwd<NC, float>(go.data(), gl.data(), q.data(), k.data(), v.data(), x, drop, true);
  cmp("out", o, go, tol); cmp("lse", l, gl, tol);
  cuda::bwd<NC, float>(gdq.data(), gdk.data(), gdv.data(), dout.data(), q.data(), k.data(), v.data(), l.data(), D.data(), x, drop, true);
  cmp("dq", dq, gdq, tol); cmp("dk", dk, gdk, tol); cmp("dv", dv, gdv, tol);
  // bf16 bits in, scalar loads: the same bits
  std::vector<uint16_t> q16(n), k16(n), v16(n);
  for (size_t i = 0; i < n; ++i) q16[i] = to_bf16(q[i]), k16[i] = to_bf16(k[i]), v16[i] = to_bf16(v[i]);
  for (bool vec : {false, true}) {  // one element at a time; 16 bytes at a time with the key tiles copied ahead
    std::vector<float> ho(n, NAN), hl(rows, NAN), hdq(n, NAN), hdk(n, NAN), hdv(n, NAN);
    cuda::fwd<NC, uint16_t>(ho.data(), hl.data(), q16.data(), k16.data(), v16.data(), x, drop, vec);
    bits(vec ? "out16a" : "out16", go, ho); bits(vec ? "lse16a" : "lse16", gl, hl);
    cuda::bwd<NC, uint16_t>(hdq.data(), hdk.data(), hdv.data(), dout.data(), q16.data(), k16.data(), v16.data(), l.data(), D.data(), x, drop, vec);
    bits(vec ? "dq16a" : "dq16", gdq, hdq); bits(vec ? "dk16a" : "dk16", gdk, hdk); bits(vec ? "dv16a" : "dv16", gdv, hdv);
  }
}
void mask_case() {
  FlashShape x{2, 3, 128, 128};
  AttentionDropout drop; drop.stream = {0x1234abcdULL, 77, 5, DropoutSite::attention};
  drop.p = 0.1f, drop.first_row = 3, drop.heads_total = 12, drop.head0 = 6;
  const size_t n = size_t(x.b * x.a * x.s * x.dh), rows = size_t(x.b * x.a * x.s);
  std::vector<float> eye(n, 0.0f);
  for (int64_t bh = 0; bh < x.b * x.a; ++bh) for (int64_t i = 0; i < x.s; ++i) eye[size_t((bh * x.s + i) * x.dh + i)] = 1.0f;
  std::vector<uint8_t> expect(n, 0);
  const AttentionMaskDraw draw(drop);
  for (int64_t bh = 0; bh < x.b * x.a; ++bh) for (int64_t i = 0; i < x.s; ++i)
    draw.row(expect.data() + (bh * x.s + i) * x.s, attention_mask_first(drop, x.a, x.s, bh) + uint64_t(i * x.s), i + 1);
  auto q = randn(n, true), k = randn(n, true);
  std::vector<float> out(n, NAN), lse(rows, NAN);
  cuda::fwd<8, float>(out.data(), lse.data(), q.data(), k.data(), eye.data(), x, drop, true);
  size_t bad = 0;
  for (size_t e = 0; e < n; ++e) bad += (out[e] != 0.0f) != (expect[e] != 0);
  std::printf("mask fwd (V = I): %zu of %zu differ %s\n", bad, n, bad ? "FAIL" : "ok");
  fails += bad != 0;
  std::vector<float> o(n), l(rows), D(rows, 0.0f), dq(n), dk(n), dv(n, NAN);
  flash_attention_forward(o.data(), l.data(), q.data(), k.data(), eye.data(), x, drop);
  for (size_t r = 0; r < rows; ++r) { float s = 0; for (int64_t e = 0; e < x.dh; ++e) s += eye[r * x.dh + e] * o[r * x.dh + e]; D[r] = s; }
  cuda::bwd<8, float>(dq.data(), dk.data(), dv.data(), eye.data(), q.data(), k.data(), eye.data(), l.data(), D.data(), x, drop, true);
  bad = 0;
  for (int64_t bh = 0; bh < x.b * x.a; ++bh) for (int64_t i = 0; i < x.s; ++i) for (int64_t j = 0; j < x.s; ++j)
    bad += (dv[size_t((bh * x.s + j) * x.dh + i)] != 0.0f) != (expect[size_t((bh * x.s + i) * x.s + j)] != 0);
  std::printf("mask bwd (dO = I, dV): %zu differ %s\n", bad, bad ? "FAIL" : "ok");
  fails += bad != 0;
}
int main(int argc, char** argv) {
  int which = -1;
  if (argc > 1) {
    char* end = nullptr;
    const long v = std::strtol(argv[1], &end, 10);
    if (argc > 2 || *end != '\0' || end == argv[1] || v < 0 || v > 7) {
      std::fprintf(stderr, "usage: flash_tc_sim [CASE 0-7]\n");
      return 2;
    }
    which = int(v);
  }
  int i = 0;
  auto pick = [&] { return which < 0 || which == i++; };
  if (pick()) run_case<4>({2, 3, 200, 64}, 0.0f);
  if (pick()) run_case<4>({2, 3, 200, 64}, 0.1f);
  if (pick()) run_case<8>({1, 2, 130, 128}, 0.1f);
  if (pick()) run_case<4>({2, 2, 96, 32}, 0.1f);
  if (pick()) run_case<4>({1, 2, 40, 16}, 0.0f);
  if (pick()) run_case<4>({1, 1, 100, 48}, 0.1f);
  if (pick()) run_case<8>({1, 1, 70, 96}, 0.1f);
  if (pick()) mask_case();
  std::printf("shared-memory races found: %d\n", cuda::mma::races);
  fails += cuda::mma::races;
  std::printf("%s (%d failures), mma calls %lld\n", fails ? "FAIL" : "ok", fails, (long long)mma_calls);
  return fails ? 1 : 0;
}
