#include "kernels/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <omp.h>

#include "core/trace.hpp"
#include "kernels/gemm_widened.hpp"
#include "oneapi/dnnl/dnnl.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

constexpr int64_t kMinPartRows = 256;  // shorter row parts would starve oneDNN's blocking

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}
dnnl::stream& cpu_stream() {  // one per thread: parts run their primitives concurrently
  static thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// A primitive computes rows [i0, i0 + m) of `batch` M×N products (m = M for whole matrices); `threads` is
// how many threads oneDNN plans it for (1 for a part, which one thread of ours runs).
struct Key {
  int64_t batch, M, N, K, m;
  bool ta, tb, acc, bias, bf16;
  float alpha;
  int threads;
  bool out16 = false;  // C as bf16 (gemm_bf16_out)
  auto tie() const { return std::tie(batch, M, N, K, m, ta, tb, acc, bias, bf16, alpha, threads, out16); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Prim {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, bias, scratch;
};

// 3-D descriptors [batch, rows, cols] of matrices `stride` elements apart whose rows are `ld` apart; a
// transposed operand ([cols, rows] in memory) is described by its strides.
dnnl::memory::desc operand_desc(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld, bool transposed,
                                dt type) {
  if (!transposed) return dnnl::memory::desc(dims{batch, rows, cols}, type, dims{stride, ld, 1});
  return dnnl::memory::desc(dims{batch, rows, cols}, type, dims{stride, 1, ld});
}

// The primitive descriptor of a key, and the operands' descriptors it was made from.
dnnl::matmul::primitive_desc describe(const Key& k, Prim& p) {
  const dt in = k.bf16 ? dt::bf16 : dt::f32;
  p.a = operand_desc(k.batch, k.M * k.K, k.m, k.K, k.ta ? k.M : k.K, k.ta, in);
  p.b = operand_desc(k.batch, k.K * k.N, k.K, k.N, k.tb ? k.K : k.N, k.tb, in);
  p.c = dnnl::memory::desc(dims{k.batch, k.m, k.N}, k.out16 ? dt::bf16 : dt::f32, dims{k.M * k.N, k.N, 1});
  dnnl::primitive_attr attr;
  // Our scratchpad, passed at execution: concurrent parts must not share the library's.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.acc) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  std::unique_ptr<dnnl::matmul::desc> desc;
  if (k.bias) {
    p.bias = dnnl::memory::desc(dims{1, 1, k.N}, dt::f32, dims{k.N, k.N, 1});
    desc = std::make_unique<dnnl::matmul::desc>(p.a, p.b, p.bias, p.c);
  } else {
    desc = std::make_unique<dnnl::matmul::desc>(p.a, p.b, p.c);
  }
  return dnnl::matmul::primitive_desc(*desc, attr, cpu_engine());
}

Prim make_prim(const Key& k) {
  Prim p;
  const dnnl::matmul::primitive_desc pd = describe(k, p);
  p.scratch = pd.scratchpad_desc();
  p.matmul = dnnl::matmul(pd);
  return p;
}

std::map<Key, Prim>& cache() {
  static std::map<Key, Prim> c;
  return c;
}
std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

const Prim& primitive(const Key& key) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = cache().find(key);
  if (it == cache().end()) it = cache().emplace(key, make_prim(key)).first;
  return it->second;  // std::map nodes do not move: the reference outlives the lock
}

// Matrices [b0, b0 + key.batch) of the batch, rows [i0, i0 + key.m) of each C, through one primitive on
// the calling thread's stream.
void run_part(const Key& key, const GemmShape& s, GemmOperand a, GemmOperand b, void* c, const float* bias,
              int64_t b0, int64_t i0) {
  const Prim& p = primitive(key);
  auto& eng = cpu_engine();
  const size_t elem = a.dtype == DType::bf16 ? 2 : 4;
  const char* a_part = static_cast<const char*>(a.ptr) + size_t(b0 * s.M * s.K + i0 * (s.trans_a ? 1 : s.K)) * elem;
  const char* b_part = static_cast<const char*>(b.ptr) + size_t(b0 * s.K * s.N) * elem;
  dnnl::memory am(p.a, eng, const_cast<char*>(a_part));
  dnnl::memory bm(p.b, eng, const_cast<char*>(b_part));
  dnnl::memory cm(p.c, eng, static_cast<char*>(c) + size_t(b0 * s.M * s.N + i0 * s.N) * (key.out16 ? 2 : 4));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, eng, const_cast<float*>(bias)));
  // The scratchpad: a per-thread buffer that only grows to the largest primitive's need (a few MiB at most).
  static thread_local ScratchArray<uint8_t> scratch(MemoryCategory::workspaces, "gemm_scratchpad");
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, eng, scratch.ensure(int64_t(p.scratch.get_size()))));
  p.matmul.execute(cpu_stream(), args);
  cpu_stream().wait();
}

