// cuBLASLt GEMMs with kernels/gemm.hpp's row-major contract (cuda/gemm.hpp): the plans (descriptors
// and the algorithms offered, cached per key), the tuner that picks among them, and the calls. Past the
// usual length on purpose: the three share the Plan and its descriptors, which stay private to this file.
#include <cublasLt.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/env_switch.hpp"
#include "cuda/common.cuh"
#include "cuda/gemm.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLASLt: ") + what + ": " + cublasLtGetStatusName(st) + " (" +
                             cublasLtGetStatusString(st) + ")");
}

// The largest power of two (at most 256) dividing the address: cuBLASLt's algorithms need aligned
// operands, and the heuristic is told the alignment it may assume.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

struct Key {
  int64_t batch, M, N, K;
  bool ta, tb, acc, bias, bf16;
  GemmMath math;
  uint32_t align_a, align_b, align_c, align_bias;
  bool out16 = false;  // D as bf16 (gemm_bf16_out)
  GemmContext::Epilogue16 epi16 = GemmContext::Epilogue16::bias;  // a bf16 D's epilogue
  uint32_t align_aux = 256;
  auto tie() const {
    return std::tie(batch, M, N, K, ta, tb, acc, bias, bf16, math, align_a, align_b, align_c, align_bias, out16, epi16,
                    align_aux);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// A chosen algorithm and the descriptors it was chosen for (destroyed with the context).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo{};                // the one the calls take
  std::vector<cublasLtMatmulAlgo_t> offered;  // the heuristic's, its first first (the tuner's candidates)
  bool tuned = false;                         // the tuner has decided (or will not try)
  int tries = 0;                              // calls whose output moved too few words to tell orders apart
  bool bias_epilogue = false;
  bool aux_epilogue = false;  // the GeLU's input matrix (written or read) set per call
  bool usable = true;  // false: cuBLASLt offered none (a bf16 D's key, remembered so it is asked once)
};

void destroy(Plan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  p = Plan{};
}

// A column-major layout of `rows` × `cols` with leading dimension ld, `batch` matrices `stride` apart.
cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  lt_check(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld), "matrix layout");
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
             "batch count");
    lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                              sizeof(stride)),
             "batch stride");
  }
  return l;
}

// A key as the tuner's records name it: "bf16 NT 1x8192x768x2304 bias bf16-D" (batch × M × N × K).
std::string describe(const Key& k) {
  std::string d = std::string(k.bf16 ? "bf16 " : k.math == GemmMath::tf32 ? "tf32 " : "f32 ") + (k.ta ? "T" : "N") +
                  (k.tb ? "T" : "N") + " " + std::to_string(k.batch) + "x" + std::to_string(k.M) + "x" +
                  std::to_string(k.N) + "x" + std::to_string(k.K);
  if (k.acc) d += " +=";
  if (k.bias) d += " bias";
  if (k.out16) d += " bf16-D";
  if (k.epi16 == GemmContext::Epilogue16::gelu) d += " gelu";
  if (k.epi16 == GemmContext::Epilogue16::dgelu) d += " dgelu";
  return d;
}

// LATTICE_CUDA_GEMM_TUNE: "0" off; "report" on, each decision a line on stderr (device-check's speed
// phase); anything else on.
void report(const GemmContext::Tuning& t) {
  if (env_value("LATTICE_CUDA_GEMM_TUNE") != "report") return;
  std::fprintf(stderr, "cuBLASLt tuner: %s: algorithm %d of %d offered (%d with the first's bits), %.3f -> %.3f ms\n",
               t.gemm.c_str(), t.chosen + 1, t.offered, t.same_bits, double(t.first_ms), double(t.chosen_ms));
}
void* malloc_borrow(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}
void malloc_give_back(void* p) { (void)cudaFree(p); }

// A device range [p, p + bytes): the tuner's outputs must not overlap its inputs (each candidate
// would read what the one before wrote).
struct Range {
  const void* p;
  size_t bytes;
  bool overlaps(const Range& o) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(o.p);
    return bytes && o.bytes && a < b + o.bytes && b < a + bytes;
  }
};

// What a call writes, for the tuner: D, and the GeLU's input matrix where the epilogue writes it.
struct Outputs {
  void* d = nullptr;
  size_t d_bytes = 0;
  void* aux = nullptr;  // written (GELU_AUX); a read aux (DGELU) is among the inputs
  size_t aux_bytes = 0;
  bool accumulate = false;  // D = C + …: C (= D) restored before each run
};

