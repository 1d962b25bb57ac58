#pragma once
// GEMMs on the device through cuBLASLt, with the contract of kernels/gemm.hpp:
//   C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N] (+ bias[N] on every row),
// batched over `batch` contiguous matrices (A every M·K elements, B every K·N, C every M·N), row-major
// storage, A and B both fp32 or both bf16, C and the bias fp32. Pointers are device pointers.
//
// Row-major to cuBLASLt's column-major: a row-major [R, C] matrix is the column-major [C, R] matrix
// with the same leading dimension, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: B is
// cuBLASLt's first operand and A its second, each transposed exactly when kernels/gemm.hpp's flag
// says so, and D is column-major [N, M] with leading dimension N (the bias, one value per row of D,
// is then one per column of C, as on the CPU).
//
// The math: fp32 inputs are multiplied in full fp32 (CUBLAS_COMPUTE_32F: no TF32) unless the context
// is switched to GemmMath::tf32 by explicit choice (CUBLAS_COMPUTE_32F_FAST_TF32); bf16 inputs are
// multiplied with fp32 accumulation (CUBLAS_COMPUTE_32F) whatever the switch says.
//
// Deterministic: one algorithm per shape, chosen once and cached (the key: shape, flags, dtype, math
// and the operands' pointer alignment), run on the context's one workspace; cuBLASLt's algorithms for
// one device, library version and workspace repeat their bits (lattice_cuda_check's [repeat] lines
// check it). The chosen algorithm is cuBLASLt's heuristic's first, or (the tuner, below) a faster one
// that gives the same bits. A bias is added in cuBLASLt's epilogue when the
// heuristic offers an algorithm with it, otherwise by bias_add_rows after the GEMM (the same sum).
//
// alpha != 1 with a bias is refused: oneDNN 2.x (the CPU's GEMM) scales the bias with the product
// and cuBLASLt does not, and no caller asks for it (the attention's scaled GEMMs have no bias).
//
// Built only with -DLATTICE_CUDA=ON. Compiled on machines without a GPU; see docs/gpu-runs.md for what has
// run on one.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernels.hpp"
#include "kernels/gemm.hpp"

namespace lattice::cuda {

enum class GemmMath {
  fp32,  // fp32 inputs multiplied in fp32 (TF32 off): what the parity checks use
  tf32,  // fp32 inputs rounded to TF32 inside the tensor cores: faster, about 10 bits of mantissa
};

// One cuBLASLt handle (cublasLtCreate once), one workspace and the cache of chosen algorithms. Use
// one context per stream at a time (its workspace is shared by the GEMMs it launches). Not copyable.
class GemmContext {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;  // 32 MiB: cuBLASLt's Hopper kernels ask for up to this
  // With `workspace.data` null the context allocates `workspace.bytes` (default 32 MiB) itself with
  // cudaMalloc and frees it; otherwise it uses the caller's memory (the backend seam's tracked
  // `workspaces`), which must outlive it.
  explicit GemmContext(Workspace workspace = {nullptr, kDefaultWorkspaceBytes}, GemmMath math = GemmMath::fp32);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  // The library workspace's size, for the memory accounting (MemoryCategory::workspaces).
  size_t workspace_bytes() const;
  GemmMath math() const;
  void set_math(GemmMath math);
  // Algorithms chosen so far (one per distinct key).
  int64_t cached_plans() const;
  // Whether the last gemm() call added its bias in cuBLASLt's epilogue (false: by bias_add_rows).
  bool last_bias_in_epilogue() const;

