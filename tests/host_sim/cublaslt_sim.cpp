// The host simulation's cuBLASLt (tests/host_sim/include/cublasLt.h): enough of the library for
// src/cuda/gemm.cu to run whole on the host, its tuner included. A product is computed in fp32 as
// the header documents it: column-major operands, D = epilogue(alpha·op(A)·op(B) + beta·C + bias),
// bf16 results rounded to nearest even, the GeLU epilogues' aux matrix in D's type at its own leading
// dimension (GELU_AUX writes the pre-activation there, DGELU reads it). The heuristic ranks four
// made-up algorithms, which differ only as far as the tuner must tell them apart:
//   0  sums each dot product over k ascending                       (the heuristic's first)
//   1  the same order, so the same bits, and twice as fast (0 runs its product twice)
//   2  sums over k descending: another order, other bits on almost any data
//   3  the order of 0, but says it splits K in two (SPLITK_NUM 2): the tuner must not offer it
// The simulation's events time the host, so the tuner's rounds find 1 faster and keep it.
// An algorithm is chosen for the alignments the preference states (A, B, C, D: 256 bytes unless told
// less) and those of the bias and aux pointers set when it was chosen (the header: the heuristic reads
// their values for that); a call whose pointers are less aligned stops the program, naming the operand,
// where the library may fail it or, worse, run it (a plan reused for another pointer).
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/gelu.hpp"
#include "tensor/bf16.hpp"

struct cublasLtContext {};
struct cublasLtMatmulDescOpaque_t {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  const void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: the header's defaults
};