// LATTICE_GEMM=whole or =parts forces one way for every GEMM (A/B benchmarks in one binary,
// bench/ab_speed.sh); unset, split_rule below decides.
enum class Forced { none, whole, parts, unknown };
Forced parse_forced(const char* v) {
  if (!v || !*v) return Forced::none;
  if (std::strcmp(v, "whole") == 0) return Forced::whole;
  if (std::strcmp(v, "parts") == 0) return Forced::parts;
  return Forced::unknown;  // refused by the CLI before a run (gemm_split_env_valid); here: the rule
}
Forced forced_split() {
  static const Forced forced = parse_forced(std::getenv("LATTICE_GEMM"));
  return forced;
}

// LATTICE_GEMM_BF16=native or =widened forces how bf16 products run (A/B benchmarks); unset,
// machine_peak's rule (bf16_gemm_widens) decides: widened where the CPU's bf16 dot product gives
// fewer FLOPs a cycle than its fp32 FMAs.
enum class Bf16Forced { none, native, widened, unknown };
Bf16Forced parse_bf16_forced(const char* v) {
  if (!v || !*v) return Bf16Forced::none;
  if (std::strcmp(v, "native") == 0) return Bf16Forced::native;
  if (std::strcmp(v, "widened") == 0) return Bf16Forced::widened;
  return Bf16Forced::unknown;
}

// Whether an unbatched GEMM runs as one oneDNN-threaded primitive rather than in row parts. Measured
// per kind of product (docs/design.md §7): on AMX, bf16 products that do not accumulate (a linear's
// forward and input gradient) run faster whole, since every row part re-packs all of B into AMX's
// layout; a weight gradient (accumulating xᵀ·dy) and every fp32 product run faster in parts.
bool runs_whole(const GemmShape& s, bool bf16) {
  switch (forced_split()) {
    case Forced::whole: return true;
    case Forced::parts: return false;
    case Forced::none:
    case Forced::unknown: break;
  }
  static const bool amx = gemm_isa() == GemmIsa::amx;
  return bf16 && amx && s.batch == 1 && !s.accumulate;
}

// How many parts a GEMM is cut into on `threads` threads, and part t's key and first matrix / row.
int parts_of(const GemmShape& s, bool bf16, int threads) {
  const int64_t units = s.batch > 1 ? s.batch : s.M / kMinPartRows;
  return runs_whole(s, bf16) ? 1 : int(std::min<int64_t>(threads, units));
}
Key part_key(const GemmShape& s, bool bias, bool bf16, int parts, int t, int64_t& b0, int64_t& i0) {
  int64_t nb = s.batch, m = s.M;
  b0 = 0, i0 = 0;
  if (s.batch > 1) {
    b0 = s.batch * t / parts, nb = s.batch * (t + 1) / parts - b0;
  } else {  // row boundaries on multiples of 16
    i0 = s.M * t / parts / 16 * 16;
    m = (t + 1 == parts ? s.M : s.M * (t + 1) / parts / 16 * 16) - i0;
  }
  return Key{nb, s.M, s.N, s.K, m, s.trans_a, s.trans_b, s.accumulate, bias, bf16, s.alpha, 1};
}

bool bf16_rule() {
  switch (parse_bf16_forced(std::getenv("LATTICE_GEMM_BF16"))) {
    case Bf16Forced::native: return false;
    case Bf16Forced::widened: return true;
    case Bf16Forced::none:
    case Bf16Forced::unknown: break;  // refused by the CLI before a run (gemm_bf16_env_valid); here: the rule
  }
  // This machine's own CPU, whatever LATTICE_CPUINFO describes for the MFU's peak (tests and `plan`
  // describe other machines with it): how GEMMs run is not theirs to change.
  return bf16_gemm_widens(read_machine_texts(/*this_machine=*/true), gemm_isa());
}
std::atomic<int> g_widens_bf16{-1};  // -1: not decided yet; else the decision (tests may set it)
bool widens_bf16() {
  int widen = g_widens_bf16.load(std::memory_order_relaxed);
  if (widen < 0) g_widens_bf16.store(widen = bf16_rule() ? 1 : 0, std::memory_order_relaxed);
  return widen == 1;
}

