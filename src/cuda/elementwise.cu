// src/cuda's element-wise kernels: embedding, GeLU, bias, residual, dropout, AdamW, the gradient's sum
// of squares, bf16 casts. The reductions (embedding and bias backward, sum of squares) run in fixed
// orders with no atomics (cuda/kernels.hpp). Past the usual length: each kernel sits beside its launch
// (the four-wide and one-a-thread forms, the workspace checks), and the launches share this file's
// helpers.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/bf16_fused.hpp"
#include "cuda/kernels.hpp"
#include "random/philox_core.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

// ---- embedding ----
__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* wte, const float* wpe,
                                         int64_t s, int64_t h, int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / h, i = k % h;
    out[k] = wte[int64_t(ids[n]) * h + i] + wpe[(n % s) * h + i];
  }
}

__global__ void iota_kernel(uint32_t* v, int64_t n) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    v[k] = uint32_t(k);
}

// The rows of a run of one id (sorted positions [k, end)) added into `row`, a column a thread, token by
// token in token order (the radix sort is stable): the bits of adding them one at a time. Two things
// made the most frequent token's run bound the whole backward (1.36 ms a step of GPT-2 at micro-batch
// 32 on the H200, run 6, where the embedding's gradient is 100 MB): the run's end was found by a walk
// of dependent loads, one a token, and each column's rows were loaded one at a time. Now the end is a
// binary search (the ids are sorted, so sorted_ids[t] == id exactly for t < end), and kRunBatch rows'
// token numbers, then their values, are loaded before any is added.
constexpr int kRunBatch = 16;
__device__ void add_token_run(float* row, const float* dout, const uint32_t* sorted_ids, const uint32_t* sorted_tokens,
                              int64_t k, uint32_t id, int64_t N, int64_t h) {
  int64_t lo = k + 1, hi = N;  // the run's end lies in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted_ids[mid] == id) lo = mid + 1;
    else hi = mid;
  }
  const int64_t end = lo;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float acc = row[i];
    int64_t t = k;
    for (; t + kRunBatch <= end; t += kRunBatch) {
      int64_t src[kRunBatch];
#pragma unroll
      for (int u = 0; u < kRunBatch; ++u) src[u] = int64_t(sorted_tokens[t + u]) * h + i;
      float v[kRunBatch];
#pragma unroll
      for (int u = 0; u < kRunBatch; ++u) v[u] = dout[src[u]];
#pragma unroll
      for (int u = 0; u < kRunBatch; ++u) acc += v[u];
    }
    for (; t < end; ++t) acc += dout[int64_t(sorted_tokens[t]) * h + i];
    row[i] = acc;
  }
}
// Threads a block of the runs' kernels: a column each up to 1024 (one column at a time each was three
// chains in turn a thread for GPT-2's 768 columns at 256 threads); the kernels are bounded for 1024.
inline unsigned run_block(int64_t h) { return unsigned(std::clamp<int64_t>((h + 31) / 32 * 32, 32, 1024)); }

// One block per position k of the tokens sorted by id; the block at the start of a run of equal ids adds
// the run's gradients into that row of dwte (add_token_run).
__global__ void __launch_bounds__(1024)
    embedding_tokens_backward_kernel(float* dwte, const float* dout, const uint32_t* sorted_ids,
                                     const uint32_t* sorted_tokens, int64_t N, int64_t h) {
  const int64_t k = blockIdx.x;
  const uint32_t id = sorted_ids[k];
  if (k > 0 && sorted_ids[k - 1] == id) return;
  add_token_run(dwte + int64_t(id) * h, dout, sorted_ids, sorted_tokens, k, id, N, h);
}

// dwpe[p, i] += Σ_bi dout[bi, p, i], the rows in order.
__global__ void embedding_positions_backward_kernel(float* dwpe, const float* dout, int64_t b, int64_t s, int64_t h) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < s * h; k += int64_t(gridDim.x) * blockDim.x) {
    float acc = dwpe[k];
    for (int64_t bi = 0; bi < b; ++bi) acc += dout[bi * s * h + k];
    dwpe[k] = acc;
  }
}

int id_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) < vocab) ++bits;
  return bits;
}