// How an algorithm splits K and sums the parts (cuBLASLt's SPLITK_NUM and REDUCTION_SCHEME); known
// false where the library does not say.
struct SplitOfK {
  bool known = false;
  int32_t parts = 0;    // SPLITK_NUM: int32_t
  uint32_t scheme = 0;  // REDUCTION_SCHEME: uint32_t
  bool operator==(const SplitOfK& o) const { return known && o.known && parts == o.parts && scheme == o.scheme; }
};
SplitOfK split_of_k(const cublasLtMatmulAlgo_t& algo) {
  SplitOfK r;
  size_t n = 0;
  r.known = cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &r.parts, sizeof(r.parts),
                                                 &n) == CUBLAS_STATUS_SUCCESS &&
            n == sizeof(r.parts) &&
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &r.scheme,
                                                 sizeof(r.scheme), &n) == CUBLAS_STATUS_SUCCESS &&
            n == sizeof(r.scheme);
  return r;
}

}  // namespace

struct GemmContext::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool owns_workspace = false;
  GemmMath math = GemmMath::fp32;
  bool last_bias_in_epilogue = false;
  bool tuning = env_switch_on("LATTICE_CUDA_GEMM_TUNE");
  GemmContext::Lender lender{malloc_borrow, malloc_give_back};
  std::vector<GemmContext::Tuning> tunings;
  mutable std::mutex mutex;
  std::map<Key, Plan> plans;

  ~Impl() {
    for (auto& [key, plan] : plans) destroy(plan);
    if (owns_workspace && workspace) cudaFree(workspace);
    if (handle) cublasLtDestroy(handle);
  }

  // Tries to choose an algorithm for `key`, with the bias epilogue or without; false if cuBLASLt's
  // heuristic offers none.
  bool choose(const Key& key, bool with_bias, const void* bias, Plan& p, const void* aux = nullptr) {
    const cudaDataType_t in = key.bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute =
        (!key.bf16 && key.math == GemmMath::tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    lt_check(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), "matmul descriptor");
    // cuBLASLt's first operand is our B, its second our A (Cᵀ = op(B)ᵀ·op(A)ᵀ, column-major).
    const cublasOperation_t op_first = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
             "transa");
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
             "transb");
    if (with_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "epilogue");
      lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
               "bias pointer");
      // A bf16 D's bias is bf16: the attribute's default (D's type), the one cuBLASLt takes.
    }
    if (key.epi16 != GemmContext::Epilogue16::bias) {  // the GeLU's input: a bf16 matrix laid out as D
      const cublasLtEpilogue_t epi = key.epi16 == GemmContext::Epilogue16::dgelu ? CUBLASLT_EPILOGUE_DGELU
                                     : with_bias   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                   : CUBLASLT_EPILOGUE_GELU_AUX;
      const int64_t ld = key.N;
      // An attribute this library refuses is a refusal of the epilogue, as the heuristic's is: the caller
      // makes the two calls.
      if (cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)) !=
              CUBLAS_STATUS_SUCCESS) {
        destroy(p);
        return false;
      }
      p.aux_epilogue = true;
    }
    // Our B: row-major [K, N] is column-major [N, K] (ld N); transposed, row-major [N, K] is column-major
    // [K, N] (ld K). Our A: row-major [M, K] is column-major [K, M] (ld K); transposed [K, M] is [M, K]
    // (ld M). D: column-major [N, M], ld N.
    p.a = key.tb ? layout(in, key.K, key.N, key.K, key.batch, key.K * key.N)
                 : layout(in, key.N, key.K, key.N, key.batch, key.K * key.N);
    p.b = key.ta ? layout(in, key.M, key.K, key.M, key.batch, key.M * key.K)
                 : layout(in, key.K, key.M, key.K, key.batch, key.M * key.K);
    p.c = layout(key.out16 ? CUDA_R_16BF : CUDA_R_32F, key.N, key.M, key.N, key.batch, key.M * key.N);

    cublasLtMatmulPreference_t pref = nullptr;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, size_t n, const char* what) {
      lt_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, v, n), what);
    };
    const uint64_t ws = workspace_bytes;
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws), "workspace preference");
    // The first operand is our B, the second our A.
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b, sizeof(uint32_t), "alignment A");
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a, sizeof(uint32_t), "alignment B");
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c, sizeof(uint32_t), "alignment C");
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c, sizeof(uint32_t), "alignment D");
    // The heuristic's one best (the algorithm the calls took before the tuner, and take without it),
    // then its ranking of up to kTuneCandidates for the tuner, the first left out where it repeats it.
    cublasLtMatmulHeuristicResult_t best{}, results[GemmContext::kTuneCandidates] = {};
    int found = 0, ranked = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &best, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found >= 1 && best.state == CUBLAS_STATUS_SUCCESS) {
      p.offered.push_back(best.algo);
      if (cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, GemmContext::kTuneCandidates,
                                         results, &ranked) != CUBLAS_STATUS_SUCCESS)
        ranked = 0;
      // Only candidates that split K as the first does and reduce the parts by its scheme: the same
      // order of sums is then a matter of tile shapes and schedules, which the bits on the tuning call
      // test (a bf16 D's bits show a changed order only in the few values near a rounding boundary).
      const SplitOfK first_split = split_of_k(best.algo);
      for (int i = 0; i < ranked && i < GemmContext::kTuneCandidates; ++i)
        if (results[i].state == CUBLAS_STATUS_SUCCESS &&
            std::memcmp(&results[i].algo, &best.algo, sizeof(best.algo)) != 0 && first_split.known &&
            split_of_k(results[i].algo) == first_split && int(p.offered.size()) < GemmContext::kTuneCandidates)
          p.offered.push_back(results[i].algo);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || p.offered.empty()) {
      destroy(p);
      // A bf16 D's key refused as an invalid value (an fp32 bias was, by cuBLASLt 13.0 on the H200,
      // 2026-11-27) is "none offered" too: the caller narrows the fp32 product. So is an fp32 D's bias
      // epilogue refused so: the plan is then chosen without it and the bias added after.
      const bool refused = st == CUBLAS_STATUS_NOT_SUPPORTED ||
                           ((key.out16 || with_bias) && st == CUBLAS_STATUS_INVALID_VALUE);
      if (st != CUBLAS_STATUS_SUCCESS && !refused) lt_check(st, "algorithm heuristic");
      return false;
    }
    p.algo = p.offered[0];
    p.bias_epilogue = with_bias;
    return true;
  }

  Plan& plan(const Key& key, const void* bias, const void* aux = nullptr) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p;
    if (key.out16) {  // the bias in the epilogue or not at all: added after, it would round twice
      if (!choose(key, key.bias, bias, p, aux)) p.usable = false;
      return plans.emplace(key, p).first->second;
    }
    if (!(key.bias && choose(key, true, bias, p)) && !choose(key, false, nullptr, p))
      throw std::runtime_error("cuBLASLt: no algorithm for GEMM " + std::to_string(key.batch) + "×[" +
                               std::to_string(key.M) + "×" + std::to_string(key.K) + "]·[" + std::to_string(key.K) +
                               "×" + std::to_string(key.N) + "]" + (key.bf16 ? " bf16" : " fp32"));
    return plans.emplace(key, p).first->second;
  }

  // The tuner (gemm.hpp): on the key's first call (or, where the output was mostly zeros, a later
  // one), the offered algorithms with the first one's bits timed on this call, the fastest kept in
  // p.algo. `run` launches the call with a given algorithm; `inputs` are the ranges it reads. On
  // return C holds what it held on entry (an accumulating call), so the call itself follows.
  template <class Run>
  void tune(const Key& key, Plan& p, const Outputs& out, std::initializer_list<Range> inputs, Run run,
            cudaStream_t stream) {
    if (p.tuned) return;
    auto keep_first = [&] {
      p.algo = p.offered[0];
      p.tuned = true;
    };
    if (!tuning || p.offered.size() < 2) return keep_first();
    // A bf16 D shows a changed order of sums only where a value lies within a few fp32 ulps of a bf16
    // rounding boundary, about 2^-16 of them an ulp of difference: below 2^21 values too few to count
    // on, so such a key keeps the first.
    if (key.out16 && out.d_bytes / 2 < (size_t(1) << 21)) return keep_first();
    const Range d{out.d, out.d_bytes}, aux{out.aux, out.aux_bytes};
    bool apart = !d.overlaps(aux) && reinterpret_cast<uintptr_t>(out.d) % 4 == 0 &&
                 reinterpret_cast<uintptr_t>(out.aux) % 4 == 0;
    for (const Range& in : inputs) apart = apart && !in.overlaps(d) && !in.overlaps(aux);
    if (!apart || workspace_bytes < bits_fingerprint_workspace_bytes()) return keep_first();
    void* copy = nullptr;
    if (out.accumulate && !(copy = lender.borrow(out.d_bytes))) return keep_first();
    struct GiveBack {
      GemmContext::Lender lender;
      void* p;
      ~GiveBack() {
        if (p) lender.give_back(p);
      }
    } give_back{lender, copy};
    bool copied = false;  // C is in the copy: restore() may run
    auto restore = [&] {
      if (copied && cudaMemcpyAsync(out.d, copy, out.d_bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
        throw std::runtime_error("cuBLASLt tuner: C not restored");
    };
    size_t chosen = 0;
    try {
      if (copy) {
        if (cudaMemcpyAsync(copy, out.d, out.d_bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
          throw std::runtime_error("C's copy");
        copied = true;
      }
      const Workspace ws{workspace, workspace_bytes};
      // D's words moved from C (an accumulating call's) or from 0, and the written aux matrix's from 0.
      using Prints = std::pair<BitsFingerprint, BitsFingerprint>;
      auto prints = [&] {
        return Prints{bits_fingerprint(out.d, out.d_bytes, ws, stream, copy),
                      out.aux ? bits_fingerprint(out.aux, out.aux_bytes, ws, stream) : BitsFingerprint{}};
      };
      // Each offered algorithm once (the warm run too), its bits against the first's.
      std::vector<size_t> same;
      Prints first;
      for (size_t i = 0; i < p.offered.size(); ++i) {
        restore();
        if (run(p.offered[i]) != CUBLAS_STATUS_SUCCESS) {
          (void)cudaGetLastError();
          if (i == 0) throw std::runtime_error("the first algorithm refused");
          continue;
        }
        const Prints f = prints();
        if (i == 0) {
          first = f;
          // Most words of D zero, or (accumulating) left as C had them: the product moved too little
          // to tell one order of its sums from another.
          if (2 * first.first.moved_words < out.d_bytes / 4) {
            restore();
            if (++p.tries >= 3) keep_first();
            return;
          }
        }
        if (f == first) same.push_back(i);
      }
      std::vector<float> best(same.size(), 1e30f);
      if (same.size() > 1) {
        std::vector<cudaEvent_t> ev(2 * same.size(), nullptr);
        struct Events {
          std::vector<cudaEvent_t>& e;
          ~Events() {
            for (auto x : e)
              if (x) (void)cudaEventDestroy(x);
          }
        } events{ev};
        for (auto& e : ev)
          if (cudaEventCreate(&e) != cudaSuccess) throw std::runtime_error("events");
        for (int round = 0; round < 3; ++round) {
          for (size_t k = 0; k < same.size(); ++k) {
            restore();
            if (cudaEventRecord(ev[2 * k], stream) != cudaSuccess || run(p.offered[same[k]]) != CUBLAS_STATUS_SUCCESS ||
                cudaEventRecord(ev[2 * k + 1], stream) != cudaSuccess)
              throw std::runtime_error("a timed run");
          }
          if (cudaEventSynchronize(ev.back()) != cudaSuccess) throw std::runtime_error("timing");
          for (size_t k = 0; k < same.size(); ++k) {
            float ms = 0.0f;
            if (cudaEventElapsedTime(&ms, ev[2 * k], ev[2 * k + 1]) != cudaSuccess) throw std::runtime_error("timing");
            best[k] = std::min(best[k], ms);
          }
        }
        size_t kept = 0;
        for (size_t k = 1; k < same.size(); ++k)
          if (best[k] < best[kept]) kept = k;
        chosen = same[kept];
        tunings.push_back({describe(key), int(p.offered.size()), int(same.size()), int(chosen), best[0], best[kept]});
      } else {
        tunings.push_back({describe(key), int(p.offered.size()), 1, 0, 0.0f, 0.0f});
      }
      report(tunings.back());
      restore();
    } catch (const std::exception& e) {  // the heuristic's first, untimed; C as it was
      // An error a later call would meet anyway (the context's, which no call clears) is the caller's:
      // thrown with what the tuner met. Another (an algorithm refused) is cleared, and C put back.
      (void)cudaGetLastError();
      const bool context_lost = cudaStreamSynchronize(stream) != cudaSuccess;
      if (context_lost) throw std::runtime_error(std::string("cuBLASLt tuner: ") + e.what());
      chosen = 0;
      restore();
    }
    p.algo = p.offered[chosen];
    p.tuned = true;
  }
};

GemmContext::GemmContext(Workspace workspace, GemmMath math) : impl_(std::make_unique<Impl>()) {
  impl_->math = math;
  lt_check(cublasLtCreate(&impl_->handle), "cublasLtCreate");
  impl_->workspace_bytes = workspace.bytes;
  if (workspace.data) {
    impl_->workspace = workspace.data;
  } else if (workspace.bytes > 0) {
    check(cudaMalloc(&impl_->workspace, workspace.bytes), "GemmContext workspace");
    impl_->owns_workspace = true;
  }
}

GemmContext::~GemmContext() = default;

size_t GemmContext::workspace_bytes() const { return impl_->workspace_bytes; }
GemmMath GemmContext::math() const { return impl_->math; }
void GemmContext::set_math(GemmMath math) { impl_->math = math; }
int64_t GemmContext::cached_plans() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return int64_t(impl_->plans.size());
}
bool GemmContext::last_bias_in_epilogue() const { return impl_->last_bias_in_epilogue; }
std::vector<GemmContext::Tuning> GemmContext::tunings() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->tunings;
}
bool GemmContext::tuning() const { return impl_->tuning; }
void GemmContext::set_tuning(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->tuning = on;
}
void GemmContext::set_lender(Lender lender) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (lender.borrow && lender.give_back) impl_->lender = lender;
  else impl_->lender = {malloc_borrow, malloc_give_back};
}

