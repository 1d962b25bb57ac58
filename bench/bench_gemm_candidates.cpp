// GEMM candidates at the exact GEMM shapes of one lattice training step of the GPT-2-small shape
// (12 layers, h 768, 12 heads, s 256, micro-batch 4 -> N = 1024 tokens, vocab 8192, recompute none):
// the forward, data-gradient and weight-gradient GEMMs of QKV, proj, fc1, fc2 and the LM head, with the
// transposes and accumulation lattice uses (src/kernels/linear.cpp, src/model/gpt.cpp), and the batched
// attention GEMMs (b·a = 48 batches, src/model/attention.cpp). Candidates, all in one run:
//   onednn-f32   lattice's gemm() (oneDNN matmul in per-thread parts as a step runs it; LATTICE_GEMM=whole in
//                the environment measures one oneDNN-threaded primitive instead), fp32 operands
//   onednn-bf16  lattice's gemm() with bf16 operands, fp32 accumulate (as lattice's bf16 activations call it)
//   blis         BLIS bli_sgemm (Debian's libblis-dev, OpenMP build), BLIS threaded to --threads;
//                batched cases loop over the batch, one threaded GEMM each; kernel set skx (AVX-512) unless
//                BLIS_ARCH_TYPE says otherwise (its auto-detection gives "generic" on this AMD family 0x1A CPU)
//   blis-bpar    batched cases only: the batch split over the threads, one single-threaded BLIS GEMM each
//   mine         a small packed AVX-512 fp32 GEMM of this file (8x32 microkernel; columns split over
//                threads, or the batch for batched cases), where M % 8 == 0 and N % 32 == 0
// Each candidate is checked against a naive double-precision reference on small cases of every
// transpose/accumulate/batch combination (max relative error printed), and at the real shapes against
// onednn-f32. Timings: every repetition runs the candidates one after another (rotating the order), the
// figure is the median over repetitions; GFLOP/s per shape and candidate, and the GEMM time of one step
// (each shape x its count per step). The fp32 peak is measured with lattice bench's FMA-throughput loop
// on the threads.
// One file past ~400 lines on purpose: the candidate kernel, its checks and the timing belong together
// and nothing else uses them.
//
// Run (serialised with the other benchmarks):
//   flock /tmp/lattice-bench.lock build/bench/bench_gemm_candidates [--threads 2] [--reps 11] [--summary]
// --summary prints only the per-step totals and the per-shape rates of onednn-f32/bf16 and the best
// fp32 candidate (fewer repetitions); bench/speed.sh runs it after its table.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench_util.hpp"
#include "blis.h"
#include "core/machine_peak.hpp"
#include "kernels/gemm.hpp"
#include "tensor/bf16.hpp"