namespace {

constexpr int kAlgorithms = 4;

template <class T>
bool read(const void* buf, size_t bytes, T& out) {
  if (bytes != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

float load(const void* p, cudaDataType_t type, int64_t i) {
  if (type == CUDA_R_16BF) return lattice::from_bf16(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
void store(void* p, cudaDataType_t type, int64_t i, float v) {
  if (type == CUDA_R_16BF) static_cast<uint16_t*>(p)[i] = lattice::to_bf16(v);
  else static_cast<float*>(p)[i] = v;
}

bool known_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }

// The largest power of two, at most 256, dividing the address (a null pointer: 256).
uint64_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint64_t r = 256;
  while (r > 1 && a % r != 0) r /= 2;
  return r;
}
// The alignments an algorithm was chosen for, 16 bits each: data[1] A, B, C, D; data[2] the bias, aux.
void require_aligned(const cublasLtMatmulAlgo_t& algo, int operand, const void* p, const char* name) {
  const uint64_t want = (operand < 4 ? algo.data[1] : algo.data[2]) >> (16 * (operand % 4)) & 0xffff;
  if (p && want > alignment_of(p)) {
    char what[200];
    std::snprintf(what, sizeof what, "cublasLtMatmul: %s at a %llu-byte alignment, its algorithm chosen for %llu", name,
                  static_cast<unsigned long long>(alignment_of(p)), static_cast<unsigned long long>(want));
    sim::fail(what);
  }
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? "success" : "the host simulation's cuBLASLt refused the call";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new cublasLtMatmulDescOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
// The types the header gives each attribute: a wrong size is the caller's bug, INVALID_VALUE.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  int32_t op = 0;
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = read(buf, bytes, op) && (op == CUBLAS_OP_N || op == CUBLAS_OP_T);
      if (ok) d->ta = cublasOperation_t(op);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = read(buf, bytes, op) && (op == CUBLAS_OP_N || op == CUBLAS_OP_T);
      if (ok) d->tb = cublasOperation_t(op);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = read(buf, bytes, d->epilogue); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read(buf, bytes, d->bias); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ok = read(buf, bytes, d->aux); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = read(buf, bytes, d->aux_ld); break;
    default: ok = false;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!known_type(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ld < int64_t(rows) || rows == 0 || cols == 0) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld, 1, 0};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)
    return read(buf, bytes, l->batch) && l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)
    return read(buf, bytes, l->stride) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return bytes == 8 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  uint32_t v = 0;
  if (!read(buf, bytes, v)) return CUBLAS_STATUS_INVALID_VALUE;
  const int at = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
                 : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
                 : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
                 : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES ? 3
                                                                      : -1;
  if (at >= 0) {
    if (v == 0 || v > 256 || (v & (v - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
    pref->align[at] = v;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  // A bias or aux in a D type the header does not allow (the bias is D's type; the aux too).
  const bool aux = desc->epilogue & 128;
  if (aux && (!desc->aux || desc->aux_ld < int64_t(d->rows) || desc->aux_ld % 8 != 0 || d->batch != 1))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (c->type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < kAlgorithms && i < requested; ++i) {
    results[i] = {};
    results[i].algo.data[0] = uint64_t(i);
    results[i].algo.data[1] = uint64_t(pref->align[0]) | uint64_t(pref->align[1]) << 16 |
                              uint64_t(pref->align[2]) << 32 | uint64_t(pref->align[3]) << 48;
    results[i].algo.data[2] = (desc->bias ? alignment_of(desc->bias) : 0) | (aux ? alignment_of(desc->aux) : 0) << 16;
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  *returned = std::min(requested, kAlgorithms);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
                                                    size_t bytes, size_t* written) {
  if (attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM) {
    const int32_t parts = algo->data[0] == 3 ? 2 : 1;
    if (written) *written = sizeof(parts);
    if (bytes < sizeof(parts)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, &parts, sizeof(parts));
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) {
    const uint32_t scheme = 0;
    if (written) *written = sizeof(scheme);
    if (bytes < sizeof(scheme)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, &scheme, sizeof(scheme));
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha_p, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta_p,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  const uint64_t id = algo ? algo->data[0] : 0;
  if (id >= kAlgorithms) return CUBLAS_STATUS_INVALID_VALUE;
  // op(A) is m × k, op(B) k × n, C and D m × n (column-major).
  const int64_t m = int64_t(d->rows), n = int64_t(d->cols);
  const int64_t k = desc->ta == CUBLAS_OP_N ? int64_t(a->cols) : int64_t(a->rows);
  const int64_t am = desc->ta == CUBLAS_OP_N ? int64_t(a->rows) : int64_t(a->cols);
  const int64_t bk = desc->tb == CUBLAS_OP_N ? int64_t(b->rows) : int64_t(b->cols);
  const int64_t bn = desc->tb == CUBLAS_OP_N ? int64_t(b->cols) : int64_t(b->rows);
  if (am != m || bk != k || bn != n || int64_t(c->rows) != m || int64_t(c->cols) != n || a->type != b->type ||
      c->type != d->type || a->batch != d->batch || b->batch != d->batch || c->batch != d->batch || C != D)
    return CUBLAS_STATUS_INVALID_VALUE;
  const float alpha = *static_cast<const float*>(alpha_p), beta = *static_cast<const float*>(beta_p);
  const uint32_t epi = desc->epilogue;
  const bool bias = epi & CUBLASLT_EPILOGUE_BIAS, gelu = (epi & 32) != 0, dgelu = (epi & 64) != 0;
  if ((bias && !desc->bias) || ((epi & 128) && !desc->aux)) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo) {
    require_aligned(*algo, 0, A, "A");
    require_aligned(*algo, 1, B, "B");
    require_aligned(*algo, 2, C, "C");
    require_aligned(*algo, 3, D, "D");
    if (bias) require_aligned(*algo, 4, desc->bias, "the bias");
    if (epi & 128) require_aligned(*algo, 5, desc->aux, "the aux matrix");
  }
  std::vector<float> opa(size_t(m * k)), opb(size_t(k * n)), acc(static_cast<size_t>(m));
  for (int32_t batch = 0; batch < d->batch; ++batch) {
    const int64_t ao = batch * a->stride, bo = batch * b->stride, dof = batch * d->stride;
    // op(A) column-major m × k, op(B) column-major k × n, as fp32 (bf16 operands widened: exact).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        opa[size_t(i + p * m)] = load(A, a->type, ao + (desc->ta == CUBLAS_OP_N ? i + p * a->ld : p + i * a->ld));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        opb[size_t(p + j * k)] = load(B, b->type, bo + (desc->tb == CUBLAS_OP_N ? p + j * b->ld : j + p * b->ld));
    for (int runs = id == 0 ? 2 : 1; runs > 0; --runs)  // algorithm 0: the same work, twice the time
      for (int64_t j = 0; j < n; ++j) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t s = 0; s < k; ++s) {  // each output's sum over k in one fixed order
          const int64_t p = id == 2 ? k - 1 - s : s;
          const float bv = opb[size_t(p + j * k)];
          const float* col = &opa[size_t(p * m)];
          for (int64_t i = 0; i < m; ++i) acc[size_t(i)] += col[i] * bv;
        }
        if (runs > 1) continue;
        for (int64_t i = 0; i < m; ++i) {
          const int64_t at = dof + i + j * d->ld;
          float v = alpha * acc[size_t(i)];
          if (beta != 0.0f) v += beta * load(C, c->type, at);
          if (bias) v += load(desc->bias, d->type, i);
          if (gelu) {
            if (epi & 128) store(const_cast<void*>(desc->aux), d->type, i + j * desc->aux_ld, v);
            v = lattice::gelu_value(v);
          } else if (dgelu) {
            v *= lattice::gelu_grad(load(desc->aux, d->type, i + j * desc->aux_ld));
          }
          store(D, d->type, at, v);
        }
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