struct EmbeddingWorkspace {
  size_t sorted_ids, tokens, sorted_tokens, temp, temp_bytes, total;
};
EmbeddingWorkspace embedding_layout(int64_t N, int bits) {
  EmbeddingWorkspace w{};
  check(cub::DeviceRadixSort::SortPairs(nullptr, w.temp_bytes, static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), N, 0, bits),
        "radix sort size");
  size_t at = 0;
  const size_t words = size_t(N) * sizeof(uint32_t);
  w.sorted_ids = carve(at, words);
  w.tokens = carve(at, words);
  w.sorted_tokens = carve(at, words);
  w.temp = carve(at, w.temp_bytes);
  w.total = at;
  return w;
}

// ---- GeLU (the element math in cuda/common.cuh, shared with the bf16 passes) ----
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = gelu_value(inp[i]);
}
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dinp[i] = dout[i] * gelu_grad(inp[i]);
}

// ---- bias, residual ----
__global__ void bias_add_rows_kernel(float* y, const float* bias, int64_t out, int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x)
    y[k] += bias[k % out];
}
__global__ void residual_add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}
// Four elements a group, two groups a thread loaded before either is stored (grid_stride_in_flight):
// 64 bytes of loads in flight a thread (one group moved 3.5 TB/s of the H200's 4.8, run 4).
constexpr int kResidualGroups = 2;
__global__ void residual_add_x4_kernel(float4* x, const float4* y, int64_t n4) {
  struct Pair {
    float4 a, b;
  };
  grid_stride_in_flight<kResidualGroups>(
      n4, [&](int64_t i) { return Pair{x[i], y[i]}; },
      [&](int64_t i, Pair v) {
        v.a.x += v.b.x, v.a.y += v.b.y, v.a.z += v.b.z, v.a.w += v.b.w;
        x[i] = v.a;
      });
}

// bias_backward's element: dy itself.
struct ReadElement {
  const float* dy;
  int64_t out;
  using Input = float;
  __device__ Input load(int64_t r, int64_t c) const { return dy[r * out + c]; }
  __device__ float finish(int64_t, int64_t, Input v) const { return v; }
};

// ---- dropout ----
// One thread per Philox block (four elements) of the global range [first, first + n).
__global__ void dropout_mask_kernel(uint8_t* mask, PhiloxStreamWords words, uint32_t threshold, uint64_t first,
                                    int64_t n) {
  const uint64_t block0 = first >> 2, last = first + uint64_t(n);
  const int64_t blocks = int64_t(((last + 3) >> 2) - block0);
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < blocks; k += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t blk = block0 + uint64_t(k);
    uint32_t c[4] = {uint32_t(blk), uint32_t(blk >> 32), words.c2, words.c3};
    philox4x32_10(c, words.k0, words.k1);
    for (int w = 0; w < 4; ++w) {
      const uint64_t idx = (blk << 2) + uint64_t(w);
      if (idx >= first && idx < last) mask[idx - first] = c[w] >= threshold ? 1 : 0;
    }
  }
}
__global__ void dropout_apply_kernel(float* out, const float* inp, const uint8_t* mask, int64_t n, float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = mask[i] ? inp[i] * scale : 0.0f;
}

