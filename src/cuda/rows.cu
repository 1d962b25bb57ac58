// src/cuda's row kernels: LayerNorm, the causal softmax with the attention dropout, and the
// vocabulary-parallel cross-entropy's pieces (past the usual length: one family, the row launch and
// its reductions shared). One warp per row (LayerNorm, softmax) or one block per
// row (the cross-entropy's vocabulary-wide rows); each row's sums and maxima are fixed-tree warp or
// block reductions (cuda/common.cuh), so the bits repeat from run to run.
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/bf16_fused.hpp"
#include "cuda/kernels.hpp"
#include "random/philox_core.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

constexpr int kRowBlock = 256;
unsigned row_grid(int64_t rows) {
  if (rows > int64_t(0x7fffffff)) throw std::runtime_error("CUDA: too many rows for one launch");
  return unsigned(rows);
}

// The LayerNorm and softmax kernels take one warp per row (kRowBlock / 32 rows a block): a row of a
// few thousand columns is too short to keep a 256-thread block busy through two block-wide reductions
// (one block a row ran latency-bound on the H200: the softmax at a third of its memory bandwidth, the
// LayerNorm forward at 1.4 TB/s of its 4.8). Lane l takes columns l, l + 32, ...; the row's max and
// sums are warp_max / warp_sum, a fixed tree, so the bits repeat from run to run.
constexpr int kRowsPerBlock = kRowBlock / 32;
unsigned warp_row_grid(int64_t rows) { return row_grid((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// ---- LayerNorm ----
// One element's output from its statistics: y to out, or y and x narrowed to y16 and x16 (the bf16 pass).
__device__ __forceinline__ void layernorm_store(float* out, uint16_t* y16, uint16_t* x16, int64_t at, float x, float m,
                                                float r, float w, float b) {
  const float y = (x - m) * r * w + b;
  if (y16) {
    y16[at] = to_bf16_bits(y);
    x16[at] = to_bf16_bits(x);
  } else {
    out[at] = y;
  }
}
// One row per warp. y16 null: y is written as fp32 to out; else y and x narrowed to y16 and x16 (the
// bf16 pass: the same fp32 values, one pass, no fp32 y).
__global__ void layernorm_forward_kernel(float* out, uint16_t* y16, uint16_t* x16, float* mean, float* rstd,
                                         const float* inp, const float* weight, const float* bias, int64_t N,
                                         int64_t C) {
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // the whole warp: its lanes share the row
  const int lane = int(threadIdx.x & 31);
  const float* x = inp + n * C;
  float sum = 0.0f;
  for (int64_t i = lane; i < C; i += 32) sum += x[i];
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
  for (int64_t i = lane; i < C; i += 32) var += (x[i] - m) * (x[i] - m);
  var = warp_sum(var);
  const float r = 1.0f / sqrtf(var / float(C) + 1e-5f);
  for (int64_t i = lane; i < C; i += 32) layernorm_store(out, y16, x16, n * C + i, x[i], m, r, weight[i], bias[i]);
  if (lane == 0) mean[n] = m, rstd[n] = r;
}
// The same for rows of at most 32·CPL columns, the row read once into registers (lane l's columns l,
// l + 32, …): one memory round trip a row where the loops above read x three times, the last read
// after stores the compiler could not prove apart from it. The same sums in the same order and the
// same expressions, so the same bits (host-simulated training byte-equal to the form before at h 64,
// 512 and 1280; the kernel check compares each shape with the CPU's, 1e-5).
template <int CPL>
__global__ void layernorm_forward_rows_kernel(float* out, uint16_t* y16, uint16_t* x16, float* mean, float* rstd,
                                              const float* inp, const float* weight, const float* bias, int64_t N,
                                              int64_t C) {
  // The weights and biases copied into shared memory once a block (2·C floats): read from global
  // memory at each column's store they sat behind the stores before (which may alias them for all the
  // compiler knows), a load waited out a column at a time (nvcc 11.8's SASS: LDG, LDG, STG, STG, ...).
  // The same values, so the same bits.
  extern __shared__ float weights_biases[];
  for (int64_t i = threadIdx.x; i < 2 * C; i += blockDim.x) weights_biases[i] = i < C ? weight[i] : bias[i - C];
  __syncthreads();
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int lane = int(threadIdx.x & 31);
  const float* x = inp + n * C;
  float v[CPL];
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    const int64_t i = lane + 32 * k;
    v[k] = i < C ? x[i] : 0.0f;
  }
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < CPL; ++k)
    if (lane + 32 * k < C) sum += v[k];
  const float m = warp_sum(sum) / float(C);
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < CPL; ++k)
    if (lane + 32 * k < C) var += (v[k] - m) * (v[k] - m);
  var = warp_sum(var);
  const float r = 1.0f / sqrtf(var / float(C) + 1e-5f);
#pragma unroll
  for (int k = 0; k < CPL; ++k) {
    const int64_t i = lane + 32 * k;
    if (i >= C) break;
    layernorm_store(out, y16, x16, n * C + i, v[k], m, r, weights_biases[i], weights_biases[C + i]);
  }
  if (lane == 0) mean[n] = m, rstd[n] = r;
}
// The LayerNorm kernels that hold a row in registers take its columns a lane (CPL) as a template
// argument, one of 8, 16, 24, 32: f(std::integral_constant<int, CPL>) with the least that holds C
// columns; false (f not called) for rows past 1024 columns, which take the column loops.
template <class F>
bool with_columns_per_lane(int64_t C, F f) {
  if (C <= 256) f(std::integral_constant<int, 8>{});
  else if (C <= 512) f(std::integral_constant<int, 16>{});
  else if (C <= 768) f(std::integral_constant<int, 24>{});
  else if (C <= 1024) f(std::integral_constant<int, 32>{});
  else return false;
  return true;
}
void layernorm_forward_launch(float* out, uint16_t* y16, uint16_t* x16, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  const auto rows = [&](auto kernel, size_t smem) {
    kernel<<<warp_row_grid(N), kRowBlock, smem, stream>>>(out, y16, x16, mean, rstd, inp, weight, bias, N, C);
  };
  const bool held = with_columns_per_lane(C, [&](auto cpl) {
    constexpr int kCpl = decltype(cpl)::value;
    rows(layernorm_forward_rows_kernel<kCpl>, size_t(2 * C) * sizeof(float));  // its weights and biases
  });
  if (!held) rows(layernorm_forward_kernel, 0);
}