namespace {

using namespace lattice;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---------------------------------------------------------------------------------------------------
// The shapes. C[M,N] (+)= alpha · op(A) · op(B), A stored [M,K] ([K,M] if ta), B stored [K,N] ([N,K] if tb).
struct Case {
  std::string name;
  int64_t batch, M, N, K;
  bool ta, tb, acc;
  float alpha;
  int per_step;  // how many times one training step runs it
  double flops() const { return 2.0 * double(batch) * double(M) * double(N) * double(K); }
};

std::vector<Case> step_cases() {
  constexpr int64_t N = 1024, h = 768, V = 8192, BA = 48, s = 256, dh = 64;
  constexpr int L = 12;
  const float sc = 1.0f / std::sqrt(float(dh));
  std::vector<Case> c;
  struct Lin {
    const char* name;
    int64_t in, out;
  };
  for (const Lin& l : {Lin{"qkv", h, 3 * h}, Lin{"proj", h, h}, Lin{"fc1", h, 4 * h}, Lin{"fc2", 4 * h, h}}) {
    const std::string n = l.name;
    c.push_back({n + " fwd", 1, N, l.out, l.in, false, false, false, 1.0f, L});     // y = x·W
    c.push_back({n + " dX", 1, N, l.in, l.out, false, true, false, 1.0f, L});       // dx = dy·Wᵀ
    c.push_back({n + " dW", 1, l.in, l.out, N, true, false, true, 1.0f, L});        // dW += xᵀ·dy
  }
  c.push_back({"head fwd", 1, N, V, h, false, true, false, 1.0f, 1});   // logits = x·wteᵀ
  c.push_back({"head dX", 1, N, h, V, false, false, false, 1.0f, 1});   // dx = dlogits·wte
  c.push_back({"head dW", 1, V, h, N, true, false, true, 1.0f, 1});     // dwte += dlogitsᵀ·x
  c.push_back({"att QK^T", BA, s, s, dh, false, true, false, sc, L});   // scores = Q·Kᵀ/√d
  c.push_back({"att PV", BA, s, dh, s, false, false, false, 1.0f, L});  // ctx = P·V
  c.push_back({"att dP", BA, s, s, dh, false, true, false, 1.0f, L});   // dP = dctx·Vᵀ
  c.push_back({"att dV", BA, s, dh, s, true, false, false, 1.0f, L});   // dV = Pᵀ·dctx
  c.push_back({"att dQ", BA, s, dh, s, false, false, false, sc, L});    // dQ = dS·K/√d
  c.push_back({"att dK", BA, s, dh, s, true, false, false, sc, L});     // dK = dSᵀ·Q/√d
  return c;
}

// Element strides of op(A) [M,K] and op(B) [K,N] for a matrix of the batch.
struct Strides {
  int64_t rsa, csa, rsb, csb;
};
Strides strides_of(const Case& c) {
  Strides s;
  if (c.ta) s.rsa = 1, s.csa = c.M;
  else s.rsa = c.K, s.csa = 1;
  if (c.tb) s.rsb = 1, s.csb = c.K;
  else s.rsb = c.N, s.csb = 1;
  return s;
}

// Operands of one case: fp32 and their bf16 copies.
struct Operands {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
};
Operands make_operands(const Case& c, uint32_t seed) {
  Operands o;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  o.a.resize(size_t(c.batch * c.M * c.K));
  o.b.resize(size_t(c.batch * c.K * c.N));
  o.c.assign(size_t(c.batch * c.M * c.N), 0.0f);
  for (auto& x : o.a) x = d(rng);
  for (auto& x : o.b) x = d(rng);
  o.a16.resize(o.a.size());
  o.b16.resize(o.b.size());
  to_bf16(o.a.data(), o.a16.data(), int64_t(o.a.size()));
  to_bf16(o.b.data(), o.b16.data(), int64_t(o.b.size()));
  return o;
}

// ---------------------------------------------------------------------------------------------------
// Candidates.
GemmShape lattice_shape(const Case& c) {
  GemmShape s;
  s.batch = c.batch, s.M = c.M, s.N = c.N, s.K = c.K;
  s.trans_a = c.ta, s.trans_b = c.tb, s.alpha = c.alpha, s.accumulate = c.acc;
  return s;
}
void run_onednn_f32(const Case& c, Operands& o) {
  gemm(lattice_shape(c), f32_operand(o.a.data()), f32_operand(o.b.data()), o.c.data());
}
void run_onednn_bf16(const Case& c, Operands& o) {
  gemm(lattice_shape(c), {o.a16.data(), DType::bf16}, {o.b16.data(), DType::bf16}, o.c.data());
}

void blis_one(const Case& c, const Strides& st, const float* a, const float* b, float* cc, rntm_t* rntm) {
  float alpha = c.alpha, beta = c.acc ? 1.0f : 0.0f;
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, c.M, c.N, c.K, &alpha, const_cast<float*>(a), st.rsa, st.csa,
               const_cast<float*>(b), st.rsb, st.csb, &beta, cc, c.N, 1, nullptr, rntm);
}
void run_blis(const Case& c, Operands& o) {
  const Strides st = strides_of(c);
  for (int64_t i = 0; i < c.batch; ++i)
    blis_one(c, st, o.a.data() + i * c.M * c.K, o.b.data() + i * c.K * c.N, o.c.data() + i * c.M * c.N, nullptr);
}
void run_blis_bpar(const Case& c, Operands& o) {
  const Strides st = strides_of(c);
#pragma omp parallel
  {
    rntm_t rntm;
    bli_rntm_init(&rntm);
    bli_rntm_set_num_threads(1, &rntm);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < c.batch; ++i)
      blis_one(c, st, o.a.data() + i * c.M * c.K, o.b.data() + i * c.K * c.N, o.c.data() + i * c.M * c.N, &rntm);
  }
}

