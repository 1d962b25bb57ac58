#pragma once
// Matrix multiplication through oneDNN: C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N] (+ bias),
// optionally batched over `batch` contiguous matrices. A and B are fp32 or bf16 (both the same),
// accumulation and C are fp32; bf16 operands are widened to fp32 first on CPUs whose bf16 dot product
// is slower than their fp32 FMAs (gemm_bf16_widened). Primitives are created once per shape and cached. A GEMM runs as equal
// parts, one single-threaded primitive per thread: a batch by its matrices, an unbatched GEMM with at
// least 256 rows per thread by its rows; except a bf16 product that does not accumulate, on AMX, which
// runs as one oneDNN-threaded primitive (docs/design.md §7). LATTICE_GEMM=whole or =parts in the
// environment runs every GEMM one way (for A/B benchmarks).
#include <cstdint>
#include <optional>
#include <vector>

#include "core/config.hpp"
#include "core/machine_peak.hpp"

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

void gemm(const GemmShape& shape, GemmOperand a, GemmOperand b, float* c, const float* bias = nullptr);
// C = bf16(op(A)·op(B) + bias) for bf16 A and B (alpha 1, no accumulation): oneDNN rounds its fp32
// result (bias added in fp32) to the destination's bf16, with to_bf16's rule, so the bits of gemm()
// then to_bf16 (tests/unit/test_gemm.cpp, on AMX, AVX512-BF16 and AVX-512 alone). oneDNN 2 has no
// fp32-operand form with a bf16 destination: fp32 operands are a logic_error.
void gemm_bf16_out(const GemmShape& shape, GemmOperand a, GemmOperand b, uint16_t* c, const float* bias = nullptr);

// The scratchpad bytes each of `threads` threads holds for this GEMM (oneDNN's per-primitive scratch, in a
// per-thread buffer that grows to its largest: MemoryCategory::workspaces), asked of oneDNN without
// making the primitive (out16: C in bf16, as gemm_bf16_out writes it). The planner sums each thread's
// largest over a step's GEMMs.
std::vector<int64_t> gemm_scratchpad_bytes(const GemmShape& shape, bool bf16, int threads, bool out16 = false);

// The widest instruction set oneDNN's GEMMs use on this CPU: its effective ISA (ONEDNN_MAX_CPU_ISA may
// lower it), the cap core/machine_peak.hpp's peak takes.
GemmIsa gemm_isa();
// Whether LATTICE_GEMM is unset, "whole" or "parts"; the CLI refuses anything else in one line.
bool gemm_split_env_valid();
// Whether LATTICE_GEMM_BF16 is unset, "native" or "widened"; the same.
bool gemm_bf16_env_valid();

// Whether bf16 products run widened to fp32 here (core/machine_peak.hpp bf16_gemm_widens on this
// machine's own CPU, or LATTICE_GEMM_BF16): the operands are widened exactly into fp32 copies and the
// fp32 GEMM runs; a bf16 destination is its product rounded by to_bf16, in pieces of rows. A GEMM
// whose whole copies would pass 64 MiB (a vocabulary-wide head) runs in tiles whose copies do not
// (kernels/gemm_widened.hpp); a batch that large runs natively.
bool gemm_bf16_widened();
// Sets that choice (nullopt: back to the rule): for tests of both forms on one machine.
void gemm_set_bf16_widened(std::optional<bool> widened);
// The bytes of those copies for one GEMM, held by the calling thread in one buffer that grows to its
// largest (MemoryCategory::workspaces); 0 where this one runs natively or `bf16` is false.
int64_t gemm_widened_bytes(const GemmShape& shape, bool bf16, int threads, bool out16 = false);

// Number of cached primitives (for tests of the cache).
int64_t gemm_cached_primitives();

}  // namespace lattice
