#pragma once
// Device helpers shared by src/cuda's kernels: launch checks, grid sizes, the CPU's fast_exp/fast_tanh
// polynomial (kernels/fast_math.hpp) and bf16 rounding (tensor/bf16.hpp), one text for both, and
// fixed-tree (deterministic) warp and block reductions.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/fast_math.hpp"
#include "tensor/bf16.hpp"

namespace lattice::cuda::detail {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
// After each launch: a bad configuration shows here, not at some later synchronisation.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// The shared memory a block may opt in to on the current device (0 where the device cannot say: the
// callers then take their forms that need none past the default).
inline int smem_optin() {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return optin;
}
// Opts the kernel in to `bytes` of dynamic shared memory (past the default 48 KiB), or says why not.
template <class Kernel>
inline void allow_smem(Kernel kernel, size_t bytes, const char* name) {
  int device = 0, optin = 0;
  check(cudaGetDevice(&device), name);
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), name);
  if (bytes > size_t(optin))
    throw std::invalid_argument(std::string("CUDA: ") + name + ": needs " + std::to_string(bytes) +
                                " bytes of shared memory a block, the device allows " + std::to_string(optin));
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), name);
}

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
// to_bf16's rule on a GPU (sm_80 on): to nearest even by cvt.rn.bf16(x2).f32 after a multiply by 1 that
// flushes a subnormal input to a signed zero (mul.ftz), as to_bf16 flushes it first: the same bits for
// every value but a NaN, whose payload cvt makes canonical where to_bf16 keeps its top bits (a NaN
// either way). Two instructions a value, or three a pair, where to_bf16's integer form takes about eight
// a value: the bf16 passes that are arithmetic-bound (GeLU's, LayerNorm's forward) spend that on every
// element they write. Elsewhere (older cards, the host simulation) to_bf16 itself.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ float flushed_subnormal(float f) {
  float r;
  asm("mul.ftz.f32 %0, %1, 0f3F800000;" : "=f"(r) : "f"(f));
  return r;
}
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(flushed_subnormal(f)));
}
// Two values narrowed into one word, the first at the lower address (little-endian): the vector
// stores of the four-wide kernels.
__device__ __forceinline__ uint32_t bf16_pair(float first, float second) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(flushed_subnormal(first), flushed_subnormal(second));
  return *reinterpret_cast<const uint32_t*>(&v);
}
#else
__device__ __forceinline__ uint16_t to_bf16_bits(float f) { return lattice::to_bf16(f); }
// Two values narrowed into one word, the first at the lower address (little-endian): the vector
// stores of the four-wide kernels.
__device__ __forceinline__ uint32_t bf16_pair(float first, float second) {
  return uint32_t(to_bf16_bits(first)) | (uint32_t(to_bf16_bits(second)) << 16);
}
#endif
__device__ __forceinline__ float from_bf16_bits(uint16_t b) { return lattice::from_bf16(b); }
// bf16_pair's inverse: a word's two bf16 values widened, the lower-addressed first (x).
__device__ __forceinline__ float2 bf16_pair_widened(uint32_t w) {
  return make_float2(from_bf16_bits(uint16_t(w & 0xffffu)), from_bf16_bits(uint16_t(w >> 16)));
}
// Whether a pointer allows `bytes`-wide vector accesses (a null one does).
inline bool aligned_to(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
// An element-wise pass over n items, four a thread where every pointer allows the vector accesses
// (`aligned`: 16 bytes of its fp32 data, 8 of its bf16) by launch4(n / 4), and one a thread for the
// rest (the tail, or all of it) by the caller: the same element math either way, so the same bits.
// Returns the items the four-wide launch covered.
template <class Launch4>
int64_t four_wide(int64_t n, bool aligned, Launch4 launch4) {
  if (!aligned || n < 4) return 0;
  launch4(n / 4);
  return n / 4 * 4;
}

// A grid-stride walk over n items, U a thread at a time: load(i) for each of the thread's U items
// first, then finish(i, loaded) for each in order. One item a thread kept 16 KB of loads in flight an
// SM, which moved 1.7 TB/s of the H200's 4.8 (run 4): an SM needs some 40 KB in flight to cover the
// memory's latency. Launched over grid_in_flight(n, U) blocks of kBlock.
template <int U, class Load, class Finish>
__device__ __forceinline__ void grid_stride_in_flight(int64_t n, Load load, Finish finish) {
  using Loaded = decltype(load(int64_t(0)));
  const int64_t step = blockDim.x, width = step * U;
  for (int64_t i0 = int64_t(blockIdx.x) * width + threadIdx.x; i0 < n; i0 += int64_t(gridDim.x) * width) {
    Loaded v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u * step < n) v[u] = load(i0 + u * step);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i0 + u * step >= n) break;
      finish(i0 + u * step, v[u]);
    }
  }
}
inline unsigned grid_in_flight(int64_t n, int items_a_thread) {
  return grid_for((n + items_a_thread - 1) / items_a_thread);
}

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
// block_sum_of_warps: the same tree over the block's first `warps` warps alone (the others' values left
// out), returned to every thread: a block of 32·warps threads' block_sum, bit for bit, computed in a
// larger block (the one-pass cross-entropy sums as the three kernels' 256-thread blocks do).
template <class T>
__device__ T block_sum_of_warps(T v, T* scratch, int warps) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by an earlier reduction
  if (lane == 0 && warp < warps) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);
  return total;
}
template <class T>
__device__ T block_sum(T v, T* scratch) {
  return block_sum_of_warps(v, scratch, int(blockDim.x) >> 5);
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

// GeLU's tanh form and its derivative (kernels/gelu.hpp's formula with the CPU's fast_tanh): one text
// for the fp32 kernels and the bf16 passes, so their bits agree.
__device__ __forceinline__ float gelu_value(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
  return 0.5f * x * (1.0f + fast_tanh(kSqrt2OverPi * (x + kCoef * x * x * x)));
}
__device__ __forceinline__ float gelu_grad(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
  const float th = fast_tanh(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCoef * x * x);
}

// An fp32 value as stored in T: itself, or narrowed to bf16 bits (to_bf16's rule).
template <class T>
__device__ __forceinline__ T stored_as(float v);
template <>
__device__ __forceinline__ float stored_as<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ uint16_t stored_as<uint16_t>(float v) {
  return to_bf16_bits(v);
}

// A value read as fp32 from fp32 or bf16 bits (the bf16 passes read their kept tensors narrow).
__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const uint16_t* p, int64_t i) { return from_bf16_bits(p[i]); }