// --- mine: a packed fp32 GEMM with an 8x32 AVX-512 microkernel (16 zmm accumulators). ---------------
constexpr int64_t kMR = 8, kNR = 32, kKC = 192, kMC = 128;

// c[8,32] (+)= alpha · a_panel[kc][8] · b_panel[kc][32]; add = C already holds a partial sum or beta = 1.
inline void micro_8x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha, bool add) {
  __m512 acc[kMR][2];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(ar, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(ar, b1, acc[r][1]);
    }
    a += kMR;
    b += kNR;
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(va, acc[r][0]), v1 = _mm512_mul_ps(va, acc[r][1]);
    if (add) v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cr)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cr + 16));
    _mm512_storeu_ps(cr, v0);
    _mm512_storeu_ps(cr + 16, v1);
  }
}

// One thread: C[M, j0:j1] of one matrix, Goto-style loops (B block packed per KC, A block per MC).
void mine_block(const Case& c, const Strides& st, const float* A, const float* B, float* C, int64_t j0, int64_t j1,
                std::vector<float>& ap, std::vector<float>& bp) {
  const int64_t nc = j1 - j0;
  bp.resize(size_t(kKC * nc));
  ap.resize(size_t(kKC * kMC));
  for (int64_t pc = 0; pc < c.K; pc += kKC) {
    const int64_t kc = std::min(kKC, c.K - pc);
    for (int64_t jp = 0; jp < nc; jp += kNR) {  // B panel [kc][32] per 32 columns
      float* dst = bp.data() + jp * kc;
      const float* src = B + pc * st.rsb + (j0 + jp) * st.csb;
      if (st.csb == 1) {
        for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * kNR, src + k * st.rsb, kNR * sizeof(float));
      } else {
        for (int64_t j = 0; j < kNR; ++j)
          for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = src[j * st.csb + k * st.rsb];
      }
    }
    for (int64_t ic = 0; ic < c.M; ic += kMC) {
      const int64_t mc = std::min(kMC, c.M - ic);
      for (int64_t ip = 0; ip < mc; ip += kMR) {  // A panel [kc][8] per 8 rows
        float* dst = ap.data() + ip * kc;
        const float* src = A + (ic + ip) * st.rsa + pc * st.csa;
        if (st.rsa == 1) {
          for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * kMR, src + k * st.csa, kMR * sizeof(float));
        } else {
          for (int64_t r = 0; r < kMR; ++r)
            for (int64_t k = 0; k < kc; ++k) dst[k * kMR + r] = src[r * st.rsa + k * st.csa];
        }
      }
      const bool add = pc > 0 || c.acc;
      for (int64_t jp = 0; jp < nc; jp += kNR)
        for (int64_t ip = 0; ip < mc; ip += kMR)
          micro_8x32(kc, ap.data() + ip * kc, bp.data() + jp * kc, C + (ic + ip) * c.N + j0 + jp, c.N, c.alpha, add);
    }
  }
}

bool mine_supports(const Case& c) { return c.M % kMR == 0 && c.N % kNR == 0; }

void run_mine(const Case& c, Operands& o) {
  const Strides st = strides_of(c);
#pragma omp parallel
  {
    static thread_local std::vector<float> ap, bp;
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (c.batch > 1) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < c.batch; ++i)
        mine_block(c, st, o.a.data() + i * c.M * c.K, o.b.data() + i * c.K * c.N, o.c.data() + i * c.M * c.N, 0,
                   c.N, ap, bp);
    } else {
      const int64_t panels = c.N / kNR, p0 = panels * t / nt, p1 = panels * (t + 1) / nt;
      if (p1 > p0) mine_block(c, st, o.a.data(), o.b.data(), o.c.data(), p0 * kNR, p1 * kNR, ap, bp);
    }
  }
}