// dinp += the input gradient of one row per warp (kernels/layernorm.cpp's formula).
// T: the input as kept, fp32 or bf16 bits (read as fp32).
template <class T>
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const T* inp, const float* weight,
                                                const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;
  const int lane = int(threadIdx.x & 31);
  const T* xs = inp + n * C;
  const auto x = [xs](int64_t i) { return load_f32(xs, i); };
  const float* dy = dout + n * C;
  float* dx = dinp + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0.0f, b = 0.0f;
  for (int64_t i = lane; i < C; i += 32) {
    const float xhat = (x(i) - m) * r, dnorm = weight[i] * dy[i];
    a += dnorm;
    b += dnorm * xhat;
  }
  const float dnorm_mean = warp_sum(a) / float(C);
  const float dnorm_norm_mean = warp_sum(b) / float(C);
  // kColumnBatch columns' x, dy and dx loaded before any dx is stored: a store to dx may alias what a
  // later load reads, so the compiler could not start a load before the store ahead of it, and each
  // column's three loads waited out a memory round trip in turn. The same arithmetic, so the same bits.
  for (int64_t i0 = lane; i0 < C; i0 += 32 * kColumnBatch) {
    float xs_[kColumnBatch], g[kColumnBatch], d[kColumnBatch];
#pragma unroll
    for (int u = 0; u < kColumnBatch; ++u) {
      const int64_t i = i0 + 32 * u;
      if (i < C) xs_[u] = x(i), g[u] = dy[i], d[u] = dx[i];
    }
#pragma unroll
    for (int u = 0; u < kColumnBatch; ++u) {
      const int64_t i = i0 + 32 * u;
      if (i < C) {
        const float xhat = (xs_[u] - m) * r;
        dx[i] = d[u] + (weight[i] * g[u] - dnorm_mean - xhat * dnorm_norm_mean) * r;
      }
    }
  }
}

constexpr int64_t kChunkRows = 64;
int64_t chunks_of(int64_t N) { return (N + kChunkRows - 1) / kChunkRows; }

// partial[chunk][0, c] = Σ dy·x̂, partial[chunk][1, c] = Σ dy over the chunk's rows in order.
template <class T>
__global__ void layernorm_param_partials_kernel(float* partial, const float* dout, const T* inp, const float* mean,
                                                const float* rstd, int64_t N, int64_t C, int64_t chunks) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < chunks * C;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t chunk = k / C, c = k % C;
    const int64_t r1 = min(N, (chunk + 1) * kChunkRows);
    float dw = 0.0f, db = 0.0f;
    const auto add = [&](int64_t row, float dy, float x) {
      dw += dy * ((x - mean[row]) * rstd[row]);
      db += dy;
    };
    // kColumnBatch rows' dy and x loaded before any is used (column_partials_kernel's reason); the rows
    // still add in order.
    int64_t r = chunk * kChunkRows;
    for (; r + kColumnBatch <= r1; r += kColumnBatch) {
      float dy[kColumnBatch], x[kColumnBatch];
#pragma unroll
      for (int u = 0; u < kColumnBatch; ++u) dy[u] = dout[(r + u) * C + c], x[u] = load_f32(inp, (r + u) * C + c);
#pragma unroll
      for (int u = 0; u < kColumnBatch; ++u) add(r + u, dy[u], x[u]);
    }
    for (; r < r1; ++r) add(r, dout[r * C + c], load_f32(inp, r * C + c));
    partial[chunk * 2 * C + c] = dw;
    partial[chunk * 2 * C + C + c] = db;
  }
}
// The input gradient and the parameter partials in one pass, for rows of at most 32·CPL columns:
// block b takes chunk b's 64 rows, warp w its rows w, w + 8, … (layernorm_backward_input_kernel's
// arithmetic, a row a warp), each lane adding dy·x̂ and dy of its columns lane + 32k into registers as
// it writes the row's input gradient (no second read of dy and x); then the eight warps' sums go into
// partial[chunk] in warp order through shared memory. Fixed orders, so the bits repeat; a different
// order from the two-kernel form's (rows in turn), so its partials' bits differ from that form's.
template <class T, int CPL>
__global__ void layernorm_backward_fused_kernel(float* dinp, float* partial, const float* dout, const T* inp,
                                                const float* weight, const float* mean, const float* rstd, int64_t N,
                                                int64_t C) {
  extern __shared__ float sums[];  // 2·C: dw then db; then the weights, C
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int64_t chunk = blockIdx.x;
  // The weights copied into shared memory once a block: read from global memory inside each row they
  // sat behind dx's stores (which may alias them for all the compiler knows), so each of a row's
  // stores waited out its weight's load in turn, an L2 round trip once the streamed rows had pushed the
  // weights out of L1 (nvcc 11.8's SASS: LDG, STG, LDG, STG, ...; about 5 µs a row a warp on the H200,
  // run 7). Shared memory is apart from the stores' global memory, so its reads need not wait; held in
  // registers instead they cost 36 more a thread at h 512 (111 → 147: one block an SM, not two). The
  // same values, so the same bits.
  float* wts = sums + 2 * C;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) wts[i] = weight[i];
  __syncthreads();
  float dw[CPL], db[CPL];
#pragma unroll
  for (int k = 0; k < CPL; ++k) dw[k] = 0.0f, db[k] = 0.0f;
  for (int j = 0; j < int(kChunkRows / kRowsPerBlock); ++j) {
    const int64_t n = chunk * kChunkRows + j * kRowsPerBlock + warp;
    if (n >= N) break;  // the warp's later rows are past N too
    const T* xs = inp + n * C;
    const float* dy = dout + n * C;
    float* dx = dinp + n * C;
    const float m = mean[n], r = rstd[n];
    // The row's x, dy and dx in registers, every load issued before the first store: dx's stores may
    // alias x and dy for all the compiler knows, so loads left after them waited out a memory round
    // trip a column in turn (0.6 TB/s of the H200's 4.8, run 4). The same arithmetic, the same bits.
    float xhat[CPL], g[CPL], d[CPL];
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int64_t i = lane + 32 * k;
      if (i < C) xhat[k] = load_f32(xs, i), g[k] = dy[i], d[k] = dx[i];
    }
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int64_t i = lane + 32 * k;
      if (i < C) {
        xhat[k] = (xhat[k] - m) * r;
        const float dnorm = wts[i] * g[k];
        a += dnorm;
        b += dnorm * xhat[k];
      }
    }
    const float dnorm_mean = warp_sum(a) / float(C);
    const float dnorm_norm_mean = warp_sum(b) / float(C);
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
      const int64_t i = lane + 32 * k;
      if (i < C) {
        dx[i] = d[k] + (wts[i] * g[k] - dnorm_mean - xhat[k] * dnorm_norm_mean) * r;
        dw[k] += g[k] * xhat[k];
        db[k] += g[k];
      }
    }
  }
  for (int w = 0; w < kRowsPerBlock; ++w) {  // the warps' sums in order
    if (warp == w) {
#pragma unroll
      for (int k = 0; k < CPL; ++k) {
        const int64_t i = lane + 32 * k;
        if (i < C) {
          sums[i] = w == 0 ? dw[k] : sums[i] + dw[k];
          sums[C + i] = w == 0 ? db[k] : sums[C + i] + db[k];
        }
      }
    }
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < 2 * C; i += blockDim.x) partial[chunk * 2 * C + i] = sums[i];
}
__global__ void layernorm_param_reduce_kernel(float* dweight, float* dbias, const float* partial, int64_t C,
                                              int64_t chunks) {
  __shared__ float scratch[kReduceWarps * 32];
  for (int64_t c0 = int64_t(blockIdx.x) * 32; c0 < C; c0 += int64_t(gridDim.x) * 32) {  // the whole block alike
    const int64_t c = c0 + (threadIdx.x & 31);
    const float dw = column_chunk_sum(partial, 2 * C, c, chunks, c < C, scratch);
    const float db = column_chunk_sum(partial + C, 2 * C, c, chunks, c < C, scratch);
    if (threadIdx.x < 32 && c < C) dweight[c] += dw, dbias[c] += db;
  }
}