// Column sums of an [N, out] matrix whose element (r, c) a functor gives, in two fixed-order passes
// (bias_backward's and the bf16 passes' bias gradients, one text so their bits agree): partial[chunk,
// c] adds rows [chunk·64, chunk·64 + 64) in row order, then db[c] += the chunks by
// column_chunk_sum's fixed tree (column_reduce_kernel, launched with kReduceWarps·32 threads). The
// functor has two steps, `load(r, c)` (the element's inputs, an `Input`) and `finish(r, c, input)` (its
// value), each called exactly once per element, so finish may also store what it computed (the
// narrowed copy). A thread loads kColumnBatch rows' inputs before it finishes any: one load at a time
// left the memory idle (the passes built on it moved 0.4–1.2 TB/s of the H200's 4.8, 2026-11-27
// profile); the sum still takes the rows in order, so the bits are the one-at-a-time loop's. An
// element whose finish returns a float2 serves two adjacent columns (c = 2·group, 2·group + 1; out
// even): its inputs for both in one load apiece, each column still summed alone in row order, so the
// bits are the one-column element's (the kernel check's [bits] lines compare them).
constexpr int64_t kColumnChunkRows = 64;
constexpr int kColumnBatch = 8;
inline int64_t column_chunks(int64_t N) { return (N + kColumnChunkRows - 1) / kColumnChunkRows; }
__device__ __forceinline__ void add_columns(float (&acc)[1], float v) { acc[0] += v; }
__device__ __forceinline__ void add_columns(float (&acc)[2], float2 v) { acc[0] += v.x, acc[1] += v.y; }
template <class Element>
constexpr int kElementColumns =
    std::is_same_v<decltype(std::declval<Element>().finish(0, 0, std::declval<typename Element::Input>())), float2>
        ? 2
        : 1;