struct Candidate {
  const char* name;
  void (*run)(const Case&, Operands&);
  bool (*applies)(const Case&);
  bool fp32;
};
bool always(const Case&) { return true; }
bool batched(const Case& c) { return c.batch > 1; }

const std::vector<Candidate>& candidates() {
  static const std::vector<Candidate> c = {
      {"onednn-f32", run_onednn_f32, always, true},
      {"onednn-bf16", run_onednn_bf16, always, false},
      {"blis", run_blis, always, true},
      {"blis-bpar", run_blis_bpar, batched, true},
      {"mine", run_mine, mine_supports, true},
  };
  return c;
}

// ---------------------------------------------------------------------------------------------------
// Correctness: max |C - C_ref| / max |C_ref| against a naive double reference (C starts from a pattern so
// accumulate is checked as well).
std::vector<double> naive(const Case& c, const std::vector<float>& a, const std::vector<float>& b,
                          const std::vector<float>& c0) {
  const Strides st = strides_of(c);
  std::vector<double> r(c0.size());
  for (int64_t i = 0; i < c.batch; ++i)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < c.K; ++k)
          s += double(a[size_t(i * c.M * c.K + m * st.rsa + k * st.csa)]) *
               double(b[size_t(i * c.K * c.N + k * st.rsb + n * st.csb)]);
        const size_t ci = size_t(i * c.M * c.N + m * c.N + n);
        r[ci] = double(c.alpha) * s + (c.acc ? double(c0[ci]) : 0.0);
      }
  return r;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::fabs(double(got[i]) - want[i]));
    m = std::max(m, std::fabs(want[i]));
  }
  return m > 0 ? e / m : e;
}