// ---- causal softmax ----
template <class T>
__device__ __forceinline__ void store_as(void* dst, int64_t at, float v) {
  static_cast<T*>(dst)[at] = stored_as<T>(v);
}

// A lane takes V columns at a time: 1, or 4 where s is a multiple of 4 (softmax_dropout_forward
// decides, and refuses buffers not aligned for it). Four columns are then one 16-byte load and one
// store, and one Philox block: s·s and i·s are multiples of 4, so global element first + j (j a
// multiple of 4) starts a block, whose four words are the group's four draws
// (random/philox_core.hpp). The scalar form drew a whole block for every element, four times the
// Philox work of the flags it kept.
// (Overloads, not `if constexpr`: nvcc 11.8 warns of a variable unused in a branch it discards.)
template <int V>
struct Group {
  float v[V];
};
__device__ __forceinline__ Group<1> load_group(const float* x, int64_t j, Group<1>*) { return {{x[j]}}; }
__device__ __forceinline__ Group<4> load_group(const float* x, int64_t j, Group<4>*) {
  const float4 f = *reinterpret_cast<const float4*>(x + j);
  return {{f.x, f.y, f.z, f.w}};
}
template <int V>
__device__ __forceinline__ Group<V> load_group(const float* x, int64_t j) {
  return load_group(x, j, static_cast<Group<V>*>(nullptr));
}
template <class T>
__device__ __forceinline__ void store_group(T* at, const float (&y)[1]) {
  *at = stored_as<T>(y[0]);
}
__device__ __forceinline__ void store_group(float* at, const float (&y)[4]) {
  *reinterpret_cast<float4*>(at) = make_float4(y[0], y[1], y[2], y[3]);
}
__device__ __forceinline__ void store_group(uint16_t* at, const float (&y)[4]) {
  *reinterpret_cast<uint2*>(at) = make_uint2(bf16_pair(y[0], y[1]), bf16_pair(y[2], y[3]));
}
// Keep flags of global elements index … index + V − 1 (bit k: element index + k); V = 4: index % 4 = 0.
__device__ __forceinline__ uint32_t keep_group(const PhiloxStreamWords& w, uint32_t threshold, uint64_t index,
                                               Group<1>*) {
  return philox_keep(w, threshold, index) ? 1u : 0u;
}
__device__ __forceinline__ uint32_t keep_group(const PhiloxStreamWords& w, uint32_t threshold, uint64_t index,
                                               Group<4>*) {
  const uint64_t block = index >> 2;
  uint32_t c[4] = {uint32_t(block), uint32_t(block >> 32), w.c2, w.c3};
  philox4x32_10(c, w.k0, w.k1);
  return uint32_t(c[0] >= threshold) | (uint32_t(c[1] >= threshold) << 1) | (uint32_t(c[2] >= threshold) << 2) |
         (uint32_t(c[3] >= threshold) << 3);
}
// The flags as bytes (1 kept, 0 dropped), the first at the lowest address.
__device__ __forceinline__ void store_mask(uint8_t* at, uint32_t keep, Group<1>*) { *at = uint8_t(keep); }
__device__ __forceinline__ void store_mask(uint8_t* at, uint32_t keep, Group<4>*) {
  *reinterpret_cast<uint32_t*>(at) =
      (keep & 1u) | (((keep >> 1) & 1u) << 8) | (((keep >> 2) & 1u) << 16) | (((keep >> 3) & 1u) << 24);
}

// Row `row` of the [batch, s, s] scores: query i = row % s attends to keys j <= i. probs and dropped
// (either may be null) are written as T; with dropout, the row's keep flags are drawn at
// attention_mask_first(bh) + i·s + j, as the CPU's softmax_dropout_forward draws them. V: columns a lane
// takes at a time (above); V = 1 is lane l on columns l, l + 32, ….
template <class T, int V>
__global__ void softmax_dropout_kernel(void* probs, uint8_t* mask, void* dropped, const float* scores, int64_t rows,
                                       int64_t s, PhiloxStreamWords words, uint32_t threshold, float scale,
                                       bool dropout, int64_t local_heads, int64_t first_row, int64_t heads_total,
                                       int64_t head0) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp: its lanes share the row
  const int lane = int(threadIdx.x & 31);
  const int64_t i = row % s, bh = row / s;
  const float* x = scores + row * s;
  float mx = -__int_as_float(0x7f800000);
  for (int64_t j = int64_t(lane) * V; j <= i; j += 32 * V) {
    const Group<V> g = load_group<V>(x, j);
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (j + k <= i) mx = fmaxf(mx, g.v[k]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int64_t j = int64_t(lane) * V; j <= i; j += 32 * V) {
    const Group<V> g = load_group<V>(x, j);
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (j + k <= i) sum += fast_exp(g.v[k] - mx);
  }
  const float inv = 1.0f / warp_sum(sum);
  uint64_t first = 0;
  if (dropout) {
    const int64_t bi = bh / local_heads, hd = bh % local_heads;
    const int64_t heads = heads_total ? heads_total : local_heads;
    first = uint64_t((first_row + bi) * heads + head0 + hd) * uint64_t(s) * uint64_t(s) + uint64_t(i * s);
  }
  for (int64_t j = int64_t(lane) * V; j < s; j += 32 * V) {
    float y[V];
    if (j <= i) {
      const Group<V> g = load_group<V>(x, j);
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = j + k <= i ? fast_exp(g.v[k] - mx) * inv : 0.0f;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) y[k] = 0.0f;
    }
    if (probs) store_group(static_cast<T*>(probs) + row * s + j, y);
    if (!dropout) continue;
    const uint32_t keep = keep_group(words, threshold, first + uint64_t(j), static_cast<Group<V>*>(nullptr));
    if (mask) store_mask(mask + row * s + j, keep, static_cast<Group<V>*>(nullptr));
    if (dropped) {
      float d[V];
#pragma unroll
      for (int k = 0; k < V; ++k) d[k] = ((keep >> k) & 1u) ? y[k] * scale : 0.0f;
      store_group(static_cast<T*>(dropped) + row * s + j, d);
    }
  }
}

