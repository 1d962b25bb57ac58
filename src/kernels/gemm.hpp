#pragma once
// Matrix multiplication: C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N] (+ bias), optionally batched over
// `batch` contiguous matrices. A and B are fp32 or bf16 (both the same), accumulation and C are fp32.
// Two kernels serve it, chosen per shape by a fixed rule (gemm_kernel_for): oneDNN's matmul (primitives
// created once per shape and cached) and lattice's packed AVX-512 kernel (kernels/packed_gemm.hpp).
#include <cstdint>

#include "core/config.hpp"

namespace lattice {

struct GemmOperand {
  const void* ptr;
  DType dtype;
};
inline GemmOperand f32_operand(const float* p) { return {p, DType::fp32}; }

struct GemmShape {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  bool trans_a = false;  // A stored [K, M] instead of [M, K]
  bool trans_b = false;  // B stored [N, K] instead of [K, N]
  float alpha = 1.0f;
  bool accumulate = false;  // C += result instead of C = result
};

enum class GemmKernel { onednn, packed };
// The kernel gemm() runs for a shape: a pure function of the shape and dtype, so a run's numerics do not
// depend on timing. LATTICE_GEMM=onednn in the environment holds gemm() on oneDNN for every shape (for
// A/B benchmarks); this function states the rule regardless.
GemmKernel gemm_kernel_for(const GemmShape& shape, DType operands, bool has_bias);

void gemm(const GemmShape& shape, GemmOperand a, GemmOperand b, float* c, const float* bias = nullptr);

// Number of cached primitives (for tests of the cache).
int64_t gemm_cached_primitives();

}  // namespace lattice