namespace {
void check_gemm_args(const GemmShape& s, GemmOperand a, GemmOperand b, const void* bias) {
  if (a.dtype != b.dtype) throw std::logic_error("cuda::gemm: A and B must share a dtype");
  if (a.dtype != DType::fp32 && a.dtype != DType::bf16) throw std::logic_error("cuda::gemm: A and B fp32 or bf16");
  if (bias && s.alpha != 1.0f)
    throw std::logic_error("cuda::gemm: alpha != 1 with a bias is not supported (cuda/gemm.hpp)");
  if (s.batch < 1 || s.M < 0 || s.N < 0 || s.K < 0) throw std::logic_error("cuda::gemm: bad shape");
  if (s.M > INT32_MAX || s.N > INT32_MAX || s.K > INT32_MAX || s.batch > INT32_MAX)
    throw std::logic_error("cuda::gemm: a dimension past 2^31");
}
// The bytes a call's operands span (A, B, D of `d_size`-byte elements, the bias: N of D's type).
struct Sizes {
  size_t a, b, c, bias;
};
Sizes sizes_of(const GemmShape& s, DType in, size_t d_size) {
  const size_t e = in == DType::bf16 ? 2 : 4, batch = size_t(s.batch);
  return {batch * size_t(s.M) * size_t(s.K) * e, batch * size_t(s.K) * size_t(s.N) * e,
          batch * size_t(s.M) * size_t(s.N) * d_size, size_t(s.N) * d_size};
}
// A call's key: its shape and flags, the math (fp32 for bf16 operands whatever the switch says), the
// pointers' alignment, and whether D is bf16.
Key key_of(const GemmShape& s, GemmOperand a, GemmOperand b, const void* c, const void* bias, GemmMath math,
           bool out16) {
  const bool bf16 = a.dtype == DType::bf16;
  Key key{s.batch,
          s.M,
          s.N,
          s.K,
          s.trans_a,
          s.trans_b,
          s.accumulate,
          bias != nullptr,
          bf16,
          bf16 ? GemmMath::fp32 : math,
          alignment_of(a.ptr),
          alignment_of(b.ptr),
          alignment_of(c),
          bias ? alignment_of(bias) : 256u};
  key.out16 = out16;
  return key;
}
}  // namespace