// P: probs as kept (fp32, or bf16 bits read as fp32); D: dscores written as fp32 or narrowed to bf16.
template <class P, class D>
__global__ void softmax_backward_kernel(D* dscores, const float* dprobs, const P* probs, int64_t rows, int64_t s) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = int(threadIdx.x & 31);
  const int64_t i = row % s;
  const P* p = probs + row * s;
  const float* dp = dprobs + row * s;
  float dot = 0.0f;
  for (int64_t j = lane; j <= i; j += 32) dot += load_f32(p, j) * dp[j];
  dot = warp_sum(dot);  // every lane's reads of dp are done before any write of ds (they may alias)
  for (int64_t j = lane; j < s; j += 32)
    store_as<D>(dscores, row * s + j, j <= i ? load_f32(p, j) * (dp[j] - dot) : 0.0f);
}

// ---- vocabulary-parallel cross-entropy ----
// T: fp32 logits, or bf16 (the head GEMM's kept output) widened exactly: the same values, so the same bits.
template <class T>
__global__ void ce_max_target_kernel(float* row_max, float* target_logit, const T* logits, const int32_t* targets,
                                     int64_t v0, int64_t v_local, int64_t real) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* x = logits + n * v_local;
  float mx = -__int_as_float(0x7f800000);
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) mx = fmaxf(mx, load_f32(x, j));
  // + 0: a maximum of zero is +0 whichever zero the comparisons kept (fmaxf may return either of
  // ±0), so that a kernel taking the columns in another order keeps the bits (ce_whole_forward_kernel).
  mx = block_max(mx, scratch) + 0.0f;
  if (threadIdx.x == 0) {
    row_max[n] = mx;
    const int64_t t = int64_t(targets[n]) - v0;
    target_logit[n] = (t >= 0 && t < real) ? load_f32(x, t) : 0.0f;
  }
}
// One column's exponential: exp(x − mx) on the real columns, 0 on the padding. The one text of this
// step for the three kernels' second and the one-pass kernel below, so their bits agree.
__device__ __forceinline__ float ce_exp_value(float x, float mx, int64_t j, int64_t real) {
  return j < real ? fast_exp(x - mx) : 0.0f;
}
// One row's exponentials of x (fp32, or bf16 widened), stored into `exps` unless it is null (in place
// for the three kernels' second): returns their sum, each thread's columns in increasing order, then
// the block's fixed tree.
template <class T>
__device__ __forceinline__ float ce_exp_row_sum(const T* x, float* exps, float mx, int64_t v_local, int64_t real,
                                                float* scratch) {
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < v_local; j += blockDim.x) {
    const float e = ce_exp_value(load_f32(x, j), mx, j, real);
    if (exps) exps[j] = e;
    sum += e;
  }
  return block_sum(sum, scratch);
}
__device__ __forceinline__ float ce_row_loss(float mx, float sum, float target_logit) {
  return mx + logf(sum) - target_logit;
}
__global__ void ce_exp_sum_kernel(float* row_sum, float* logits, const float* row_max, int64_t v_local, int64_t real) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  float* row = logits + n * v_local;
  const float sum = ce_exp_row_sum(row, row, row_max[n], v_local, real, scratch);
  if (threadIdx.x == 0) row_sum[n] = sum;
}
// ce_exp_sum_kernel's sum over bf16 logits widened, the exponentials not stored (ce_exp_row_sum: the
// same columns a thread in the same order and the same tree, so the same bits).
__global__ void ce_exp_sum16_kernel(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t v_local,
                                    int64_t real) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const float sum = ce_exp_row_sum(logits16 + n * v_local, nullptr, row_max[n], v_local, real, scratch);
  if (threadIdx.x == 0) row_sum[n] = sum;
}
__global__ void ce_row_losses_kernel(float* losses, const float* row_max, const float* row_sum,
                                     const float* target_logit, int64_t N) {
  for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < N; n += int64_t(gridDim.x) * blockDim.x)
    losses[n] = ce_row_loss(row_max[n], row_sum[n], target_logit[n]);
}
__global__ void ce_normalize_kernel(float* logits, float* losses, const float* row_max, const float* row_sum,
                                    const float* target_logit, int64_t v_local, int64_t real) {
  const int64_t n = blockIdx.x;
  float* x = logits + n * v_local;
  const float inv = 1.0f / row_sum[n];
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) x[j] *= inv;
  if (threadIdx.x == 0) losses[n] = ce_row_loss(row_max[n], row_sum[n], target_logit[n]);
}
// The three pieces above for a row of the whole vocabulary (one rank, v0 = 0), the row held in
// shared memory: read from global memory once and written once, where the three kernels read it three
// times and write it twice. A row's 201 KB of shared memory leaves one block an SM, so the block is
// kCeWholeWide times the three kernels' (1024 threads): with 256, one row's loads, exponentials and
// stores ran one after another on a quarter of the SM's threads, at 1.1 TB/s on the H200 (run 4).
// Every value is still bitwise the three kernels' (the kernel check's [bits] line): the maximum is
// exact whatever the order (its zero made +0 in both), each exponential is ce_exp_value of the same
// inputs, and the sum is taken by the first kRowBlock threads alone, each over the three kernels'
// columns in their order, then the same tree (block_sum_of_warps).
constexpr int kCeWholeWide = 4;
constexpr int kCeWholeThreads = kCeWholeWide * kRowBlock;
// A row's columns [0, v_local), one or four a step (ce_whole_forward_kernel's two forms), fp32. Four:
// one 16-byte access where the scalar form made four, and 32-bit column counts (the one-pass kernel
// ran about 45 instructions a column, 2.0 TB/s of the H200's 4.8 in run 6).
template <int V>
struct CeColumns;
template <>
struct CeColumns<1> {
  static __device__ __forceinline__ Group<1> load(const float* p, int j) { return {{p[j]}}; }
  static __device__ __forceinline__ void store(float* p, int j, const Group<1>& g) { p[j] = g.v[0]; }
};
template <>
struct CeColumns<4> {
  static __device__ __forceinline__ Group<4> load(const float* p, int j) {
    const float4 f = *reinterpret_cast<const float4*>(p + j);
    return {{f.x, f.y, f.z, f.w}};
  }
  static __device__ __forceinline__ void store(float* p, int j, const Group<4>& g) {
    *reinterpret_cast<float4*>(p + j) = make_float4(g.v[0], g.v[1], g.v[2], g.v[3]);
  }
};
// V columns a thread a step: 1, or 4 where v_local is a multiple of 4 and the rows aligned for it
// (ce_whole_forward_launch decides). The probabilities overwrite the logits in place (the row is read
// whole before any of it is written). Each column's value is the same in both forms, so the bits are
// too. (Over bf16 logits: ce_whole_forward_bf16_kernel, which writes no probabilities.)
template <int V>
__global__ void __launch_bounds__(kCeWholeThreads)
    ce_whole_forward_kernel(float* probs, const float* logits, float* losses, float* row_max, float* row_sum,
                            float* target_logit, const int32_t* targets, int64_t v_local, int64_t real) {
  extern __shared__ float row[];  // v_local floats
  __shared__ float scratch[32];
  using Cols = CeColumns<V>;
  const int64_t n = blockIdx.x;
  const int tid = int(threadIdx.x), threads = int(blockDim.x);
  const int cols = int(v_local), reals = int(real);  // a row within shared memory: < 2^31 columns
  const int step = V * threads;
  const float* x = logits + n * v_local;
  float* y = probs + n * v_local;
  float mx = -__int_as_float(0x7f800000);
  // 16 columns a thread loaded before any is used (64 KB an SM in fp32).
  constexpr int kBatch = 16 / V;
  for (int base = V * tid; base < cols; base += kBatch * step) {
    Group<V> v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = base + u * step;
      if (j < cols) v[u] = Cols::load(x, j);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = base + u * step;
      if (j < cols) {
        Cols::store(row, j, v[u]);  // the padding's raw values too: the exponentials below zero them
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (j + e < reals) mx = fmaxf(mx, v[u].v[e]);
      }
    }
  }
  mx = block_max(mx, scratch) + 0.0f;  // its barriers order the row's stores before the reads below
  const int64_t t = targets[n];
  // Read before any thread writes the row back (the barriers below come first).
  const float tl = tid == 0 && t >= 0 && t < real ? load_f32(x, t) : 0.0f;
  for (int j = V * tid; j < cols; j += step) {
    Group<V> g = Cols::load(row, j);
#pragma unroll
    for (int e = 0; e < V; ++e) g.v[e] = ce_exp_value(g.v[e], mx, j + e, real);
    Cols::store(row, j, g);
  }
  __syncthreads();
  float sum = 0.0f;
  if (tid < kRowBlock) {
    // Eight of a thread's columns read before any is added (one shared-memory latency per eight, not
    // per column, on the eight warps that sum), then added in order: the same sum.
    constexpr int kSumBatch = 8;
    int j = tid;
    for (; j + (kSumBatch - 1) * kRowBlock < cols; j += kSumBatch * kRowBlock) {
      float e[kSumBatch];
#pragma unroll
      for (int u = 0; u < kSumBatch; ++u) e[u] = row[j + u * kRowBlock];
#pragma unroll
      for (int u = 0; u < kSumBatch; ++u) sum += e[u];
    }
    for (; j < cols; j += kRowBlock) sum += row[j];
  }
  sum = block_sum_of_warps(sum, scratch, kRowBlock / 32);
  const float inv = 1.0f / sum;
  for (int j = V * tid; j < cols; j += step) {
    Group<V> g = Cols::load(row, j);
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (j + e < reals) g.v[e] *= inv;
    Cols::store(y, j, g);
  }
  if (tid == 0) {
    row_max[n] = mx, row_sum[n] = sum, target_logit[n] = tl;
    losses[n] = ce_row_loss(mx, sum, tl);
  }
}
// The bf16 logits' one-pass form: each row's statistics and loss, no probabilities (the backward makes
// them again from the kept bf16 logits: kernels/bf16_fused.hpp). The row is kept in shared memory as
// it came, in bf16: 100 KB at GPT-2's vocabulary, so two blocks share an SM and one's loads run while
// the other computes. The exponentials are made by the first 256 threads as they sum (each its columns
// tid + 256k in order, then the same tree: the three kernels' sum, so their bits). Eight columns a
// step (v_local a multiple of 8, the rows 16-byte aligned: ce_whole_forward_bf16 decides).
constexpr int kCeHalfThreads = 2 * kRowBlock;
__global__ void __launch_bounds__(kCeHalfThreads, 2)
    ce_whole_forward_bf16_kernel(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                                 float* target_logit, const int32_t* targets, int64_t v_local, int64_t real) {
  extern __shared__ __align__(16) uint16_t row16[];  // v_local bf16
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const int tid = int(threadIdx.x), cols = int(v_local), reals = int(real);
  constexpr int kV = 8;
  const int step = kV * kCeHalfThreads;
  const uint16_t* x = logits16 + n * v_local;
  const auto widen8 = [](uint4 w, float (&f)[kV]) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 pair = bf16_pair_widened(u[i]);
      f[2 * i] = pair.x, f[2 * i + 1] = pair.y;
    }
  };
  float mx = -__int_as_float(0x7f800000);
  constexpr int kBatch = 4;  // 64 bytes a thread loaded before any is used (32 KB a block)
  for (int base = kV * tid; base < cols; base += kBatch * step) {
    uint4 w[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = base + u * step;
      if (j < cols) w[u] = *reinterpret_cast<const uint4*>(x + j);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int j = base + u * step;
      if (j < cols) {
        *reinterpret_cast<uint4*>(row16 + j) = w[u];
        float f[kV];
        widen8(w[u], f);
#pragma unroll
        for (int e = 0; e < kV; ++e)
          if (j + e < reals) mx = fmaxf(mx, f[e]);
      }
    }
  }
  mx = block_max(mx, scratch) + 0.0f;  // its barriers order the row's stores before the reads below
  const int64_t t = targets[n];
  const float tl = tid == 0 && t >= 0 && t < real ? from_bf16_bits(x[t]) : 0.0f;
  float sum = 0.0f;
  if (tid < kRowBlock) {
    constexpr int kSumBatch = 8;  // eight columns' exponentials made before any is added, then in order
    int j = tid;
    for (; j + (kSumBatch - 1) * kRowBlock < cols; j += kSumBatch * kRowBlock) {
      float e[kSumBatch];
#pragma unroll
      for (int u = 0; u < kSumBatch; ++u)
        e[u] = ce_exp_value(from_bf16_bits(row16[j + u * kRowBlock]), mx, j + u * kRowBlock, real);
#pragma unroll
      for (int u = 0; u < kSumBatch; ++u) sum += e[u];
    }
    for (; j < cols; j += kRowBlock) sum += ce_exp_value(from_bf16_bits(row16[j]), mx, j, real);
  }
  sum = block_sum_of_warps(sum, scratch, kRowBlock / 32);
  if (tid == 0) {
    row_max[n] = mx, row_sum[n] = sum, target_logit[n] = tl;
    losses[n] = ce_row_loss(mx, sum, tl);
  }
}
// A probability made again from its bf16 logit and the row's kept maximum and sum: ce_exp_value, then
// the normalisation's product on the real columns (ce_normalize_kernel's and ce_whole_forward_kernel's
// element math, so their bits).
__device__ __forceinline__ float ce_prob_again(float x, float mx, float inv, int64_t j, int64_t real) {
  const float e = ce_exp_value(x, mx, j, real);
  return j < real ? e * inv : e;
}
// One column's gradient from its probability: p·scale rounded, then the target's −scale after it (the
// CPU's order, kernels/vocab_shard.cpp). The one text of this element for both backward kernels.
__device__ __forceinline__ float ce_grad_value(float p, float scale, bool target) {
  const float g = __fmul_rn(p, scale);
  return target ? g - scale : g;
}
// dlogits16 = bf16((p − onehot) · scale) with p made again (ce_prob_again), ce_grad_value's element.
// W columns a thread a step: 1, or 8 (v_local a multiple of 8, both rows 16-byte aligned: one 16-byte
// load and store of eight bf16).
template <int W>
__global__ void ce_backward_from_logits_kernel(uint16_t* dlogits16, const uint16_t* logits16, const float* row_max,
                                               const float* row_sum, const int32_t* targets, int64_t v0,
                                               int64_t v_local, int64_t real, float scale) {
  const int64_t n = blockIdx.x, t = int64_t(targets[n]) - v0;
  const float mx = row_max[n], inv = 1.0f / row_sum[n];
  const uint16_t* x = logits16 + n * v_local;
  uint16_t* d = dlogits16 + n * v_local;
  const auto grad = [&](float logit, int64_t j) {
    return ce_grad_value(ce_prob_again(logit, mx, inv, j, real), scale, j == t);
  };
  if constexpr (W == 1) {
    for (int64_t j = threadIdx.x; j < v_local; j += blockDim.x) d[j] = to_bf16_bits(grad(from_bf16_bits(x[j]), j));
  } else {
    for (int64_t j = int64_t(threadIdx.x) * 8; j < v_local; j += int64_t(blockDim.x) * 8) {
      const uint4 w = *reinterpret_cast<const uint4*>(x + j);
      const uint32_t in[4] = {w.x, w.y, w.z, w.w};
      uint32_t out[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 pair = bf16_pair_widened(in[i]);
        out[i] = bf16_pair(grad(pair.x, j + 2 * i), grad(pair.y, j + 2 * i + 1));
      }
      *reinterpret_cast<uint4*>(d + j) = make_uint4(out[0], out[1], out[2], out[3]);
    }
  }
}
// The fp32 gradient from kept probabilities (dlogits may alias probs).
__global__ void ce_backward_kernel(float* dlogits, const float* probs, const int32_t* targets, int64_t v0,
                                   int64_t v_local, float scale) {
  const int64_t n = blockIdx.x, t = int64_t(targets[n]) - v0;
  const float* p = probs + n * v_local;
  float* d = dlogits + n * v_local;
  for (int64_t j = threadIdx.x; j < v_local; j += blockDim.x) d[j] = ce_grad_value(p[j], scale, j == t);
}

