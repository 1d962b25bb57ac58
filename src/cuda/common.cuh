#pragma once
// Device helpers shared by src/cuda's kernels: launch checks, grid sizes, the CPU's fast_exp/fast_tanh
// polynomial (kernels/fast_math.hpp) in device form, bf16 rounding as tensor/bf16.hpp rounds, and
// fixed-tree (deterministic) warp and block reductions.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lattice::cuda::detail {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
// After each launch: a bad configuration shows here, not at some later synchronisation.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

constexpr int kBlock = 256;
// Blocks for a grid-stride loop over n items (at most 2^16 blocks: the loops stride over the rest).
inline unsigned grid_for(int64_t n, int block = kBlock) {
  const int64_t g = (n + block - 1) / block;
  return unsigned(g < 1 ? 1 : (g > 65536 ? 65536 : g));
}

// kernels/fast_math.hpp's fast_exp, term for term (nvcc may fuse a multiply and an add where the CPU
// build rounds twice: within an ulp or two of the CPU's value).
__device__ __forceinline__ float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = __uint_as_float(uint32_t(int32_t(n) + 127) << 23);
  return p * scale;
}
__device__ __forceinline__ float fast_tanh(float y) { return 1.0f - 2.0f / (fast_exp(2.0f * y) + 1.0f); }

// tensor/bf16.hpp's to_bf16: nearest even, NaN kept a quiet NaN, subnormal inputs to (signed) zero.
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ float from_bf16_bits(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum (or max) over the block, returned to every thread. `scratch` holds 32 values in shared memory;
// the block's size is a multiple of 32. A fixed tree: the same inputs give the same bits.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by an earlier reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  return total;
}
__device__ inline float block_max(float v, float* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = lane < warps ? scratch[lane] : -__int_as_float(0x7f800000);
  return warp_max(m);
}

// Workspace carving: `offset` advanced past `bytes`, 256-byte aligned.
inline size_t carve(size_t& offset, size_t bytes) {
  const size_t at = offset;
  offset += (bytes + 255) / 256 * 256;
  return at;
}

}  // namespace lattice::cuda::detail