// ---- optimizer ----
// One element's update: the gradient read times grad_scale (clipping's factor; × 1 is exact), the
// product the CPU's fused update takes. Returns the new weight. Every rounding is spelled out (the
// _rn intrinsics, which nvcc never contracts into other operations): with the expressions left to
// -fmad, adamw_update_segments' weights differed from one call a segment's on the H200 (2026-11-27)
// while their m and v agreed, as a product fused in one kernel and not in the other would make them.
__device__ __forceinline__ float adamw_element(float& m, float& v, float& w, float grad, float decay,
                                               const AdamWScalars& a, float grad_scale) {
  const float g = __fmul_rn(grad, grad_scale);
  m = __fmaf_rn(a.b1, m, __fmul_rn(__fsub_rn(1.0f, a.b1), g));
  v = __fmaf_rn(a.b2, v, __fmul_rn(__fmul_rn(__fsub_rn(1.0f, a.b2), g), g));
  const float denom = __fmaf_rn(__fsqrt_rn(v), a.inv_sqrt_bc2, a.eps);
  w = __fmaf_rn(w, decay, -__fdiv_rn(__fmul_rn(a.step_size, m), denom));
  return w;
}
// w16 non-null: the updated weight narrowed too (adamw_update_bf16).
__device__ __forceinline__ void adamw_one(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t i,
                                          float decay, const AdamWScalars& a, float grad_scale) {
  float mi = m[i], vi = v[i], wi = w[i];
  adamw_element(mi, vi, wi, grad[i], decay, a, grad_scale);
  m[i] = mi, v[i] = vi, w[i] = wi;
  if (w16) w16[i] = to_bf16_bits(wi);
}
__global__ void adamw_kernel(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t n, float decay,
                             AdamWScalars a, float grad_scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_one(m, v, w, w16, grad, i, decay, a, grad_scale);
}
// Four elements of the same update, group i (16-byte loads and stores; w16 8-byte).
__device__ __forceinline__ void adamw_four(float4* m, float4* v, float4* w, uint2* w16, const float4* grad,
                                           int64_t i, float decay, const AdamWScalars& a, float grad_scale) {
  float4 mi = m[i], vi = v[i], wi = w[i];
  const float4 g = grad[i];
  adamw_element(mi.x, vi.x, wi.x, g.x, decay, a, grad_scale);
  adamw_element(mi.y, vi.y, wi.y, g.y, decay, a, grad_scale);
  adamw_element(mi.z, vi.z, wi.z, g.z, decay, a, grad_scale);
  adamw_element(mi.w, vi.w, wi.w, g.w, decay, a, grad_scale);
  m[i] = mi, v[i] = vi, w[i] = wi;
  if (w16) w16[i] = make_uint2(bf16_pair(wi.x, wi.y), bf16_pair(wi.z, wi.w));
}
// The same, four elements a thread where the pointers allow.
__global__ void adamw_x4_kernel(float4* m, float4* v, float4* w, uint2* w16, const float4* grad, int64_t n4,
                                float decay, AdamWScalars a, float grad_scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x)
    adamw_four(m, v, w, w16, grad, i, decay, a, grad_scale);
}

// A segment's place in adamw_segments_kernel's grid: its blocks from `first`, `units` work items (its
// four-element groups then its tail elements where `x4`, else its elements).
struct AdamWBlocks {
  AdamWSegment s;
  int64_t first, blocks, units, n4;
  bool x4;
};
// A block table's entry for block b: the last one whose blocks start at or before it (the tables of
// adamw_update_segments and grad_sums_squares, each entry's blocks from `first`).
template <class Entry>
__device__ int entry_of_block(const Entry* table, int count, int64_t b) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (table[mid].first <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
__global__ void adamw_segments_kernel(const AdamWBlocks* table, int count, AdamWScalars a) {
  const int64_t b = blockIdx.x;
  const AdamWBlocks t = table[entry_of_block(table, count, b)];
  const AdamWSegment& s = t.s;
  const int64_t stride = t.blocks * blockDim.x;
  for (int64_t u = (b - t.first) * blockDim.x + threadIdx.x; u < t.units; u += stride) {
    if (t.x4 && u < t.n4) {
      adamw_four(reinterpret_cast<float4*>(s.m), reinterpret_cast<float4*>(s.v), reinterpret_cast<float4*>(s.w),
                 reinterpret_cast<uint2*>(s.w16), reinterpret_cast<const float4*>(s.grad), u, s.decay, a, s.grad_scale);
    } else {
      adamw_one(s.m, s.v, s.w, s.w16, s.grad, t.x4 ? 4 * t.n4 + (u - t.n4) : u, s.decay, a, s.grad_scale);
    }
  }
}

constexpr int kSumBlocks = 1024;  // fixed: the order of the sum does not depend on n's size
__global__ void sum_squares_partial_kernel(double* partial, const float* g, int64_t n) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(g[i]) * double(g[i]);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
__global__ void sum_squares_final_kernel(double* out, const double* partial) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int k = int(threadIdx.x); k < kSumBlocks; k += int(blockDim.x)) acc += partial[k];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}
// The batched sums (grad_sums_squares): block b of the flat grid is block b − first of the piece
// whose [first, first + blocks) holds it, found by binary search in the piece table (a few hundred
// entries, the same reads for every thread of the block).
struct PieceBlocks {
  const float* data;
  int64_t n, first;
  int64_t blocks;
};
constexpr int64_t kPieceMinPerBlock = 2048;
int64_t piece_blocks(int64_t n) {
  const int64_t b = (n + kPieceMinPerBlock - 1) / kPieceMinPerBlock;
  return b < 1 ? 1 : (b > kSumBlocks ? kSumBlocks : b);
}
__global__ void sum_squares_pieces_kernel(double* partial, const PieceBlocks* pieces, int count, int64_t total) {
  __shared__ double scratch[32];
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x) {  // the whole block alike
    const PieceBlocks pc = pieces[entry_of_block(pieces, count, b)];
    const int64_t stride = pc.blocks * blockDim.x;
    double acc = 0.0;
    for (int64_t i = (b - pc.first) * blockDim.x + threadIdx.x; i < pc.n; i += stride)
      acc += double(pc.data[i]) * double(pc.data[i]);
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) partial[b] = acc;
  }
}
__global__ void sum_squares_pieces_final_kernel(double* sums, const double* partial, const PieceBlocks* pieces,
                                                int count) {
  __shared__ double scratch[32];
  for (int i = int(blockIdx.x); i < count; i += int(gridDim.x)) {  // the whole block alike
    const PieceBlocks pc = pieces[i];
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < pc.blocks; k += blockDim.x) acc += partial[pc.first + k];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) sums[i] = acc;
  }
}
__global__ void scale_kernel(float* g, int64_t n, float factor) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    g[i] *= factor;
}