// The same, four columns a thread (v_local a multiple of 4, both rows 16-byte aligned): one 16-byte
// load where the scalar form waited on one 4-byte load at a time (its fp32 form moved 0.7 TB/s of the H200's 4.8,
// 2026-11-27 profile). The same element math, so the same bits.
__global__ void ce_backward_x4_kernel(float* dlogits, const float* probs, const int32_t* targets, int64_t v0,
                                      int64_t v_local, float scale) {
  const int64_t n = blockIdx.x, t = int64_t(targets[n]) - v0;
  const float4* p = reinterpret_cast<const float4*>(probs + n * v_local);
  float4* d = reinterpret_cast<float4*>(dlogits + n * v_local);
  for (int64_t j4 = threadIdx.x; j4 < v_local / 4; j4 += blockDim.x) {
    const float4 x = p[j4];
    const int64_t j = 4 * j4;
    d[j4] = make_float4(ce_grad_value(x.x, scale, j == t), ce_grad_value(x.y, scale, j + 1 == t),
                        ce_grad_value(x.z, scale, j + 2 == t), ce_grad_value(x.w, scale, j + 3 == t));
  }
}
void ce_backward_launch(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t v_local,
                        int64_t N, float scale, cudaStream_t stream) {
  if (v_local % 4 == 0 && aligned_to(probs, 16) && aligned_to(dlogits, 16))
    ce_backward_x4_kernel<<<row_grid(N), kRowBlock, 0, stream>>>(dlogits, probs, targets, v0, v_local, scale);
  else
    ce_backward_kernel<<<row_grid(N), kRowBlock, 0, stream>>>(dlogits, probs, targets, v0, v_local, scale);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0) return;
  layernorm_forward_launch(out, nullptr, nullptr, mean, rstd, inp, weight, bias, N, C, stream);
  check_launch("layernorm_forward");
}
void layernorm_forward_bf16(uint16_t* x16, uint16_t* y16, float* mean, float* rstd, const float* x, const float* weight,
                            const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0) return;
  layernorm_forward_launch(nullptr, y16, x16, mean, rstd, x, weight, bias, N, C, stream);
  check_launch("layernorm_forward_bf16");
}