// Threads a launch of column_partials_kernel covers: one a chunk and column group.
template <class Element>
int64_t column_partials_items(int64_t chunks, int64_t out) {
  return chunks * (out / kElementColumns<Element>);
}
template <class Element>
__global__ void column_partials_kernel(float* partial, Element element, int64_t N, int64_t out, int64_t chunks) {
  constexpr int W = kElementColumns<Element>;
  const int64_t groups = out / W;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < chunks * groups;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t chunk = k / groups, c = k - chunk * groups;
    const int64_t r1 = min(N, (chunk + 1) * kColumnChunkRows);
    float acc[W] = {};
    int64_t r = chunk * kColumnChunkRows;
    for (; r + kColumnBatch <= r1; r += kColumnBatch) {
      typename Element::Input in[kColumnBatch];
#pragma unroll
      for (int u = 0; u < kColumnBatch; ++u) in[u] = element.load(r + u, c);
#pragma unroll
      for (int u = 0; u < kColumnBatch; ++u) add_columns(acc, element.finish(r + u, c, in[u]));
    }
    for (; r < r1; ++r) add_columns(acc, element.finish(r, c, element.load(r, c)));
#pragma unroll
    for (int w = 0; w < W; ++w) partial[chunk * out + c * W + w] = acc[w];
  }
}
// The chunks' sum of column c (partial[chunk·stride + c]) by a block of kReduceWarps warps, a lane a
// column: warp w adds chunks w, w + 8, w + 16, … in ascending order, then warp 0 adds the eight warp
// sums in order — a fixed tree for a given chunk count, so the bits repeat. (One thread a column adding
// every chunk in turn, the form before, ran `out` threads — three blocks for GPT-2's 768 columns — each
// waiting on 512 loads one after another at micro-batch 32.) The total is warp 0's; every thread of
// the block must call it (it synchronises), `valid` false for a lane past the last column.
constexpr int kReduceWarps = 8;
__device__ inline float column_chunk_sum(const float* partial, int64_t stride, int64_t c, int64_t chunks, bool valid,
                                         float* scratch /* kReduceWarps × 32 floats */) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  float acc = 0.0f;
  if (valid) {
    // Eight of a lane's chunks loaded before any is added, then added in the same order: the bits of
    // one at a time, where each add waited out its own load (at GPT-2's micro-batch 32, 64 chunks a
    // lane, in the 24 blocks of LayerNorm's parameter reduction: 11 µs a call at micro-batch 8, run 6).
    constexpr int kBatch = 8;
    int64_t k = warp;
    for (; k + (kBatch - 1) * kReduceWarps < chunks; k += kBatch * kReduceWarps) {
      float v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) v[u] = partial[(k + u * kReduceWarps) * stride + c];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) acc += v[u];
    }
    for (; k < chunks; k += kReduceWarps) acc += partial[k * stride + c];
  }
  scratch[warp * 32 + lane] = acc;
  __syncthreads();
  float total = 0.0f;
  if (warp == 0)
    for (int w = 0; w < kReduceWarps; ++w) total += scratch[w * 32 + lane];
  __syncthreads();  // the scratch is free again for the next call
  return total;
}
// Blocks for the column reductions: one a group of 32 columns (at most 2^16: the kernels stride).
inline unsigned column_group_grid(int64_t columns) {
  const int64_t g = (columns + 31) / 32;
  return unsigned(g < 1 ? 1 : (g > 65536 ? 65536 : g));
}
template <class Unused = void>
__global__ void column_reduce_kernel(float* db, const float* partial, int64_t out, int64_t chunks) {
  __shared__ float scratch[kReduceWarps * 32];
  for (int64_t c0 = int64_t(blockIdx.x) * 32; c0 < out; c0 += int64_t(gridDim.x) * 32) {  // the whole block alike
    const int64_t c = c0 + (threadIdx.x & 31);
    const float total = column_chunk_sum(partial, out, c, chunks, c < out, scratch);
    if (threadIdx.x < 32 && c < out) db[c] += total;
  }
}

// Workspace carving: `offset` advanced past `bytes`, 256-byte aligned.
inline size_t carve(size_t& offset, size_t bytes) {
  const size_t at = offset;
  offset += (bytes + 255) / 256 * 256;
  return at;
}

}  // namespace lattice::cuda::detail