// How this bf16 GEMM runs widened (kernels/gemm_widened.hpp), or nullopt where it runs natively.
std::optional<widened::Tiles> widening(const GemmShape& s, bool out16, int threads) {
  if (!widens_bf16()) return std::nullopt;
  return widened::plan(s, out16, threads);
}

}  // namespace

std::vector<int64_t> gemm_scratchpad_bytes(const GemmShape& s, bool bf16, int threads, bool out16) {
  threads = std::max(1, threads);
  std::vector<int64_t> bytes(size_t(threads), 0);
  // oneDNN's descriptor arithmetic faults (SIGFPE) on operands of ~2^60 elements, which only a
  // planned model past any machine asks for: such a GEMM is charged no scratchpad.
  const double batch = double(s.batch), largest = std::max({double(s.M) * double(s.K), double(s.K) * double(s.N),
                                                            double(s.M) * double(s.N)});
  if (batch * largest > 0x1p48 || std::max({s.M, s.N, s.K}) >= (int64_t(1) << 31)) return bytes;
  // No work, no primitive (oneDNN refuses to describe one): the planner's unfused attention calls of
  // a context-parallel ring with fewer heads a rank than ranks (a/t < c), which the ring never makes.
  if (s.batch <= 0 || s.M <= 0 || s.N <= 0 || s.K <= 0) return bytes;
  if (const auto tiles = bf16 ? widening(s, out16, threads) : std::nullopt) {  // the fp32 GEMMs its tiles run
    for (const GemmShape& g : widened::tile_gemms(*tiles, s)) {
      const std::vector<int64_t> tile = gemm_scratchpad_bytes(g, false, threads, false);
      for (size_t t = 0; t < bytes.size(); ++t) bytes[t] = std::max(bytes[t], tile[t]);
    }
    return bytes;
  }
  const int parts = parts_of(s, bf16, threads);
  Prim unused;
  // oneDNN sizes a primitive's scratchpad for the OpenMP threads of the thread that creates it: those
  // of the rank this describes (`threads`), not the asking process's (the planner's OMP_NUM_THREADS).
  struct OmpThreads {
    int saved = omp_get_max_threads();
    explicit OmpThreads(int n) { omp_set_num_threads(n); }
    ~OmpThreads() { omp_set_num_threads(saved); }
  } as_the_rank(threads);
  if (parts < 2) {
    Key whole{s.batch, s.M, s.N, s.K, s.M, s.trans_a, s.trans_b, s.accumulate, false, bf16, s.alpha, threads};
    whole.out16 = out16;
    bytes[0] = int64_t(describe(whole, unused).scratchpad_desc().get_size());
    return bytes;
  }
  // Parts are made inside gemm_into's parallel region, each thread at one OpenMP thread.
  omp_set_num_threads(1);
  for (int t = 0; t < parts; ++t) {
    int64_t b0 = 0, i0 = 0;
    Key part = part_key(s, false, bf16, parts, t, b0, i0);
    part.out16 = out16;
    bytes[size_t(t)] = int64_t(describe(part, unused).scratchpad_desc().get_size());
  }
  return bytes;
}