size_t layernorm_backward_workspace_bytes(int64_t N, int64_t C) { return size_t(chunks_of(N) * 2 * C) * sizeof(float); }

namespace {
template <class T>
void layernorm_backward_of(float* dinp, float* dweight, float* dbias, const float* dout, const T* inp,
                           const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C, Workspace ws,
                           cudaStream_t stream) {
  if (N <= 0) return;
  if (ws.bytes < layernorm_backward_workspace_bytes(N, C) || !ws.data)
    throw std::runtime_error("CUDA: layernorm_backward: workspace too small");
  const int64_t chunks = chunks_of(N);
  float* partial = static_cast<float*>(ws.data);
  // Rows of up to 1024 columns: the input gradient and the partials in one pass (the partials' own
  // pass read dy and x again: 150 MB a LayerNorm at GPT-2's micro-batch 32). Wider rows: two kernels.
  const auto fused = [&](auto kernel) {
    if (chunks > int64_t(0x7fffffff)) throw std::runtime_error("CUDA: layernorm_backward: too many rows");
    kernel<<<unsigned(chunks), kRowBlock, size_t(3 * C) * sizeof(float), stream>>>(dinp, partial, dout, inp, weight,
                                                                                    mean, rstd, N, C);
    check_launch("layernorm_backward fused");
  };
  const bool held = with_columns_per_lane(C, [&](auto cpl) {
    constexpr int kCpl = decltype(cpl)::value;
    fused(layernorm_backward_fused_kernel<T, kCpl>);
  });
  if (!held) {
    layernorm_backward_input_kernel<T><<<warp_row_grid(N), kRowBlock, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                                  rstd, N, C);
    check_launch("layernorm_backward input");
    layernorm_param_partials_kernel<T><<<grid_for(chunks * C), kBlock, 0, stream>>>(partial, dout, inp, mean, rstd,
                                                                                     N, C, chunks);
    check_launch("layernorm_backward partials");
  }
  layernorm_param_reduce_kernel<<<column_group_grid(C), kReduceWarps * 32, 0, stream>>>(dweight, dbias, partial, C,
                                                                                          chunks);
  check_launch("layernorm_backward reduce");
}
}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C, Workspace ws,
                        cudaStream_t stream) {
  layernorm_backward_of(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, ws, stream);
}
void layernorm_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                             Workspace ws, cudaStream_t stream) {
  layernorm_backward_of(dinp, dweight, dbias, dout, inp16, weight, mean, rstd, N, C, ws, stream);
}