void GemmContext::gemm(const GemmShape& s, GemmOperand a, GemmOperand b, float* c, const float* bias,
                       cudaStream_t stream) {
  check_gemm_args(s, a, b, bias);
  if (s.M == 0 || s.N == 0) return;
  const float beta = s.accumulate ? 1.0f : 0.0f;
  if (s.K == 0) {  // an empty sum: C = beta·C + bias, which cuBLASLt may not take
    if (!s.accumulate) check(cudaMemsetAsync(c, 0, size_t(s.batch * s.M * s.N) * sizeof(float), stream), "gemm K=0");
    if (bias) bias_add_rows(c, bias, s.batch * s.M, s.N, stream);
    return;
  }
  const Key key = key_of(s, a, b, c, bias, impl_->math, false);
  std::lock_guard<std::mutex> lock(impl_->mutex);  // the cached descriptor's bias pointer is set per call
  Plan& p = impl_->plan(key, bias);
  if (p.bias_epilogue)
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  const float alpha = s.alpha;
  // cuBLASLt's A is our B and its B our A.
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(impl_->handle, p.desc, &alpha, b.ptr, p.a, a.ptr, p.b, &beta, c, p.c, c, p.c, &algo,
                          impl_->workspace, impl_->workspace_bytes, stream);
  };
  const Sizes z = sizes_of(s, a.dtype, 4);
  impl_->tune(key, p, {c, z.c, nullptr, 0, s.accumulate}, {{a.ptr, z.a}, {b.ptr, z.b}, {bias, bias ? z.bias : 0}},
              run, stream);
  lt_check(run(p.algo), "cublasLtMatmul");
  if (bias && !p.bias_epilogue) bias_add_rows(c, bias, s.batch * s.M, s.N, stream);
  impl_->last_bias_in_epilogue = p.bias_epilogue;
}