namespace {
void run_gemm(const GemmShape& s, GemmOperand a, GemmOperand b, void* c, const float* bias, bool out16, int threads);

// The one body of gemm and gemm_bf16_out: C as fp32 or (out16) bf16.
void gemm_into(const GemmShape& s, GemmOperand a, GemmOperand b, void* c, const float* bias, bool out16) {
  if (a.dtype != b.dtype) throw std::logic_error("gemm: A and B must share a dtype");
  const bool nested = omp_in_parallel();
  const int threads = nested ? 1 : omp_get_max_threads();
  std::optional<TraceSpan> span;  // a GEMM of the step (one inside a parallel region is its caller's time)
  if (!nested) span.emplace(Trace::Kind::gemm);
  // bf16 operands widened to fp32 (exact: a bf16 is an fp32 with 16 low zero bits), then fp32 GEMMs:
  // products exact in both forms, sums fp32 in both; a bf16 destination is the fp32 product (bias
  // added in fp32) rounded by to_bf16, as oneDNN's own bf16 destination (gemm.hpp).
  if (const auto tiles = a.dtype == DType::bf16 ? widening(s, out16, threads) : std::nullopt)
    return widened::run(*tiles, s, static_cast<const uint16_t*>(a.ptr), static_cast<const uint16_t*>(b.ptr), c, bias,
                        out16, threads, [&](const GemmShape& g, const float* a32, const float* b32, float* c32,
                                            const float* tile_bias) {
                          run_gemm(g, f32_operand(a32), f32_operand(b32), c32, tile_bias, false, threads);
                        });
  run_gemm(s, a, b, c, bias, out16, threads);
}

// oneDNN's own threading of one matmul left one thread waiting for the other at its end (docs/design.md
// §7), so a GEMM is cut into equal parts, one per thread, each a single-threaded primitive: a batch by
// its matrices, an unbatched GEMM with enough rows by its rows (measured faster than by columns on
// every weight-gradient shape and no slower elsewhere).
void run_gemm(const GemmShape& s, GemmOperand a, GemmOperand b, void* c, const float* bias, bool out16, int threads) {
  const bool bf16 = a.dtype == DType::bf16;
  const int parts = parts_of(s, bf16, threads);
  if (parts < 2) {
    Key key{s.batch, s.M, s.N, s.K, s.M, s.trans_a, s.trans_b, s.accumulate, bias != nullptr, bf16, s.alpha, threads};
    key.out16 = out16;
    run_part(key, s, a, b, c, bias, 0, 0);
    return;
  }
  std::exception_ptr failure;  // an exception may not leave a parallel region: carried out of it
#pragma omp parallel num_threads(parts)
  {
    omp_set_num_threads(1);  // oneDNN plans and runs this thread's part on this thread alone
    const int t = omp_get_thread_num();
    int64_t b0 = 0, i0 = 0;
    Key key = part_key(s, bias != nullptr, bf16, parts, t, b0, i0);
    key.out16 = out16;
    try {
      run_part(key, s, a, b, c, bias, b0, i0);
    } catch (...) {
#pragma omp critical(lattice_gemm_failure)
      failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}
}  // namespace

void gemm(const GemmShape& s, GemmOperand a, GemmOperand b, float* c, const float* bias) {
  gemm_into(s, a, b, c, bias, false);
}

void gemm_bf16_out(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* c, const float* bias) {
  if (s.accumulate || s.alpha != 1.0f) throw std::logic_error("gemm_bf16_out: alpha 1, no accumulation");
  if (a.dtype != DType::bf16 || b.dtype != DType::bf16) throw std::logic_error("gemm_bf16_out: bf16 operands");
  gemm_into(s, a, b, c, bias, true);
}

bool gemm_split_env_valid() { return parse_forced(std::getenv("LATTICE_GEMM")) != Forced::unknown; }
bool gemm_bf16_env_valid() { return parse_bf16_forced(std::getenv("LATTICE_GEMM_BF16")) != Bf16Forced::unknown; }

bool gemm_bf16_widened() { return widens_bf16(); }
void gemm_set_bf16_widened(std::optional<bool> widened) {
  g_widens_bf16.store(widened ? int(*widened) : int(bf16_rule()), std::memory_order_relaxed);
}

int64_t gemm_widened_bytes(const GemmShape& s, bool bf16, int threads, bool out16) {
  const auto tiles = bf16 ? widening(s, out16, std::max(1, threads)) : std::nullopt;
  return tiles ? int64_t(sizeof(float)) * tiles->elements() : 0;
}

GemmIsa gemm_isa() {
  // oneDNN's ISA values are bit masks, each holding the bits of the ISAs it extends.
  const unsigned isa = unsigned(dnnl::get_effective_cpu_isa());
  auto has = [&](dnnl::cpu_isa level) { return (isa & unsigned(level)) == unsigned(level); };
  if (has(dnnl::cpu_isa::avx512_core_amx)) return GemmIsa::amx;
  if (has(dnnl::cpu_isa::avx512_core_bf16)) return GemmIsa::avx512_core_bf16;
  if (has(dnnl::cpu_isa::avx512_core)) return GemmIsa::avx512_core;
  if (has(dnnl::cpu_isa::avx2)) return GemmIsa::avx2;
  return GemmIsa::sse41;
}

int64_t gemm_cached_primitives() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return int64_t(cache().size());
}

}  // namespace lattice