void softmax_causal_forward(float* probs, const float* scores, int64_t batch, int64_t s, cudaStream_t stream) {
  softmax_dropout_forward(probs, nullptr, nullptr, DType::fp32, scores, 1, batch, s, AttentionDropout{}, stream);
}

void softmax_dropout_forward(void* probs, uint8_t* mask, void* dropped, DType dtype, const float* scores,
                             int64_t local_heads, int64_t batch, int64_t s, const AttentionDropout& drop,
                             cudaStream_t stream) {
  if (batch * s <= 0) return;
  const bool dropout = drop.p > 0.0f;
  const PhiloxStreamWords words =
      philox_stream_words(drop.stream.seed, drop.stream.step, drop.stream.layer, uint32_t(DropoutSite::attention));
  const uint32_t threshold = dropout_keep_threshold(drop.p);
  const float scale = dropout ? 1.0f / (1.0f - drop.p) : 1.0f;
  // Four columns a lane wherever s allows it, decided by the shape alone: the two forms add a row's sum
  // in different orders, so a recompute must take the form its forward took whatever buffers it is
  // given. The four-column form's 16-byte loads and 4-element stores need aligned buffers: every
  // caller's come whole from the device allocator (256-byte aligned); one that does not is refused.
  const bool x4 = s % 4 == 0;
  const uintptr_t out_align = dtype == DType::fp32 ? 16 : 8;
  if (x4 && !(aligned_to(scores, 16) && aligned_to(probs, out_align) && aligned_to(dropped, out_align) &&
              aligned_to(mask, 4)))
    throw std::invalid_argument("CUDA: softmax_dropout_forward: a buffer not aligned for four columns a lane");
  const auto launch = [&](auto kernel) {
    kernel<<<warp_row_grid(batch * s), kRowBlock, 0, stream>>>(probs, mask, dropped, scores, batch * s, s, words,
                                                               threshold, scale, dropout, local_heads,
                                                               drop.first_row, drop.heads_total, drop.head0);
  };
  if (dtype == DType::fp32)
    x4 ? launch(softmax_dropout_kernel<float, 4>) : launch(softmax_dropout_kernel<float, 1>);
  else
    x4 ? launch(softmax_dropout_kernel<uint16_t, 4>) : launch(softmax_dropout_kernel<uint16_t, 1>);
  check_launch("softmax_dropout_forward");
}

void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s,
                             cudaStream_t stream) {
  if (batch * s <= 0) return;
  softmax_backward_kernel<float, float><<<warp_row_grid(batch * s), kRowBlock, 0, stream>>>(dscores, dprobs, probs,
                                                                                          batch * s, s);
  check_launch("softmax_causal_backward");
}
void softmax_causal_backward_bf16(uint16_t* ds16, const float* dprobs, const uint16_t* probs16, int64_t batch,
                                  int64_t s, cudaStream_t stream) {
  if (batch * s <= 0) return;
  softmax_backward_kernel<uint16_t, uint16_t><<<warp_row_grid(batch * s), kRowBlock, 0, stream>>>(ds16, dprobs,
                                                                                                probs16, batch * s, s);
  check_launch("softmax_causal_backward_bf16");
}