bool GemmContext::gemm_bf16_out(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* c,
                                const uint16_t* bias, cudaStream_t stream) {
  return run_bf16_out(s, Epilogue16::bias, a, b, c, bias, nullptr, stream);
}
bool GemmContext::gemm_bf16_gelu(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* act16, uint16_t* pre16,
                                 const uint16_t* bias16, cudaStream_t stream) {
  return run_bf16_out(s, Epilogue16::gelu, a, b, act16, bias16, pre16, stream);
}
bool GemmContext::gemm_bf16_dgelu(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* g16,
                                  const uint16_t* pre16, cudaStream_t stream) {
  return run_bf16_out(s, Epilogue16::dgelu, a, b, g16, nullptr, pre16, stream);
}
bool GemmContext::run_bf16_out(const GemmShape& s, Epilogue16 epilogue, GemmOperand a, GemmOperand b, uint16_t* c,
                               const uint16_t* bias, const uint16_t* aux, cudaStream_t stream) {
  check_gemm_args(s, a, b, bias);
  if (s.accumulate || s.alpha != 1.0f) throw std::logic_error("cuda::gemm_bf16_out: alpha 1, no accumulation");
  if (s.M == 0 || s.N == 0) return true;
  if (s.K == 0) return false;  // the empty sum: the fp32 path's rule
  // The GeLU's input matrix: one matrix (no batch stride set), its leading dimension a multiple of 8.
  if (epilogue != Epilogue16::bias && (s.batch != 1 || s.N % 8 != 0 || !aux)) return false;
  Key key = key_of(s, a, b, c, bias, impl_->math, true);
  key.epi16 = epilogue;
  if (aux) key.align_aux = alignment_of(aux);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Plan& p = impl_->plan(key, bias, aux);
  if (!p.usable) return false;
  if (p.bias_epilogue)
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  if (p.aux_epilogue)
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
             "aux pointer");
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(impl_->handle, p.desc, &alpha, b.ptr, p.a, a.ptr, p.b, &beta, c, p.c, c, p.c, &algo,
                          impl_->workspace, impl_->workspace_bytes, stream);
  };
  const Sizes z = sizes_of(s, a.dtype, 2);
  const bool aux_written = epilogue == Epilogue16::gelu;  // GELU_AUX writes the aux matrix; DGELU reads it
  const Outputs outs{c, z.c, aux_written ? const_cast<uint16_t*>(aux) : nullptr, aux_written ? z.c : 0, false};
  const Range aux_read{aux_written ? nullptr : aux, aux_written || !aux ? 0 : z.c};
  impl_->tune(key, p, outs, {{a.ptr, z.a}, {b.ptr, z.b}, {bias, bias ? z.bias : 0}, aux_read}, run, stream);
  const cublasStatus_t st = run(p.algo);
  // Offered by the heuristic, refused at the call (an epilogue's aux matrix may be refused as an invalid
  // value): asked no more, nothing written.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (epilogue != Epilogue16::bias && st == CUBLAS_STATUS_INVALID_VALUE)) {
    p.usable = false;
    return false;
  }
  lt_check(st, "cublasLtMatmul (bf16 D)");
  impl_->last_bias_in_epilogue = p.bias_epilogue;
  return true;
}

}  // namespace lattice::cuda