// Returns false if an fp32 candidate is off by more than 1e-5 (bf16: 2e-2) on a small case.
bool verify_small(bool print) {
  bool ok = true;
  double worst[8] = {};
  int seed = 7;
  for (int64_t batch : {1, 3})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc) {
          // M, N multiples of 8 and 32 so that mine is checked too; K not a multiple of its block.
          Case c{"small", batch, 24, 64, 211, ta != 0, tb != 0, acc != 0, acc ? 1.0f : 0.125f, 1};
          Operands o = make_operands(c, uint32_t(seed++));
          std::vector<float> c0(o.c.size());
          for (size_t i = 0; i < c0.size(); ++i) c0[i] = float(int(i % 13) - 6) * 0.5f;
          const auto want = naive(c, o.a, o.b, c0);
          // bf16 reference: the operands rounded to bf16, then exact.
          std::vector<float> a16(o.a.size()), b16(o.b.size());
          from_bf16(o.a16.data(), a16.data(), int64_t(a16.size()));
          from_bf16(o.b16.data(), b16.data(), int64_t(b16.size()));
          const auto want16 = naive(c, a16, b16, c0);
          const auto& cs = candidates();
          for (size_t k = 0; k < cs.size(); ++k) {
            if (!cs[k].applies(c)) continue;
            o.c = c0;
            cs[k].run(c, o);
            const double e = rel_err(o.c, cs[k].fp32 ? want : want16);
            worst[k] = std::max(worst[k], e);
            if (e > (cs[k].fp32 ? 1e-5 : 1e-4)) {
              std::printf("FAIL %s batch %ld ta %d tb %d acc %d: rel err %.3g\n", cs[k].name, long(batch), ta, tb, acc,
                          e);
              ok = false;
            }
          }
        }
  if (print) {
    std::printf("check vs naive double reference (24x64x211, batch 1 and 3, all ta/tb/accumulate; bf16 against "
                "the bf16-rounded operands), max rel err:");
    for (size_t k = 0; k < candidates().size(); ++k) std::printf("  %s %.1e", candidates()[k].name, worst[k]);
    std::printf("\n");
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------------
// Peak: FMA throughput on the threads, lattice bench's loop (core/machine_peak.hpp), in GFLOP/s.
double measure_peak_gflops(int threads) { return lattice::measure_fma_fp32_flops(threads) / 1e9; }

double cpuinfo_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 11;
  bool summary = false, check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--summary") summary = true;
    else if (a == "--check") check_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--threads T] [--reps R] [--summary] [--check]\n", argv[0]);
      return 2;
    }
  }
  if (summary && reps == 11) reps = 5;
  if (!gemm_split_env_valid()) {  // as lattice refuses it: a misspelt A/B switch is not the default
    std::fprintf(stderr, "%s: LATTICE_GEMM=%s is neither whole nor parts\n", argv[0], std::getenv("LATTICE_GEMM"));
    return 1;
  }
  omp_set_num_threads(threads);
  bli_thread_set_num_threads(threads);

  // Debian's BLIS 0.9.0 does not recognise this CPU (AMD family 0x1A) and would run its generic reference
  // kernels; unless BLIS_ARCH_TYPE is set, use its Skylake-X (AVX-512) kernel set (arch id 0). BLIS reads
  // the variable when the library is loaded, so the program runs itself again with it set.
  if (!std::getenv("BLIS_ARCH_TYPE")) {
    setenv("BLIS_ARCH_TYPE", "0", 1);
    execv("/proc/self/exe", argv);
    std::perror("bench_gemm_candidates: execv");
    return 1;
  }
  const bool ok = verify_small(!summary);
  if (!ok) return 1;
  if (check_only) {
    std::printf("BLIS kernel set %s\n", bli_arch_string(bli_arch_query_id()));
    return 0;
  }
  const double peak = measure_peak_gflops(threads), mhz = cpuinfo_mhz();
  if (!summary) {
    std::printf("BLIS %s, kernel set %s; %d threads; %d interleaved repetitions, medians\n", bli_info_get_version_str(),
                bli_arch_string(bli_arch_query_id()), threads, reps);
    std::printf("fp32 peak: measured FMA throughput %.0f GFLOP/s on %d threads (%.0f FLOP/cycle/core at the "
                "/proc/cpuinfo clock %.0f MHz); the formula %d cores x 2 FMA x 16 lanes x 2 x %.0f MHz = %.0f\n",
                peak, threads, peak * 1e3 / threads / mhz, mhz, threads, mhz, threads * 64.0 * mhz / 1e3);
  }

  const auto cases = step_cases();
  const auto& cs = candidates();
  const size_t nc = cs.size();
  std::vector<std::vector<double>> med(cases.size(), std::vector<double>(nc, 0.0));  // seconds per call; 0 = n/a
  std::vector<std::vector<double>> err(cases.size(), std::vector<double>(nc, 0.0));
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    Operands o = make_operands(c, uint32_t(100 + ci));
    // Real-shape check against onednn-f32 (C = result, no accumulate, so the outputs are comparable).
    Case fresh = c;
    fresh.acc = false;
    run_onednn_f32(fresh, o);
    std::vector<double> ref(o.c.begin(), o.c.end());
    for (size_t k = 1; k < nc; ++k) {
      if (!cs[k].applies(c)) continue;
      std::fill(o.c.begin(), o.c.end(), 0.0f);
      cs[k].run(fresh, o);
      err[ci][k] = rel_err(o.c, ref);
    }
    // Calls per timing so that one timing lasts >= ~3 ms (accumulating cases drift C; harmless).
    auto t0 = Clock::now();
    run_onednn_f32(c, o);
    const int calls = std::max(1, int(std::ceil(3e-3 / std::max(seconds_since(t0), 1e-6))));
    for (size_t k = 0; k < nc; ++k)
      if (cs[k].applies(c)) cs[k].run(c, o);  // warm-up (primitive creation, page faults)
    std::vector<std::vector<double>> times(nc);
    for (int r = 0; r < reps; ++r)
      for (size_t j = 0; j < nc; ++j) {
        const size_t k = (j + size_t(r)) % nc;
        if (!cs[k].applies(c)) continue;
        t0 = Clock::now();
        for (int i = 0; i < calls; ++i) cs[k].run(c, o);
        times[k].push_back(seconds_since(t0) / calls);
      }
    for (size_t k = 0; k < nc; ++k)
      if (!times[k].empty()) med[ci][k] = lattice::bench::median(times[k]);
  }

  auto gf = [&](size_t ci, size_t k) { return med[ci][k] > 0 ? cases[ci].flops() / med[ci][k] / 1e9 : 0.0; };
  if (!summary) {
    std::printf("\nGFLOP/s per shape (batch x M x N x K, op(A)/op(B) transposed: T), median of %d; x = runs per step\n",
                reps);
    std::printf("%-10s %-22s %4s", "shape", "batch x M x N x K", "x");
    for (const auto& k : cs) std::printf("%13s", k.name);
    std::printf("  best fp32  | rel err vs onednn-f32 (bf16, blis, bpar, mine)\n");
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      char dims[64];
      std::snprintf(dims, sizeof dims, "%ldx%ldx%ldx%ld %s%s%s", long(c.batch), long(c.M), long(c.N), long(c.K),
                    c.ta ? "T" : "N", c.tb ? "T" : "N", c.acc ? "+" : "");
      std::printf("%-10s %-22s %4d", c.name.c_str(), dims, c.per_step);
      size_t best = 0;
      for (size_t k = 0; k < nc; ++k) {
        if (med[ci][k] > 0) std::printf("%13.1f", gf(ci, k));
        else std::printf("%13s", "-");
        if (cs[k].fp32 && med[ci][k] > 0 && med[ci][k] < med[ci][best]) best = k;
      }
      std::printf("  %-11s|", cs[best].name);
      for (size_t k = 1; k < nc; ++k)
        if (med[ci][k] > 0) std::printf(" %.0e", err[ci][k]);
        else std::printf(" -");
      std::printf("\n");
    }
  }

  // One step's GEMM time per candidate (shapes it cannot run: counted at onednn-f32's time, marked *).
  double total_flops = 0, best_fp32 = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    total_flops += cases[ci].flops() * cases[ci].per_step;
    double b = 1e30;
    for (size_t k = 0; k < nc; ++k)
      if (cs[k].fp32 && med[ci][k] > 0) b = std::min(b, med[ci][k]);
    best_fp32 += b * cases[ci].per_step;
  }
  std::printf("\nGEMM time of one training step (%.0f GFLOP of GEMMs; %d threads; fp32 peak measured %.0f GFLOP/s):\n",
              total_flops / 1e9, threads, peak);
  for (size_t k = 0; k < nc; ++k) {
    double t = 0;
    bool filled = false;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const double m = med[ci][k] > 0 ? med[ci][k] : med[ci][0];
      filled |= med[ci][k] == 0;
      t += m * cases[ci].per_step;
    }
    std::printf("  %-12s %7.3f s  %6.1f GFLOP/s%s\n", cs[k].name, t, total_flops / t / 1e9,
                filled ? "  (* shapes it does not run counted at onednn-f32's time)" : "");
  }
  std::printf("  %-12s %7.3f s  %6.1f GFLOP/s  (fastest fp32 candidate per shape)\n", "best fp32", best_fp32,
              total_flops / best_fp32 / 1e9);
  if (summary) {
    std::printf("per shape GFLOP/s (onednn-f32 / onednn-bf16 / best fp32 = candidate):");
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      size_t best = 0;
      for (size_t k = 0; k < nc; ++k)
        if (cs[k].fp32 && med[ci][k] > 0 && med[ci][k] < med[ci][best]) best = k;
      std::printf("%s %s %.0f/%.0f/%.0f=%s", ci % 4 == 0 ? "\n " : ";", cases[ci].name.c_str(), gf(ci, 0), gf(ci, 1),
                  gf(ci, best), cs[best].name);
    }
    std::printf("\n");
  }
  return 0;
}