// ---- bits_fingerprint ----
constexpr int kFingerprintBlocks = 256;  // partial sums: two words a block, summed on the host
__global__ void bits_fingerprint_kernel(uint64_t* partial, const uint32_t* words, const uint32_t* against, int64_t n) {
  __shared__ uint64_t hs[kBlock], nz[kBlock];
  uint64_t h = 0, count = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t w = words[i];
    h += bits_fingerprint_term(uint64_t(i), w);
    count += w != (against ? against[i] : 0u);
  }
  hs[threadIdx.x] = h, nz[threadIdx.x] = count;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) hs[threadIdx.x] += hs[threadIdx.x + half], nz[threadIdx.x] += nz[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[2 * blockIdx.x] = hs[0], partial[2 * blockIdx.x + 1] = nz[0];
}

// ---- bf16 ----
__global__ void to_bf16_kernel(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = to_bf16_bits(src[i]);
}
__global__ void to_bf16_x4_kernel(const float4* src, uint2* dst, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = src[i];
    dst[i] = make_uint2(bf16_pair(x.x, x.y), bf16_pair(x.z, x.w));
  }
}
__global__ void from_bf16_kernel(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_bf16_bits(src[i]);
}

void require_workspace(const Workspace& ws, size_t bytes, const char* kernel) {
  if (ws.bytes < bytes || (bytes > 0 && !ws.data))
    throw std::runtime_error(std::string("CUDA: ") + kernel + ": workspace of " + std::to_string(ws.bytes) +
                             " bytes, needs " + std::to_string(bytes));
}

// The N tokens sorted by id (a stable radix sort on the id's low `bits`) in ws, laid out by
// embedding_layout: the sorted ids and the token each came from, for the backward kernels that add a
// row's gradients in token order. Both embeddings' backwards sort this way.
struct SortedTokens {
  const uint32_t* ids;
  const uint32_t* tokens;
};
SortedTokens sort_tokens_by_id(const int32_t* ids, int64_t N, int bits, const Workspace& ws, cudaStream_t stream,
                               const char* kernel) {
  const EmbeddingWorkspace w = embedding_layout(N, bits);
  require_workspace(ws, w.total, kernel);
  char* base = static_cast<char*>(ws.data);
  auto* sorted_ids = reinterpret_cast<uint32_t*>(base + w.sorted_ids);
  auto* tokens = reinterpret_cast<uint32_t*>(base + w.tokens);
  auto* sorted_tokens = reinterpret_cast<uint32_t*>(base + w.sorted_tokens);
  if (N == 0) return {sorted_ids, sorted_tokens};
  iota_kernel<<<grid_for(N), kBlock, 0, stream>>>(tokens, N);
  check_launch((std::string(kernel) + " iota").c_str());
  size_t temp_bytes = w.temp_bytes;
  check(cub::DeviceRadixSort::SortPairs(base + w.temp, temp_bytes, reinterpret_cast<const uint32_t*>(ids), sorted_ids,
                                        tokens, sorted_tokens, N, 0, bits, stream),
        (std::string(kernel) + " radix sort").c_str());
  return {sorted_ids, sorted_tokens};
}