namespace {
template <class T>  // fp32 or bf16 logits: ce_max_target_kernel's two forms
void max_target_launch(float* row_max, float* target_logit, const T* logits, const int32_t* targets, int64_t v0,
                       int64_t v_local, int64_t real, int64_t N, cudaStream_t stream, const char* name) {
  if (N <= 0) return;
  ce_max_target_kernel<<<row_grid(N), kRowBlock, 0, stream>>>(row_max, target_logit, logits, targets, v0, v_local,
                                                               real);
  check_launch(name);
}
}  // namespace
void ce_shard_max_target(float* row_max, float* target_logit, const float* logits, const int32_t* targets,
                         int64_t v0, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream) {
  max_target_launch(row_max, target_logit, logits, targets, v0, v_local, real, N, stream, "ce_shard_max_target");
}
void ce_shard_exp_sum(float* row_sum, float* logits, const float* row_max, int64_t v_local, int64_t real, int64_t N,
                      cudaStream_t stream) {
  if (N <= 0) return;
  ce_exp_sum_kernel<<<row_grid(N), kRowBlock, 0, stream>>>(row_sum, logits, row_max, v_local, real);
  check_launch("ce_shard_exp_sum");
}
void ce_shard_normalize(float* logits, float* losses, const float* row_max, const float* row_sum,
                        const float* target_logit, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream) {
  if (N <= 0) return;
  ce_normalize_kernel<<<row_grid(N), kRowBlock, 0, stream>>>(logits, losses, row_max, row_sum, target_logit, v_local,
                                                              real);
  check_launch("ce_shard_normalize");
}
void ce_shard_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t v_local,
                       int64_t N, float scale, cudaStream_t stream) {
  if (N <= 0) return;
  ce_backward_launch(dlogits, probs, targets, v0, v_local, N, scale, stream);
  check_launch("ce_shard_backward");
}
void ce_shard_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* row_max,
                            const float* row_sum, const int32_t* targets, int64_t v0, int64_t v_local, int64_t real,
                            int64_t N, float scale, cudaStream_t stream) {
  if (N <= 0) return;
  if (v_local % 8 == 0 && aligned_to(logits16, 16) && aligned_to(dlogits16, 16))
    ce_backward_from_logits_kernel<8><<<row_grid(N), kRowBlock, 0, stream>>>(dlogits16, logits16, row_max, row_sum,
                                                                            targets, v0, v_local, real, scale);
  else
    ce_backward_from_logits_kernel<1><<<row_grid(N), kRowBlock, 0, stream>>>(dlogits16, logits16, row_max, row_sum,
                                                                            targets, v0, v_local, real, scale);
  check_launch("ce_shard_backward_bf16");
}
void ce_shard_max_target_bf16(float* row_max, float* target_logit, const uint16_t* logits16, const int32_t* targets,
                              int64_t v0, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream) {
  max_target_launch(row_max, target_logit, logits16, targets, v0, v_local, real, N, stream, "ce_shard_max_target_bf16");
}
void ce_shard_exp_sum_bf16(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t v_local,
                           int64_t real, int64_t N, cudaStream_t stream) {
  if (N <= 0) return;
  ce_exp_sum16_kernel<<<row_grid(N), kRowBlock, 0, stream>>>(row_sum, logits16, row_max, v_local, real);
  check_launch("ce_shard_exp_sum_bf16");
}
void ce_row_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int64_t N,
                   cudaStream_t stream) {
  if (N <= 0) return;
  ce_row_losses_kernel<<<grid_for(N), kBlock, 0, stream>>>(losses, row_max, row_sum, target_logit, N);
  check_launch("ce_row_losses");
}

namespace {
// A row of v_local values of `bytes` each, the reduction's 32 floats and the runtime's reserve within
// what a block may opt in to.
bool ce_row_fits(int64_t v_local, size_t bytes) {
  return v_local > 0 && size_t(v_local) * bytes + 1024 <= size_t(smem_optin());
}
}  // namespace
bool ce_whole_forward_fused(int64_t v_local) { return ce_row_fits(v_local, sizeof(float)); }
namespace {
// The one-pass kernel for a row that fits (ce_whole_forward_fused): four columns a step where the
// rows allow it.
void ce_whole_forward_launch(float* probs, const float* logits, float* losses, float* row_max, float* row_sum,
                             float* target_logit, const int32_t* targets, int64_t v_local, int64_t real, int64_t N,
                             cudaStream_t stream) {
  const size_t bytes = size_t(v_local) * sizeof(float);
  // Opted in at every size: the kernel's static reduction scratch counts against the default 48 KiB too,
  // so a row just under it would not launch without.
  const auto launch = [&](auto kernel) {
    allow_smem(kernel, bytes, "ce_whole_forward");
    kernel<<<row_grid(N), kCeWholeThreads, bytes, stream>>>(probs, logits, losses, row_max, row_sum, target_logit,
                                                            targets, v_local, real);
    check_launch("ce_whole_forward");
  };
  if (v_local % 4 == 0 && aligned_to(probs, 16) && aligned_to(logits, 16))
    launch(ce_whole_forward_kernel<4>);
  else
    launch(ce_whole_forward_kernel<1>);
}
}  // namespace

void ce_whole_forward(float* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                      const int32_t* targets, int64_t v_local, int64_t real, int64_t N, cudaStream_t stream) {
  if (N <= 0) return;
  if (!ce_whole_forward_fused(v_local)) {  // a vocabulary row past shared memory: the three kernels
    ce_shard_max_target(row_max, target_logit, logits, targets, 0, v_local, real, N, stream);
    ce_shard_exp_sum(row_sum, logits, row_max, v_local, real, N, stream);
    ce_shard_normalize(logits, losses, row_max, row_sum, target_logit, v_local, real, N, stream);
    return;
  }
  ce_whole_forward_launch(logits, logits, losses, row_max, row_sum, target_logit, targets, v_local, real, N, stream);
}
void ce_whole_forward_bf16(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                           float* target_logit, const int32_t* targets, int64_t v_local, int64_t real, int64_t N,
                           cudaStream_t stream) {
  if (N <= 0) return;
  const size_t bytes = size_t(v_local) * sizeof(uint16_t);
  if (v_local % 8 == 0 && aligned_to(logits16, 16) && ce_row_fits(v_local, sizeof(uint16_t))) {
    allow_smem(ce_whole_forward_bf16_kernel, bytes, "ce_whole_forward_bf16");  // ce_whole_forward_launch's reason
    ce_whole_forward_bf16_kernel<<<row_grid(N), kCeHalfThreads, bytes, stream>>>(logits16, losses, row_max, row_sum,
                                                                                 target_logit, targets, v_local, real);
    check_launch("ce_whole_forward_bf16");
    return;
  }
  // Elsewhere the pieces (reading the row twice; no all-reduce between them on one shard).
  ce_shard_max_target_bf16(row_max, target_logit, logits16, targets, 0, v_local, real, N, stream);
  ce_shard_exp_sum_bf16(row_sum, logits16, row_max, v_local, real, N, stream);
  ce_row_losses(losses, row_max, row_sum, target_logit, N, stream);
}

size_t cross_entropy_workspace_bytes(int64_t N) { return 3 * size_t(N) * sizeof(float); }
void cross_entropy_forward(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                           Workspace ws, cudaStream_t stream) {
  if (ws.bytes < cross_entropy_workspace_bytes(N) || (N > 0 && !ws.data))
    throw std::runtime_error("CUDA: cross_entropy_forward: workspace too small");
  float* row_max = static_cast<float*>(ws.data);
  float* target_logit = row_max + N;
  float* row_sum = target_logit + N;
  ce_whole_forward(logits, losses, row_max, row_sum, target_logit, targets, Vp, V, N, stream);
}
void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t Vp,
                            float scale, cudaStream_t stream) {
  ce_shard_backward(dlogits, probs, targets, 0, Vp, N, scale, stream);
}

}  // namespace lattice::cuda
