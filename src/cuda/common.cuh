#pragma once
// Device helpers shared by src/cuda's kernels: launch checks, grid sizes, the CPU's fast_exp/fast_tanh
// polynomial (kernels/fast_math.hpp) and bf16 rounding (tensor/bf16.hpp), one text for both, and
// fixed-tree (deterministic) warp and block reductions.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/fast_math.hpp"
#include "tensor/bf16.hpp"

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

// The CPU's fast_exp/fast_tanh and bf16 rounding, one text for both (kernels/fast_math.hpp,
// tensor/bf16.hpp: LATTICE_HOST_DEVICE).
using lattice::fast_exp;
using lattice::fast_tanh;
__device__ __forceinline__ uint16_t to_bf16_bits(float f) { return lattice::to_bf16(f); }
__device__ __forceinline__ float from_bf16_bits(uint16_t b) { return lattice::from_bf16(b); }

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