// The shard embedding's backward sorts on every bit an id may have (non-negative int32): the tokens
// of other shards are in the same list, skipped after the sort.
constexpr int kIdBits = 31;

__global__ void embedding_shard_forward_kernel(float* out, const int32_t* ids, const float* wte, int64_t v0,
                                               int64_t v_local, int64_t h, int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / h, i = k % h, row = int64_t(ids[n]) - v0;
    out[k] = row >= 0 && row < v_local ? wte[row * h + i] : 0.0f;
  }
}

// One block per position of the sorted tokens; the block at the start of a run of one id this shard
// holds adds the run's gradients into the row (add_token_run).
__global__ void __launch_bounds__(1024)
    embedding_shard_backward_kernel(float* dwte, const float* dout, const uint32_t* sorted_ids,
                                    const uint32_t* sorted_tokens, int64_t v0, int64_t v_local, int64_t N, int64_t h) {
  const int64_t k = blockIdx.x;
  const uint32_t id = sorted_ids[k];
  if (k > 0 && sorted_ids[k - 1] == id) return;
  const int64_t row = int64_t(id) - v0;
  if (row < 0 || row >= v_local) return;
  add_token_run(dwte + row * h, dout, sorted_ids, sorted_tokens, k, id, N, h);
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t b, int64_t s,
                       int64_t h, cudaStream_t stream) {
  const int64_t total = b * s * h;
  embedding_forward_kernel<<<grid_for(total), kBlock, 0, stream>>>(out, ids, wte, wpe, s, h, total);
  check_launch("embedding_forward");
}

size_t embedding_backward_workspace_bytes(int64_t b, int64_t s, int64_t vocab) {
  return embedding_layout(b * s, id_bits(vocab)).total;
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t b, int64_t s,
                        int64_t h, int64_t vocab, Workspace ws, cudaStream_t stream) {
  const int64_t N = b * s;
  const SortedTokens sorted = sort_tokens_by_id(ids, N, id_bits(vocab), ws, stream, "embedding_backward");
  if (N > 0) {
    embedding_tokens_backward_kernel<<<unsigned(N), run_block(h), 0, stream>>>(dwte, dout, sorted.ids, sorted.tokens,
                                                                                N, h);
    check_launch("embedding_backward tokens");
  }
  embedding_positions_backward_kernel<<<grid_for(s * h), kBlock, 0, stream>>>(dwpe, dout, b, s, h);
  check_launch("embedding_backward positions");
}

void embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t v_local, int64_t N,
                             int64_t h, cudaStream_t stream) {
  const int64_t total = N * h;
  embedding_shard_forward_kernel<<<grid_for(total), kBlock, 0, stream>>>(out, ids, wte, v0, v_local, h, total);
  check_launch("embedding_shard_forward");
}

size_t embedding_shard_backward_workspace_bytes(int64_t N, int64_t) { return embedding_layout(N, kIdBits).total; }

void embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t v_local,
                              int64_t N, int64_t h, Workspace ws, cudaStream_t stream) {
  const SortedTokens sorted = sort_tokens_by_id(ids, N, kIdBits, ws, stream, "embedding_shard_backward");
  if (N == 0) return;
  embedding_shard_backward_kernel<<<unsigned(N), run_block(h), 0, stream>>>(dwte, dout, sorted.ids, sorted.tokens, v0,
                                                                       v_local, N, h);
  check_launch("embedding_shard_backward");
}

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, inp, n);
  check_launch("gelu_forward");
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t stream) {
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

void bias_add_rows(float* y, const float* bias, int64_t N, int64_t out, cudaStream_t stream) {
  bias_add_rows_kernel<<<grid_for(N * out), kBlock, 0, stream>>>(y, bias, out, N * out);
  check_launch("bias_add_rows");
}
size_t bias_backward_workspace_bytes(int64_t N, int64_t out) {
  return size_t(column_chunks(N) * out) * sizeof(float);
}
void bias_backward(float* db, const float* dy, int64_t N, int64_t out, Workspace ws, cudaStream_t stream) {
  require_workspace(ws, bias_backward_workspace_bytes(N, out), "bias_backward");
  const int64_t chunks = column_chunks(N);
  float* partial = static_cast<float*>(ws.data);
  column_partials_kernel<<<grid_for(chunks * out), kBlock, 0, stream>>>(partial, ReadElement{dy, out}, N, out,
                                                                         chunks);
  check_launch("bias_backward partials");
  column_reduce_kernel<<<column_group_grid(out), kReduceWarps * 32, 0, stream>>>(db, partial, out, chunks);
  check_launch("bias_backward reduce");
}
// The element-wise passes below run four elements a thread where the pointers allow it (four_wide,
// cuda/common.cuh): one 4-byte load and a 2-byte store at a time moved about a fifth of the H200's
// bandwidth (to_bf16 took 0.36 ms a call over GPT-2's 25 M-element activations, 2026-11-27 profile).

void residual_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  const int64_t done = four_wide(n, aligned_to(x, 16) && aligned_to(y, 16), [&](int64_t n4) {
    residual_add_x4_kernel<<<grid_in_flight(n4, kResidualGroups), kBlock, 0, stream>>>(
        reinterpret_cast<float4*>(x), reinterpret_cast<const float4*>(y), n4);
  });
  if (done < n) residual_add_kernel<<<grid_for(n - done), kBlock, 0, stream>>>(x + done, y + done, n - done);
  check_launch("residual_add");
}

void dropout_mask_fill(uint8_t* mask, const DropoutStream& st, uint64_t first_index, int64_t n, float p,
                       cudaStream_t stream) {
  if (n <= 0) return;
  const PhiloxStreamWords words = philox_stream_words(st.seed, st.step, st.layer, uint32_t(st.site));
  const int64_t blocks = int64_t(((first_index + uint64_t(n) + 3) >> 2) - (first_index >> 2));
  dropout_mask_kernel<<<grid_for(blocks), kBlock, 0, stream>>>(mask, words, dropout_keep_threshold(p), first_index,
                                                                n);
  check_launch("dropout_mask_fill");
}
void dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p, cudaStream_t stream) {
  dropout_apply_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, inp, mask, n, 1.0f / (1.0f - p));
  check_launch("dropout_forward");
}
void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p, cudaStream_t stream) {
  dropout_forward(dinp, dout, mask, n, p, stream);
}

