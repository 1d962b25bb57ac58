#pragma once
// The tensor-core attention's building blocks: one warp's product, mma.sync m16n8k16 with bf16
// operands and fp32 accumulation; its operand fragments, in the register layout the PTX ISA documents
// ("Matrix Fragments for mma.m16n8k16 with floating point type"), each loaded from shared memory by one
// ldmatrix .x4 (an A fragment, or the B fragments of two n-tiles); and cp.async's copies of operand tiles into shared memory. Lane l is thread t = l % 4 of group
// g = l / 4:
//   A (16 × 16, row-major): a[0] = (g, 2t … 2t+1), a[1] = (g+8, 2t …), a[2] = (g, 2t+8 …), a[3] = (g+8, 2t+8 …)
//   B (16 × 8, column-major): b0 = (k 2t … 2t+1, n g), b1 = (k 2t+8 …, n g)
//   C, D (16 × 8, fp32): c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// each 32-bit register holding two bf16 values, the lower-indexed one in the low half. ldmatrix
// .m8n8 hands lane l elements (g, 2t) and (g, 2t+1) of each 8 × 8 matrix it reads, and with .trans
// (2t, g) and (2t+1, g), so a row-major [k][n] tile gives B directly. Two adjacent n-tiles of a C fragment are an A fragment of
// k 16 once narrowed (a_from_c): what lets the fused attention feed its probabilities to the next
// product from registers, as FlashAttention-2 does. lattice_cuda_check's "mma fragments" lines check
// these layouts against the host on the device.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common.cuh"

namespace lattice::cuda::mma {
using namespace detail;

// d += A·B for the warp (every lane calls it, with converged control flow).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // Not volatile: it touches registers only, and the compiler may schedule it (volatile made the
  // forward and dQ kernels 48 to 112 instructions longer, registers unchanged).
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();  // no bf16 tensor cores before sm_80; callers check the card first (flash_tc_supported)
#endif
}

// ldmatrix .m8n8 .x4: four 8 × 8 bf16 matrices from shared memory in one instruction, lanes 8m …
// 8m+7 giving the addresses of matrix m's eight rows (`row`: this lane's; each row's eight elements
// 16-byte aligned). Lane l receives r[m] = (row g, columns 2t, 2t+1) of matrix m; with .trans, (row
// 2t, column g) and (row 2t+1, column g). One instruction where the fragments' 32-bit loads took four:
// the products' operand loads were most of the kernels' shared-memory instructions. kTrans: .trans.
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
#else
  (void)row;
  r[0] = r[1] = r[2] = r[3] = 0;
  __trap();
#endif
}

// 16 bytes from global to shared memory without passing through registers (cp.async, sm_80), or 16
// zero bytes when `valid` is false (src-size 0: nothing is read, `src` need only be a valid address).
// The copies of a thread complete at async_wait_all(); a __syncthreads() after it shows them to the block.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(valid ? 16 : 0));
#else
  (void)dst, (void)src, (void)valid;
  __trap();
#endif
}
__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// Two values rounded to bf16 (to nearest even) and packed, the first in the low half: one
// cvt.rn.bf16x2.f32 where bf16_pair takes about sixteen integer operations. It keeps subnormals, which
// bf16_pair (the CPU's rounding) flushes to zero: a difference far below the products' own rounding.
__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return bf16_pair(lo, hi);
#endif
}

// ---- The fragments' loads, built on the primitives above (the host simulation keeps from here on). ----

// The A fragment of rows r0 … r0+15, columns c0 … c0+15 of a row-major bf16 tile X (row stride ld
// elements): matrices 0 … 3 are rows +0 and +8 of columns +0, then of columns +8 (a[0] … a[3]).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* X, int ld, int r0, int c0) {
  const int lane = int(threadIdx.x) & 31, m = lane >> 3;
  ldsm_x4<false>(a, X + (r0 + (m & 1) * 8 + (lane & 7)) * ld + c0 + (m >> 1) * 8);
}

// The B fragments of k k0 … k0+15 for the two n-tiles n0 … n0+7 (b[0], b[1]) and n0+8 … n0+15 (b[2],
// b[3]) of B = Yᵀ, Y a row-major bf16 tile [n][k] (row stride ld): what a product reads along Y's
// rows (K in Q·Kᵀ, V in dO·Vᵀ, Q and dO in the key tile's Sᵀ and dPᵀ).
__device__ __forceinline__ void load_b2(uint32_t (&b)[4], const uint16_t* Y, int ld, int n0, int k0) {
  const int lane = int(threadIdx.x) & 31, m = lane >> 3;
  ldsm_x4<false>(b, Y + (n0 + (m >> 1) * 8 + (lane & 7)) * ld + k0 + (m & 1) * 8);
}

// The same two n-tiles' B fragments of a row-major bf16 tile X [k][n] (B = X), by the transposing
// load: what a product reads along X's columns (V in P·V, K in dS·K, dO and Q in the key tile's dV
// and dK) comes this way, with no transposed copy of the tile.
__device__ __forceinline__ void load_b2_trans(uint32_t (&b)[4], const uint16_t* X, int ld, int k0, int n0) {
  const int lane = int(threadIdx.x) & 31, m = lane >> 3;
  ldsm_x4<true>(b, X + (k0 + (m & 1) * 8 + (lane & 7)) * ld + n0 + (m >> 1) * 8);
}

// The A fragment (k 16) of two adjacent n-tiles' accumulators: c0 columns k 0 … 7, c1 k 8 … 15,
// rounded to bf16.
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = bf16x2_rn(c0[0], c0[1]), a[1] = bf16x2_rn(c0[2], c0[3]);
  a[2] = bf16x2_rn(c1[0], c1[1]), a[3] = bf16x2_rn(c1[2], c1[3]);
}

}  // namespace lattice::cuda::mma