  void gemm(const GemmShape& shape, GemmOperand a, GemmOperand b, float* c, const float* bias = nullptr,
            cudaStream_t stream = nullptr);
  // C = bf16(op(A)·op(B) + bias16) as bf16 bits (alpha 1, no accumulation): cuBLASLt rounds its fp32
  // result, the bf16 bias widened and added in fp32 in its epilogue first, so the only rounding is
  // gemm()'s followed by to_bf16 (nearest even; cuBLASLt keeps subnormals that to_bf16 flushes, and
  // may choose another algorithm than for an fp32 C, whose sums round differently). The bias is bf16,
  // D's type: cuBLASLt takes no other for a bf16 D (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE;
  // an fp32 one was refused as an invalid value on the H200). Returns false, writing nothing, where
  // cuBLASLt offers no algorithm for the shape with a bf16 D (and the bias in its epilogue): the
  // caller then multiplies into fp32 and narrows, the sequence this replaces.
  bool gemm_bf16_out(const GemmShape& shape, GemmOperand a, GemmOperand b, uint16_t* c,
                     const uint16_t* bias16 = nullptr, cudaStream_t stream = nullptr);
  // The GeLU in the epilogue (cuBLASLt's GELU_AUX_BIAS, its tanh form: docs/gpu-kernels.md), alpha 1, no
  // accumulation: pre16 = bf16(op(A)·op(B) + bias16), the GeLU's kept input, and act16 =
  // bf16(gelu(op(A)·op(B) + bias16)) (bias16 may be null): the GeLU of the fp32 sum, where gemm_bf16_out and
  // gelu_forward16 take it of pre16 (one bf16 rounding apart; an algorithm whose epilogue runs as a
  // kernel of its own may take it of pre16 too: either is within the bf16 bound the check holds it to,
  // and the tuner keeps only algorithms with the first's bits). Returns false, writing nothing, where
  // cuBLASLt offers no algorithm (batch 1 only; the row length a multiple of 8, the aux matrix's rule).
  bool gemm_bf16_gelu(const GemmShape& shape, GemmOperand a, GemmOperand b, uint16_t* act16, uint16_t* pre16,
                      const uint16_t* bias16, cudaStream_t stream = nullptr);
  // The GeLU's backward in the epilogue (DGELU): g16 = bf16(gelu'(pre16) · op(A)·op(B)), the product
  // unrounded where linear_backward_input_bf16 and gelu_backward_narrow round it to bf16 first.
  // Returns false as gemm_bf16_gelu does.
  bool gemm_bf16_dgelu(const GemmShape& shape, GemmOperand a, GemmOperand b, uint16_t* g16, const uint16_t* pre16,
                       cudaStream_t stream = nullptr);
  enum class Epilogue16 { bias, gelu, dgelu };  // what a bf16 D's epilogue adds to the product (the bias, or none)

  // ---- the tuner ----
  // cuBLASLt's heuristic ranks its algorithms by an estimate, and its first is not always the fastest
  // at a shape (on the H200, run 7: the LM head's forward at 577 TFLOP/s where its input gradient ran
  // at 776). With the tuner on (the default; LATTICE_CUDA_GEMM_TUNE=0 or set_tuning(false) turns it
  // off), a key's first call asks the heuristic for up to kTuneCandidates algorithms (those that split K
  // into as many parts as its first and sum them by its reduction scheme) and runs each once on the
  // call's own operands; those whose output (D, and the GeLU's input matrix where the epilogue
  // writes it) has the first one's bits, by bits_fingerprint, are timed in three interleaved rounds and
  // the fastest is kept (a tie: the earlier). So a tuned GEMM gives the heuristic's first algorithm's
  // bits: parity, repeats and resumes are as without the tuner; only the time moves. An accumulating
  // call's C is copied first (memory from the lender) and restored before each run and before the call
  // itself. The first algorithm is kept, untimed, for a call that finds no memory for C's copy, whose
  // output overlaps an operand or is not 4-byte aligned, or that meets a CUDA error; a call whose output
  // is mostly zero words (where any order of the sums would give its bits) keeps it for now and is
  // tuned on a later call (three tries); so is an accumulating call whose D keeps most of C's words. A
  // bf16 D of fewer than 2^21 values keeps the first: its bits show another order of sums too rarely.
  // Without the tuner a key takes the heuristic's one best (asked for alone, as before the tuner); the
  // tuner's candidates are that one, then its ranking of eight.
  static constexpr int kTuneCandidates = 8;
  struct Tuning {
    std::string gemm;              // the key: dtypes, transposes, batch × M × N × K, epilogue
    int offered = 0;               // algorithms the heuristic offered
    int same_bits = 0;             // of them, those with the first one's bits (the first included)
    int chosen = 0;                // the kept one's place among the offered (0: the heuristic's first)
    float first_ms = 0.0f, chosen_ms = 0.0f;  // best of the three rounds (both 0 where one had the bits)
  };
  std::vector<Tuning> tunings() const;  // in the order the keys were tuned
  bool tuning() const;
  void set_tuning(bool on);  // for keys met after the call
  // Device memory lent for an accumulating call's tuning (the copy of C), given back after it: the
  // backend lends tracked memory (category `workspaces`, which keeps the block for reuse); by default
  // cudaMalloc and cudaFree. borrow returns null where there is none. It is given back with the last
  // restore of C still queued on the call's stream: the lender must order any reuse after the stream's
  // work (the backend's launches all go to the one stream; cudaFree waits for the device).
  struct Lender {
    void* (*borrow)(size_t bytes) = nullptr;
    void (*give_back)(void* p) = nullptr;
  };
  void set_lender(Lender lender);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool run_bf16_out(const GemmShape& shape, Epilogue16 epilogue, GemmOperand a, GemmOperand b, uint16_t* c,
                    const uint16_t* bias16, const uint16_t* aux16, cudaStream_t stream);
};

}  // namespace lattice::cuda