namespace {
void adamw_launch(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t n, float decay,
                  const AdamWScalars& a, float grad_scale, cudaStream_t stream, const char* name) {
  const bool aligned = aligned_to(m, 16) && aligned_to(v, 16) && aligned_to(w, 16) && aligned_to(grad, 16) &&
                       aligned_to(w16, 8);
  const int64_t done = four_wide(n, aligned, [&](int64_t n4) {
    adamw_x4_kernel<<<grid_for(n4), kBlock, 0, stream>>>(
        reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), reinterpret_cast<float4*>(w),
        reinterpret_cast<uint2*>(w16), reinterpret_cast<const float4*>(grad), n4, decay, a, grad_scale);
  });
  if (done < n)
    adamw_kernel<<<grid_for(n - done), kBlock, 0, stream>>>(m + done, v + done, w + done, w16 ? w16 + done : nullptr,
                                                            grad + done, n - done, decay, a, grad_scale);
  check_launch(name);
}
}  // namespace
void adamw_update(float* m, float* v, float* w, const float* grad, int64_t n, float decay, const AdamWScalars& a,
                  cudaStream_t stream) {
  adamw_launch(m, v, w, nullptr, grad, n, decay, a, 1.0f, stream, "adamw_update");
}
void adamw_update_bf16(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t n, float decay,
                       const AdamWScalars& a, float grad_scale, cudaStream_t stream) {
  adamw_launch(m, v, w, w16, grad, n, decay, a, grad_scale, stream, "adamw_update_bf16");
}
size_t adamw_segments_workspace_bytes(size_t count) { return std::max<size_t>(1, count) * sizeof(AdamWBlocks); }
void adamw_update_segments(const AdamWSegment* segments, size_t count, const AdamWScalars& a, Workspace ws,
                           cudaStream_t stream) {
  require_workspace(ws, adamw_segments_workspace_bytes(count), "adamw_update_segments");
  std::vector<AdamWBlocks> table;
  int64_t first = 0;
  for (size_t i = 0; i < count; ++i) {
    const AdamWSegment& s = segments[i];
    if (s.n < 0) throw std::invalid_argument("CUDA: adamw_update_segments: a negative length");
    if (s.n == 0) continue;
    // four_wide's rule (adamw_launch): four a thread where every pointer allows and n >= 4.
    const bool x4 = s.n >= 4 && aligned_to(s.m, 16) && aligned_to(s.v, 16) && aligned_to(s.w, 16) &&
                    aligned_to(s.grad, 16) && aligned_to(s.w16, 8);
    const int64_t n4 = x4 ? s.n / 4 : 0, units = x4 ? n4 + (s.n - 4 * n4) : s.n;
    const int64_t blocks = std::min<int64_t>((units + kBlock - 1) / kBlock, 65536);
    table.push_back({s, first, blocks, units, n4, x4});
    first += blocks;
  }
  if (table.empty()) return;
  if (first > 0x7fffffff) throw std::runtime_error("CUDA: adamw_update_segments: too many blocks");
  auto* d_table = static_cast<AdamWBlocks*>(ws.data);
  // Ordered on the stream before the kernel (pageable memory: staged before the call returns).
  check(cudaMemcpyAsync(d_table, table.data(), table.size() * sizeof(AdamWBlocks), cudaMemcpyHostToDevice, stream),
        "adamw_update_segments table");
  adamw_segments_kernel<<<unsigned(first), kBlock, 0, stream>>>(d_table, int(table.size()), a);
  check_launch("adamw_update_segments");
}
size_t grad_sum_squares_workspace_bytes() { return kSumBlocks * sizeof(double); }
void grad_sum_squares(double* out, const float* grads, int64_t n, Workspace ws, cudaStream_t stream) {
  require_workspace(ws, grad_sum_squares_workspace_bytes(), "grad_sum_squares");
  double* partial = static_cast<double*>(ws.data);
  sum_squares_partial_kernel<<<kSumBlocks, kBlock, 0, stream>>>(partial, grads, n);
  check_launch("grad_sum_squares partials");
  sum_squares_final_kernel<<<1, 1024, 0, stream>>>(out, partial);
  check_launch("grad_sum_squares final");
}
namespace {
// The workspace: the piece table, then a double per block of every piece.
struct PiecesLayout {
  size_t table = 0, partial = 0, total = 0;
  int64_t blocks = 0;
};
PiecesLayout pieces_layout(size_t count, const GradPiece* pieces) {
  PiecesLayout l;
  for (size_t i = 0; i < count; ++i) l.blocks += piece_blocks(pieces[i].n);
  size_t at = 0;
  l.table = carve(at, count * sizeof(PieceBlocks));
  l.partial = carve(at, size_t(l.blocks) * sizeof(double));
  l.total = at;
  return l;
}
}  // namespace
size_t grad_sums_squares_workspace_bytes(size_t count, const GradPiece* pieces) {
  return pieces_layout(count, pieces).total;
}
void grad_sums_squares(double* sums, const GradPiece* pieces, size_t count, Workspace ws, cudaStream_t stream) {
  if (count == 0) return;
  if (count > size_t(0x7fffffff)) throw std::runtime_error("CUDA: grad_sums_squares: too many pieces");
  const PiecesLayout l = pieces_layout(count, pieces);
  require_workspace(ws, l.total, "grad_sums_squares");
  std::vector<PieceBlocks> table(count);
  int64_t first = 0;
  for (size_t i = 0; i < count; ++i) {
    if (pieces[i].n < 0) throw std::invalid_argument("CUDA: grad_sums_squares: a negative length");
    table[i] = {pieces[i].data, pieces[i].n, first, piece_blocks(pieces[i].n)};
    first += table[i].blocks;
  }
  char* base = static_cast<char*>(ws.data);
  auto* d_table = reinterpret_cast<PieceBlocks*>(base + l.table);
  auto* partial = reinterpret_cast<double*>(base + l.partial);
  // Ordered on the stream before the kernels that read it (pageable memory: the copy is staged before
  // the call returns, so the host vector may go).
  check(cudaMemcpyAsync(d_table, table.data(), count * sizeof(PieceBlocks), cudaMemcpyHostToDevice, stream),
        "grad_sums_squares table");
  sum_squares_pieces_kernel<<<grid_for(l.blocks, 1), kBlock, 0, stream>>>(partial, d_table, int(count), l.blocks);
  check_launch("grad_sums_squares partials");
  sum_squares_pieces_final_kernel<<<unsigned(std::min<size_t>(count, 65535)), kBlock, 0, stream>>>(
      sums, partial, d_table, int(count));
  check_launch("grad_sums_squares final");
}
void scale_grads(float* grads, int64_t n, float factor, cudaStream_t stream) {
  scale_kernel<<<grid_for(n), kBlock, 0, stream>>>(grads, n, factor);
  check_launch("scale_grads");
}

size_t bits_fingerprint_workspace_bytes() { return 2 * kFingerprintBlocks * sizeof(uint64_t); }
BitsFingerprint bits_fingerprint(const void* data, size_t bytes, Workspace ws, cudaStream_t stream,
                                 const void* against) {
  require_workspace(ws, bits_fingerprint_workspace_bytes(), "bits_fingerprint");
  if (reinterpret_cast<uintptr_t>(data) % 4 != 0 || reinterpret_cast<uintptr_t>(against) % 4 != 0)
    throw std::invalid_argument("CUDA: bits_fingerprint: a 4-byte-aligned start");
  const int64_t words = int64_t(bytes / 4);
  auto* partial = static_cast<uint64_t*>(ws.data);
  bits_fingerprint_kernel<<<kFingerprintBlocks, kBlock, 0, stream>>>(
      partial, static_cast<const uint32_t*>(data), static_cast<const uint32_t*>(against), words);
  check_launch("bits_fingerprint");
  uint64_t host[2 * kFingerprintBlocks + 1] = {};
  check(cudaMemcpyAsync(host, partial, bits_fingerprint_workspace_bytes(), cudaMemcpyDeviceToHost, stream),
        "bits_fingerprint partials");
  uint32_t tail = 0, tail_against = 0;  // the last partial word's bytes, zero-padded (little-endian, as read)
  if (bytes % 4 != 0) {
    check(cudaMemcpyAsync(&tail, static_cast<const char*>(data) + 4 * words, bytes % 4, cudaMemcpyDeviceToHost,
                          stream),
          "bits_fingerprint tail");
    if (against)
      check(cudaMemcpyAsync(&tail_against, static_cast<const char*>(against) + 4 * words, bytes % 4,
                            cudaMemcpyDeviceToHost, stream),
            "bits_fingerprint tail");
  }
  check(cudaStreamSynchronize(stream), "bits_fingerprint");
  BitsFingerprint f;
  for (int b = 0; b < kFingerprintBlocks; ++b) f.hash += host[2 * b], f.moved_words += host[2 * b + 1];
  if (bytes % 4 != 0) {
    f.hash += bits_fingerprint_term(uint64_t(words), tail);
    f.moved_words += tail != tail_against;
  }
  return f;
}

void to_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  const int64_t done = four_wide(n, aligned_to(src, 16) && aligned_to(dst, 8), [&](int64_t n4) {
    to_bf16_x4_kernel<<<grid_for(n4), kBlock, 0, stream>>>(reinterpret_cast<const float4*>(src),
                                                           reinterpret_cast<uint2*>(dst), n4);
  });
  if (done < n) to_bf16_kernel<<<grid_for(n - done), kBlock, 0, stream>>>(src + done, dst + done, n - done);
  check_launch("to_bf16");
}
void from_bf16(const uint16_t* src, float* dst, int64_t n, cudaStream_t stream) {
  from_bf16_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  check_launch("from_bf16");
}

}  // namespace lattice::cuda
