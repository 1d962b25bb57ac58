// The fused attention on the tensor cores (cuda/flash_attention.hpp, "bf16 operands"), in the
// FlashAttention-2 arrangement: each warp owns 16 rows of a 64-row tile, and its score tile, its
// probabilities and its running output stay in registers between products. The products (S = Q·Kᵀ,
// O += P·V; backward S, dP = dO·Vᵀ, dQ += dS·K, dV += (P∘Z)ᵀ·dO, dK += dSᵀ·Q) are mma.sync m16n8k16
// (cuda/mma.cuh: bf16 operands, fp32 accumulation), the probabilities and dS handed from one product's
// accumulators to the next as operands without leaving the registers. Only the operand tiles go
// through shared memory, as bf16 rows of 16·NC columns at a stride of 16·NC + 8 (16-byte aligned, and
// eight rows' 16 bytes fall in distinct banks: free of conflicts for ldmatrix), loaded 16 bytes at a
// time where the pointers allow; each operand fragment comes from them by one ldmatrix .x4 (an A
// fragment, or two n-tiles' B fragments), through its transposing form for a product reading a tile
// along its columns.
//
// Same contract and tiles as the fp32 kernels (cuda/flash_attention.cu): 64 queries × 64 keys, the causal
// mask, the online softmax (its exponential the special-function unit's: tc_exp), the dropout's keep flags
// drawn from the same Philox elements (flash_common.cuh's row_keep_bits / keep_bits16), the backward
// recomputing the scores with no atomics (a block owns a key tile's dK and dV, another a query tile's dQ).
// Q, K and V hold bf16 values, so their tiles are exact; dO, the probabilities and dS are rounded to bf16
// for the products, so the results are within bf16 rounding of the fp32 form, not its bits. Every sum runs
// in a fixed order (each accumulator its k in ascending steps, a row's four lanes by a fixed shuffle
// tree), so the bits repeat from run to run. Where Q, K, V are the kept bf16 bits at aligned addresses,
// each kernel's walk copies its next pair of tiles by cp.async while the current one's products run
// (TilePairs).
//
// One file past the usual length on purpose: the three kernels share their tile layouts, fragment
// products and the copy-ahead walk's barrier protocol, which must agree to the byte; apart, the
// protocol would be spread over files that the host emulation (tests/host_sim) cuts as one.
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/env_switch.hpp"
#include "cuda/flash_attention.hpp"
#include "cuda/flash_common.cuh"
#include "cuda/mma.cuh"

namespace lattice::cuda {
using namespace detail;
using namespace flash;
using namespace mma;

namespace {

constexpr int kT = 64;                // queries and keys per tile

// e^x as these kernels take it: 2^(x·log2 e) by the special-function unit's ex2.approx (relative error
// about 2^-22, far inside the bf16 products' 2^-8; -inf gives +0). The CPU's fast_exp, which the fp32
// kernels keep for their bits, is some 18 FP32 instructions an element: at dh 64 that is as much
// issue time as the tensor cores' two products of the element. The host simulation takes exp2f.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float tc_exp2(float y) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
#else
  return exp2f(y);
#endif
}
__device__ __forceinline__ float tc_exp(float x) { return tc_exp2(x * kLog2e); }
// A probability's exponential from a raw score x: e^(x·scale − m) as 2^(x·(scale·log2 e) − m·log2 e),
// one fused multiply-add and the ex2 where the form before took a multiply, a subtraction, a multiply
// (FlashAttention-2's scale_log2). m_log2 = m·log2 e, the row's, computed once. Not the form before's
// bits (the product is rounded once, not three times): within fp32 rounding of it.
__device__ __forceinline__ float tc_exp_scaled(float x, float scale_log2, float m_log2) {
  return tc_exp2(fmaf(x, scale_log2, -m_log2));
}
constexpr int kThreads = 128;         // 4 warps, 16 rows of each 64-row slab of a tile each
constexpr int kMaxChunks = int(kFlashMaxHeadDim / 16);

// Shared memory, carved in 128-byte pieces from `base`. Each kernel's layout function below carves its
// tiles in order; the launch asks for what the same function carves with no base (sizes only), so the
// size cannot drift from the layout. The tiles are `base` plus offsets as pointer arithmetic on the
// shared array itself: a pointer rebuilt from an integer loses its address space, and every access
// through it becomes a generic load or store (so it was, for all but the first tile).
struct Carver {
  unsigned char* base;  // null: sizes only (the host)
  size_t at = 0;
  template <class T>
  __host__ __device__ T* take(size_t count) {
    T* p = base ? reinterpret_cast<T*>(base + at) : nullptr;
    at += (count * sizeof(T) + 127) / 128 * 128;
    return p;
  }
};

// The tiles' columns: the kernels run every product over NC chunks of 16 (NC a compile-time 4, 6 or 8:
// dh up to 64, 96, 128), so an unrolled loop has no trip count to test between a fragment's load and
// its products (at a run-time dh / 16 chunks, each chunk's ldmatrix sat behind a branch: 42 branches a
// key tile in the forward, nvcc 11.8's SASS). At dh = 16·NC (64, 96 as in the paper's 22B model, 128)
// nothing changes; a smaller dh's tiles carry zero columns from dh on (zero_tile_padding), whose
// products add +0 to the scores and fill output columns that are never stored.
template <int NC>
constexpr int kTileWidth = 16 * NC;
inline int chunks_for(int64_t dh) { return dh <= 64 ? 4 : dh <= 96 ? 6 : 8; }  // with_choices' NC
inline int tile_width(int64_t dh) { return 16 * chunks_for(dh); }

// Row-major bf16 tiles [64][width + 8] (Q, K, V, dO), second buffers of the pair a kernel walks when its
// copies run ahead (`ahead`: K, V for the forward and the dQ kernel, Q, dO for the dK dV kernel), and
// the dK dV kernel's query-tile log-sum-exp (times log2 e) and D, two of each (L, D: [2][64], written a
// tile ahead).
// The forward and the dQ kernel read their Q (and dO) tile into registers before their walk and never
// again, and the first copy into the second buffers is issued after the walk's first barrier: the
// second buffers take Q's and dO's room (the forward needs one more tile, the dQ kernel none).
struct Tiles {
  uint16_t *Q = nullptr, *K = nullptr, *V = nullptr, *dO = nullptr, *A2 = nullptr, *B2 = nullptr;
  float *L = nullptr, *D = nullptr;
  size_t bytes = 0;
};
enum class Kernel { forward, dq, dkdv };
// width: the tiles' columns, 16·NC (tile_width); q_slabs: the forward's query tile in 64-row slabs
// (kForwardSlabs); the other kernels take one.
__host__ __device__ inline Tiles tiles_of(Kernel kind, unsigned char* base, int width, bool ahead, int q_slabs = 1) {
  Carver c{base};
  Tiles t;
  const size_t tile = size_t(kT) * size_t(width + 8);
  t.Q = c.take<uint16_t>(tile * size_t(q_slabs));
  t.K = c.take<uint16_t>(tile);
  t.V = c.take<uint16_t>(tile);
  if (kind != Kernel::forward) t.dO = c.take<uint16_t>(tile);
  if (ahead) {
    if (kind == Kernel::dkdv) t.A2 = c.take<uint16_t>(tile), t.B2 = c.take<uint16_t>(tile);
    else if (kind == Kernel::dq) t.A2 = t.Q, t.B2 = t.dO;
    else t.A2 = t.Q, t.B2 = c.take<uint16_t>(tile);
  }
  if (kind == Kernel::dkdv) t.L = c.take<float>(2 * kT), t.D = c.take<float>(2 * kT);
  t.bytes = c.at;
  return t;
}

// Eight consecutive elements as bf16 bits: fp32 values rounded (exact for Q, K, V, which hold bf16
// values), or bf16 bits as kept. `vec`: one or two 16-byte loads (the pointer 16-byte aligned).
__device__ __forceinline__ void load8(uint16_t (&w)[8], const uint16_t* src, bool vec) {
  if (vec) {
    const uint4 x = *reinterpret_cast<const uint4*>(src);
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) w[2 * u] = uint16_t(xs[u] & 0xffffu), w[2 * u + 1] = uint16_t(xs[u] >> 16);
  } else {
#pragma unroll
    for (int u = 0; u < 8; ++u) w[u] = src[u];
  }
}
__device__ __forceinline__ void load8(uint16_t (&w)[8], const float* src, bool vec) {
  float x[8];
  if (vec) {
    const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else {
#pragma unroll
    for (int u = 0; u < 8; ++u) x[u] = src[u];
  }
#pragma unroll
  for (int u = 0; u < 8; ++u) w[u] = to_bf16_bits(x[u]);
}

// A thread's part of a tile copy over the tile's W columns (W: kTileWidth): a pass of the block takes
// kRowsPerPass whole rows of 16-byte chunks, so a thread keeps one column e (of eight elements) and
// steps kRowsPerPass rows: its rows and the addresses are sums the compiler needs no division for.
// (At W 96 a pass is 10 rows of 12 chunks, and threads 120 … 127 copy nothing: r0 is past any tile.)
template <int W>
struct TileChunks {
  static constexpr int kChunksPerRow = W / 8, kRowsPerPass = kThreads / kChunksPerRow;
  int e, r0;
  __device__ TileChunks()
      : e(int(threadIdx.x) % kChunksPerRow * 8),
        r0(int(threadIdx.x) < kRowsPerPass * kChunksPerRow ? int(threadIdx.x) / kChunksPerRow : 1 << 20) {}
};

// Rows [0, n) of X (rows ld elements apart, dh of each read; rows n … rows − 1 zero) into columns
// 0 … dh − 1 of the tile [rows][W + 8], eight elements a thread at a time (dh is a multiple of 16, so
// eight never straddle a row; 16-byte stores). The columns past dh are zero_tile_padding's, and left
// alone. ld: dh in the head layout, 3·a·dh in the QKV rows (qkv_head).
template <int W, class T>
__device__ void load_tile(uint16_t* tile, const T* X, int ld, int64_t n, const FlashArgs& p, bool vec,
                          int rows = kT) {
  const int dh = int(p.dh);
  const TileChunks<W> c;
  if (c.e >= dh) return;
  for (int r = c.r0; r < rows; r += c.kRowsPerPass) {
    uint16_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < n) load8(w, X + int64_t(r) * ld + c.e, vec);
    *reinterpret_cast<uint4*>(tile + r * (W + 8) + c.e) =
        make_uint4(uint32_t(w[0]) | uint32_t(w[1]) << 16, uint32_t(w[2]) | uint32_t(w[3]) << 16,
                   uint32_t(w[4]) | uint32_t(w[5]) << 16, uint32_t(w[6]) | uint32_t(w[7]) << 16);
  }
}

// The same rows copied by cp.async (bf16 bits at 16-byte-aligned addresses only): they land while the
// block computes; async_wait_all() and a __syncthreads() before the tile is read.
// (n: at most 64, so 32-bit; the source offsets r·ld + e within a tile are too: ld below 2^24, checked
// at the launch.)
template <int W>
__device__ __forceinline__ void load_tile_async(uint16_t* tile, const uint16_t* X, int ld, int64_t n,
                                                const FlashArgs& p) {
  const int dh = int(p.dh), rows = int(n);
  const TileChunks<W> c;
  if (c.e >= dh) return;
#pragma unroll 1
  for (int r = c.r0; r < kT; r += c.kRowsPerPass)
    copy16_async(tile + r * (W + 8) + c.e, X + (r < rows ? uint32_t(r * ld + c.e) : 0u), r < rows);
}
template <int W>
__device__ __forceinline__ void load_tile_async(uint16_t*, const float*, int, int64_t, const FlashArgs&) {
  __trap();  // fp32 operands are rounded on the way: never copied ahead (the launch does not ask it)
}

// Zeroes a block's tiles (`bytes` from `smem`, 16-byte aligned) where dh is below their width
// (kTileWidth), so that the columns past dh, which no load writes, hold zeros for every product; then
// the barrier that orders the zeros before the tiles' loads. Every thread calls it.
template <int NC>
__device__ __forceinline__ void zero_tile_padding(unsigned char* smem, size_t bytes, int dh) {
  if (dh == kTileWidth<NC>) return;  // uniform over the block
  for (size_t i = size_t(threadIdx.x) * 16; i < bytes; i += size_t(kThreads) * 16)
    *reinterpret_cast<uint4*>(smem + i) = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
}

// A pair of tiles walked in turn: the key tiles K, V of one head (the forward, the dQ kernel) or the
// query tiles Q, dO (the dK dV kernel). AHEAD (both bf16 bits, 16-byte aligned): tile i + 1's copies
// are issued as soon as tile i is in, into the other pair of buffers, so they run under tile i's
// products; otherwise each tile is loaded when it is needed. next(i0) returns tile i0's pair,
// visible to the whole block; every thread calls it in turn, the tiles in ascending order. side(i0,
// buf) stores a tile's small side data (the dK dV kernel's L and D) into side buffer `buf` (0 or 1)
// one tile ahead, between barriers, so it is visible when next() returns that tile: turn() is the
// buffer of the tile next() returned last.
template <bool AHEAD, int W, class TA, class TB, class Side>
struct TilePairs {
  uint16_t *a0, *b0, *a1, *b1;  // the buffers (a1, b1: the second pair, AHEAD only)
  const TA* a;
  const TB* b;
  int lda, ldb;  // their rows' strides (load_tile's ld)
  const FlashArgs& p;
  int64_t end;  // tiles below `end`
  bool vec;
  Side side;
  int turns = 0;
  __device__ int turn() const { return (turns - 1) & 1; }
  __device__ void start(int64_t first) {
    side(first, 0);  // visible at next(first)'s barrier
    if (AHEAD) issue(first, a0, b0);
  }
  __device__ void issue(int64_t i0, uint16_t* A, uint16_t* B) {
    const int64_t n = min(int64_t(kT), p.s - i0);
    load_tile_async<W>(A, a + i0 * lda, lda, n, p);
    load_tile_async<W>(B, b + i0 * ldb, ldb, n, p);
    async_commit();
  }
  __device__ void next(int64_t i0, const uint16_t*& A, const uint16_t*& B) {
    const int cur = turns & 1;
    const bool more = i0 + kT < end;
    if (AHEAD) {
      async_wait_all();
      __syncthreads();  // tile i0 is in for every thread; every thread is done with the other buffers
      if (more) issue(i0 + kT, cur ? a0 : a1, cur ? b0 : b1);
      A = cur ? a1 : a0, B = cur ? b1 : b0;
    } else {
      __syncthreads();  // the previous tile's reads are done
      const int64_t n = min(int64_t(kT), p.s - i0);
      load_tile<W>(a0, a + i0 * lda, lda, n, p, vec);
      load_tile<W>(b0, b + i0 * ldb, ldb, n, p, vec);
      A = a0, B = b0;
    }
    if (more) side(i0 + kT, cur ^ 1);  // after the barrier: the other side buffer's last readers are done
    if (!AHEAD) __syncthreads();
    ++turns;
  }
};
// No side data (the forward, the dQ kernel).
struct NoSide {
  __device__ void operator()(int64_t, int) const {}
};

// A row of a warp's 16 × 64 score tile, as this lane holds it: columns nt·8 + 2t + h (nt 0 … 7,
// h 0 … 1) at acc[nt][2·half + h], half 0 for row g, 1 for row g + 8.
//
// The keep flags of this lane's 16 columns of query i in the key tile at j0 (bit 2·nt + h), from
// row_keep_bits of its group's four lanes (lane t draws columns 16t … 16t + 15, as a quarter row did
// in the fp32 kernels). n: the row's visible keys (0: all kept, no draw). Every lane calls it.
__device__ __forceinline__ uint32_t lane_keep_bits(const FlashArgs& p, uint64_t base, int64_t i, int64_t j0,
                                                   int64_t n) {
  const int lane = int(threadIdx.x) & 31, t = lane & 3;
  const uint32_t own = row_keep_bits(p, base, i, j0, t, n);
  uint32_t bits = 0;
#pragma unroll
  for (int o = 0; o < 4; ++o) {  // lane o of the group holds n-tiles 2o (its bits 0 … 7) and 2o + 1 (8 … 15)
    const uint32_t w = __shfl_sync(0xffffffffu, own, (lane & ~3) | o);
    bits |= ((w >> (2 * t)) & 3u) << (4 * o);
    bits |= ((w >> (8 + 2 * t)) & 3u) << (4 * o + 2);
  }
  return bits;
}
template <bool DROP>
__device__ __forceinline__ float keep_factor_at(const FlashArgs& p, uint32_t bits, int bit) {
  return DROP ? (((bits >> bit) & 1u) ? p.keep_scale : 0.0f) : 1.0f;
}

// A row of a [64][dh] tile (one lane's two columns per 8-column tile) stored to global memory: row
// `row` of X (rows `ld` elements apart: dh in the head layout, a·dh in the token rows), the
// accumulators acc[dt][2·half], acc[dt][2·half + 1] times `scale`, as fp32 or narrowed to bf16 bits
// (to_bf16's rule, merge_heads_bf16's: the same bits as storing fp32 and narrowing after).
template <int NC, class TOut>
__device__ __forceinline__ void store_row(TOut* X, int64_t row, const float (&acc)[2 * NC][4], int half, float scale,
                                          int dh, int64_t ld, bool vec) {
  const int t = int(threadIdx.x) & 3;
#pragma unroll
  for (int dt = 0; dt < 2 * NC; ++dt) {
    if (dt * 8 >= dh) break;
    TOut* at = X + row * ld + dt * 8 + 2 * t;
    const float x0 = acc[dt][2 * half] * scale, x1 = acc[dt][2 * half + 1] * scale;
    if constexpr (std::is_same_v<TOut, float>) {
      if (vec) *reinterpret_cast<float2*>(at) = make_float2(x0, x1);
      else at[0] = x0, at[1] = x1;
    } else {
      if (vec) *reinterpret_cast<uint32_t*>(at) = bf16_pair(x0, x1);
      else at[0] = to_bf16_bits(x0), at[1] = to_bf16_bits(x1);
    }
  }
}

// A block's place: its head (bh, the offset of its [s, dh] rows), its 64-row tile (first row, rows in
// range), and this lane's (its group g, index tq in the group, its warp's first row w0 of the tile,
// and its two rows' indices in the head). The forward and the dQ kernel take query tiles longest rows
// first (`reversed`), the dK dV kernel key tiles in order.
struct BlockTile {
  int64_t bh, head, first, n;
  int lane, g, tq, w0;
  int64_t row[2];
};
// rows: the tile's (64, or the forward's 64 · kForwardSlabs); row[] are the lane's rows of its first slab.
__device__ __forceinline__ BlockTile block_tile(const FlashArgs& p, bool reversed, int rows = kT) {
  BlockTile b;
  b.bh = blockIdx.y, b.head = b.bh * p.s * p.dh;
  b.first = (reversed ? int64_t(gridDim.x) - 1 - blockIdx.x : int64_t(blockIdx.x)) * rows;
  b.n = min(int64_t(rows), p.s - b.first);
  b.lane = int(threadIdx.x) & 31, b.g = b.lane >> 2, b.tq = b.lane & 3, b.w0 = (int(threadIdx.x) >> 5) * 16;
  b.row[0] = b.first + b.w0 + b.g, b.row[1] = b.row[0] + 8;
  return b;
}
// A query row's causal reach as 32-bit counts (flash_tc_shape: s below 2^31): the key it stops before
// (row + 1; 0 for a row past the sequence, which sees none), and how many keys of the key tile at j0
// it sees (0 … 64; a row within the sequence never reaches past it).
__device__ __forceinline__ int row_end(int64_t row, int64_t s) { return row < s ? int(row) + 1 : 0; }
__device__ __forceinline__ int visible_keys(int end, int64_t j0) { return min(max(end - int(j0), 0), kT); }

// The QKV gradient in the token rows (flash_attention_backward_qkv_rows_bf16): bf16 bits of
// merge_qkv_grads' rows [b·s, 3·a·dh] (Q, K, V the parts 0, 1, 2 of a row, each its a heads' dh
// columns), and each 64-row chunk's column sums into partial[chunk][3·a·dh], the bias gradient's
// first pass as column_partials_kernel makes it (a tile is one chunk of the b·s rows when s is a
// multiple of 64, which the caller requires).
struct QkvRows {
  uint16_t* rows = nullptr;
  float* partial = nullptr;
};
static_assert(kT == kColumnChunkRows, "a tile of the QKV rows is one chunk of their column sums");
// The shared memory a tile's fp32 stage takes (it overlays the operand tiles, which are larger).
__host__ __device__ inline size_t qkv_stage_floats(int dh) { return size_t(kT) * size_t(dh + 4); }

// A warp's accumulators (its 16 rows of the block's tile) to part `part` of the QKV rows: staged as
// fp32 in shared memory, each column summed over the tile's rows in ascending order from zero
// (column_partials_kernel's sum: the bias gradient's bits are merge_qkv_grads_narrow's), each row
// stored narrowed by to_bf16's rule (the bits of storing fp32 and narrowing after), four elements a
// thread. Every thread of the block calls it, after its last read of the operand tiles.
template <int NC>
__device__ __forceinline__ void store_qkv_rows(unsigned char* smem, const float (&acc)[2 * NC][4], const BlockTile& bt,
                                               const FlashArgs& p, QkvRows out, int part, bool vec) {
  const int dh = int(p.dh), ls = dh + 4;
  float* stage = Carver{smem}.take<float>(qkv_stage_floats(dh));
  __syncthreads();  // every warp is done with the tiles the stage overlays, and with a previous stage
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = bt.w0 + bt.g + 8 * half;
#pragma unroll
    for (int dt = 0; dt < 2 * NC; ++dt) {
      if (dt * 8 >= dh) break;
      stage[r * ls + dt * 8 + 2 * bt.tq] = acc[dt][2 * half];
      stage[r * ls + dt * 8 + 2 * bt.tq + 1] = acc[dt][2 * half + 1];
    }
  }
  __syncthreads();
  const int64_t bi = bt.bh / p.a, hd = bt.bh - bi * p.a, ld = 3 * p.a * p.dh;
  const int64_t row0 = bi * p.s + bt.first, col0 = part * p.a * p.dh + hd * p.dh;
  const int n = int(bt.n);
  if (int(threadIdx.x) < dh) {
    float sum = 0.0f;
    for (int r = 0; r < n; ++r) sum += stage[r * ls + int(threadIdx.x)];
    out.partial[row0 / kT * ld + col0 + int64_t(threadIdx.x)] = sum;
  }
  const int quads = dh / 4;
  for (int i = int(threadIdx.x); i < n * quads; i += kThreads) {
    const int r = i / quads, c = (i - r * quads) * 4;
    const float* x = stage + r * ls + c;
    uint16_t* at = out.rows + (row0 + r) * ld + col0 + c;
    if (vec) {
      *reinterpret_cast<uint2*>(at) = make_uint2(bf16_pair(x[0], x[1]), bf16_pair(x[2], x[3]));
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) at[u] = to_bf16_bits(x[u]);
    }
  }
}

// The two products a warp runs on a tile, every accumulator adding its k in ascending steps of 16, for
// MT slabs of 16 rows at once (the forward's two; one elsewhere): each B fragment loaded once serves
// every slab, and the slabs' products are independent work between a load and its use:
// S[m][16 × 64] = A[m]·Yᵀ, A[m] slab m's rows in registers (NC chunks of 16 columns), Y a row-major
// tile [64][16·NC] (S = Q·Kᵀ, dP = dO·Vᵀ);
template <int NC, int MT>
__device__ __forceinline__ void slabs_by_tile_t(float (&S)[MT][8][4], const uint32_t (&A)[MT][NC][4], const uint16_t* Y,
                                                int ld) {
#pragma unroll
  for (int nt = 0; nt < 8; nt += 2) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) S[m][nt][e] = 0.0f, S[m][nt + 1][e] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      uint32_t b[4];
      load_b2(b, Y, ld, nt * 8, 16 * c);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma_bf16(S[m][nt], A[m][c], b[0], b[1]);
        mma_bf16(S[m][nt + 1], A[m][c], b[2], b[3]);
      }
    }
  }
}
template <int NC>
__device__ __forceinline__ void rows_by_tile_t(float (&S)[8][4], const uint32_t (&A)[NC][4], const uint16_t* Y,
                                               int ld) {
  slabs_by_tile_t<NC, 1>(*reinterpret_cast<float(*)[1][8][4]>(&S), *reinterpret_cast<const uint32_t(*)[1][NC][4]>(&A),
                         Y, ld);
}
// and acc[m][16 × dh] += P[m]·X, P[m] [16 × 64] a slab's accumulators rounded to bf16 as the A operand,
// X a row-major tile [64][16·NC] read through ldmatrix's transposing load (O += P·V, dQ += dS·K, and the
// key tile's dV += (P∘Z)ᵀ·dO, dK += dSᵀ·Q).
template <int NC, int MT>
__device__ __forceinline__ void add_slabs_by_tile(float (&acc)[MT][2 * NC][4], const float (&P)[MT][8][4],
                                                  const uint16_t* X, int ld) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m) a_from_c(a[m], P[m][2 * kc], P[m][2 * kc + 1]);
#pragma unroll
    for (int dt = 0; dt < 2 * NC; dt += 2) {
      uint32_t b[4];
      load_b2_trans(b, X, ld, 16 * kc, dt * 8);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma_bf16(acc[m][dt], a[m], b[0], b[1]);
        mma_bf16(acc[m][dt + 1], a[m], b[2], b[3]);
      }
    }
  }
}
template <int NC>
__device__ __forceinline__ void add_rows_by_tile(float (&acc)[2 * NC][4], const float (&P)[8][4], const uint16_t* X,
                                                 int ld) {
  add_slabs_by_tile<NC, 1>(*reinterpret_cast<float(*)[1][2 * NC][4]>(&acc),
                           *reinterpret_cast<const float(*)[1][8][4]>(&P), X, ld);
}

// ---- forward: one block per (query tile, b·a), the longest rows first. NC: the column chunks (4, 6 or 8);
// MT: the query tile's 64-row slabs (1 or 2; each warp takes 16 rows of each, rows w0 … w0+15 and
// 64 + w0 … 64 + w0+15); DROP: whether the dropout runs (a kernel without it holds no Philox state: 44
// fewer registers in the dQ kernel, a third block an SM); AHEAD: the key tiles copied ahead
// (TilePairs); TIn: how Q, K, V are held, fp32 (bf16 values) or bf16 bits. ----
// TOut: the context as fp32 in the head layout [b, a, s, dh], or as bf16 bits in the token rows [b, s,
// a·dh] (what the projection reads: merge_heads_bf16's layout and bits, without the pass).
//
// With two slabs a warp's products run on 32 rows (FlashAttention-2's arrangement at dh 64): each key
// fragment it loads feeds two products where it fed one, its two slabs' products are independent
// work in flight, and a key tile read from memory serves 128 queries. A slab's rows see the key tiles
// one slab would see, and one more where the tile's second slab reaches past its own (all masked:
// probabilities 0 and the running maximum, sum and output unchanged, so every value is bitwise the
// one-slab kernel's: the kernel check's [bits] line compares them).
//
// The slabs a head size allows, decided here: two at dh ≤ 64 (registers allow: ptxas -v), one at larger
// dh; which form a shape takes (these two, and the dense one-slab form) is timed on its first call
// (tuned_form). Four one-slab blocks an SM at dh ≤ 64 without the dropout, the occupancy it had
// before its operands came by ldmatrix .x4.
template <int NC>
constexpr int kForwardSlabs = NC == 4 ? 2 : 1;
template <int NC, int MT, bool DROP>
constexpr int kForwardMinBlocks = (MT == 1 && NC == 4 && !DROP) ? 4 : 0;
// The dense forms (flash_attention.hpp's one_slab_dense and DqForm::dense): the same text compiled for
// more blocks an SM, so in fewer registers. ptxas -v (CUDA 13, sm_90) at dh 64: the one-slab forward
// 127 → 96 registers and dQ 146 → 128, each spilling 16 bytes; compiled only where the spill is that
// small: bf16 operands and no dropout (with dropout dQ spills some 400 bytes, and six forward blocks 290).
constexpr int kDenseForwardBlocks = 5, kDenseDqBlocks = 4;
template <int NC, bool DROP, class TIn>
constexpr bool kHasDense = NC == 4 && !DROP && std::is_same_v<TIn, uint16_t>;
template <int NC, int MT, bool DROP, bool DENSE>
constexpr int kForwardBlocks = DENSE ? kDenseForwardBlocks : kForwardMinBlocks<NC, MT, DROP>;
template <int NC, int MT, bool DROP, bool AHEAD, class TIn, class TOut, bool DENSE = false>
__global__ void __launch_bounds__(kThreads, kForwardBlocks<NC, MT, DROP, DENSE>)
    tc_forward_kernel(TOut* out, float* lse, const TIn* q, const TIn* k, const TIn* v, FlashArgs p, bool vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dh = int(p.dh), ld = kTileWidth<NC> + 8;
  const Tiles t = tiles_of(Kernel::forward, smem, kTileWidth<NC>, AHEAD, MT);
  zero_tile_padding<NC>(smem, t.bytes, dh);
  const BlockTile bt = block_tile(p, true, MT * kT);
  const int64_t s = p.s, bh = bt.bh, head = bt.head, i0 = bt.first, nq = bt.n;
  const int tq = bt.tq, r0 = bt.w0;
  const float scale_log2 = p.scale * kLog2e;
  int64_t row[MT][2];  // this lane's rows: slab m's g and g + 8
  int end[MT][2];      // and the key each stops before (row_end)
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row[m][half] = bt.row[half] + m * kT;
      end[m][half] = row_end(row[m][half], s);
    }
  const int64_t qh = qkv_head(p, bh);  // Q, K, V's rows of the head, ld apart
  const int ld_in = int(p.ld_qkv);
  load_tile<kTileWidth<NC>>(t.Q, q + qh + i0 * ld_in, ld_in, nq, p, vec, MT * kT);
  __syncthreads();
  uint32_t qa[MT][NC][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int c = 0; c < NC; ++c)
      load_a(qa[m][c], t.Q, ld, m * kT + r0, 16 * c);
  float o[MT][2 * NC][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int dt = 0; dt < 2 * NC; ++dt) o[m][dt][0] = o[m][dt][1] = o[m][dt][2] = o[m][dt][3] = 0.0f;
  float mrow[MT][2], l[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m)
    mrow[m][0] = mrow[m][1] = -__int_as_float(0x7f800000), l[m][0] = l[m][1] = 0.0f;
  const uint64_t base = DROP ? mask_base(p, bh) : 0;
  TilePairs<AHEAD, kTileWidth<NC>, TIn, TIn, NoSide> tiles{
      t.K, t.V, t.A2, t.B2, k + qh, v + qh, ld_in, ld_in, p, i0 + nq, vec, NoSide{}};
  tiles.start(0);

  for (int64_t j0 = 0; j0 < i0 + nq; j0 += kT) {  // causal: key tiles past the tile's last query skipped
    const uint16_t *K, *V;
    tiles.next(j0, K, V);
    float sc[MT][8][4];  // S = Q·Kᵀ, this warp's 16 rows of each slab × 64 keys
    slabs_by_tile_t<NC, MT>(sc, qa, K, ld);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      // Whether the warp's 16 rows of the slab all see the whole tile (every tile before the diagonal,
      // in rows within the sequence): then no score is masked, and the warp skips the compares.
      const int64_t first = i0 + m * kT + r0;
      const bool whole = j0 + kT - 1 <= first && first + 16 <= s;
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // the online softmax of rows g and g + 8
        // The row's visible keys in the tile, and the same count from this lane's first column 2t: its
        // column nt·8 + h is visible where nt·8 + h < vis, a compare with a constant.
        const int n = visible_keys(end[m][half], j0), vis = n - 2 * tq;
        const uint32_t keep = DROP ? lane_keep_bits(p, base, row[m][half], j0, n) : ~0u;
        // A masked score becomes −inf, once: the maximum then needs no compare (fmaxf(x, −inf) = x), and
        // its exponential is ex2(−inf) = +0, the 0 it was given before: the same bits.
        if (!whole) {
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              if (nt * 8 + h >= vis) sc[m][nt][2 * half + h] = -__int_as_float(0x7f800000);
        }
        // The tile's largest visible raw score, scaled once: the scaled scores' maximum to the bit, as
        // rounding is monotone and the scale positive.
        float raw = -__int_as_float(0x7f800000);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) raw = fmaxf(raw, sc[m][nt][2 * half + h]);
        const float mx = fmaxf(mrow[m][half], quad_max(raw) * p.scale);
        const float corr = n > 0 ? tc_exp(mrow[m][half] - mx) : 1.0f;  // 0 on the first tile (tc_exp(-inf) = +0)
        // −inf where the row has seen no key yet (rows past the sequence): 0 keeps ex2(−inf − m) a +0,
        // not ex2(NaN).
        const float mx_log2 = mx == -__int_as_float(0x7f800000) ? 0.0f : mx * kLog2e;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float e = tc_exp_scaled(sc[m][nt][2 * half + h], scale_log2, mx_log2);
            sum += e;
            sc[m][nt][2 * half + h] = e * keep_factor_at<DROP>(p, keep, 2 * nt + h);
          }
        sum = quad_sum(sum);
        if (n > 0) l[m][half] = l[m][half] * corr + sum, mrow[m][half] = mx;
#pragma unroll
        for (int dt = 0; dt < 2 * NC; ++dt) o[m][dt][2 * half] *= corr, o[m][dt][2 * half + 1] *= corr;
      }
    }
    add_slabs_by_tile<NC, MT>(o, sc, V, ld);  // O += P·V, the probabilities from the registers
  }
  constexpr bool kRows = std::is_same_v<TOut, uint16_t>;
  TOut* const o_head = kRows ? out + ((bh / p.a) * s * p.a + bh % p.a) * dh : out + head;
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (row[m][half] >= i0 + nq) continue;
      if (tq == 0) lse[bh * s + row[m][half]] = mrow[m][half] + logf(l[m][half]);
      store_row<NC>(o_head, row[m][half], o[m], half, 1.0f / l[m][half], dh, kRows ? p.a * dh : dh, vec);
    }
}

// ---- backward: dQ of one query tile, walking its key tiles ----
// ROWS: dQ to the QKV rows (QkvRows, part 0) instead of fp32 in the head layout.
template <int NC, bool DROP, bool AHEAD, class TIn, bool ROWS, bool DENSE = false>
__global__ void __launch_bounds__(kThreads, DENSE ? kDenseDqBlocks : 0)
    tc_dq_kernel(float* dq, QkvRows rows, const uint16_t* dout, const TIn* q, const TIn* k, const TIn* v,
                 const float* lse, const float* D, FlashArgs p, bool vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dh = int(p.dh), ld = kTileWidth<NC> + 8;
  const Tiles t = tiles_of(Kernel::dq, smem, kTileWidth<NC>, AHEAD);
  zero_tile_padding<NC>(smem, t.bytes, dh);
  const BlockTile bt = block_tile(p, true);
  const int64_t s = p.s, bh = bt.bh, head = bt.head, i0 = bt.first, nq = bt.n;
  const int tq = bt.tq, r0 = bt.w0;
  const int64_t* row = bt.row;
  const int64_t qh = qkv_head(p, bh);  // Q, K, V's rows of the head, ld apart
  const int ld_in = int(p.ld_qkv);
  load_tile<kTileWidth<NC>>(t.Q, q + qh + i0 * ld_in, ld_in, nq, p, vec);
  load_tile<kTileWidth<NC>>(t.dO, dout + head + i0 * dh, dh, nq, p, vec);
  __syncthreads();
  uint32_t qa[NC][4], da[NC][4];
#pragma unroll
  for (int c = 0; c < NC; ++c)
    load_a(qa[c], t.Q, ld, r0, 16 * c), load_a(da[c], t.dO, ld, r0, 16 * c);
  const float scale_log2 = p.scale * kLog2e;
  float li_log2[2], di[2];  // the rows' log-sum-exp times log2 e (tc_exp_scaled), and D
  const int end[2] = {row_end(row[0], s), row_end(row[1], s)};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool ok = row[half] < s;
    li_log2[half] = ok ? lse[bh * s + row[half]] * kLog2e : 0.0f, di[half] = ok ? D[bh * s + row[half]] : 0.0f;
  }
  float acc[2 * NC][4];
#pragma unroll
  for (int dt = 0; dt < 2 * NC; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  const uint64_t base = DROP ? mask_base(p, bh) : 0;
  TilePairs<AHEAD, kTileWidth<NC>, TIn, TIn, NoSide> tiles{
      t.K, t.V, t.A2, t.B2, k + qh, v + qh, ld_in, ld_in, p, i0 + nq, vec, NoSide{}};
  tiles.start(0);

  for (int64_t j0 = 0; j0 < i0 + nq; j0 += kT) {
    const uint16_t *K, *V;
    tiles.next(j0, K, V);
    float sc[8][4], dp[8][4];  // S = Q·Kᵀ and dP = dO·Vᵀ
    rows_by_tile_t<NC>(sc, qa, K, ld);
    rows_by_tile_t<NC>(dp, da, V, ld);
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // dS·(1/√dh) into sc, zero where masked
      const int n = visible_keys(end[half], j0);
      const uint32_t keep = DROP ? lane_keep_bits(p, base, row[half], j0, n) : ~0u;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float ds = 0.0f;
          if (nt * 8 + 2 * tq + h < n) {
            const float pr = tc_exp_scaled(sc[nt][2 * half + h], scale_log2, li_log2[half]);
            ds = pr * (dp[nt][2 * half + h] * keep_factor_at<DROP>(p, keep, 2 * nt + h) - di[half]) * p.scale;
          }
          sc[nt][2 * half + h] = ds;
        }
    }
    add_rows_by_tile<NC>(acc, sc, K, ld);  // dQ += dS·K
  }
  if constexpr (ROWS) {
    store_qkv_rows<NC>(smem, acc, bt, p, rows, 0, vec);
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      if (row[half] < i0 + nq) store_row<NC>(dq + head, row[half], acc, half, 1.0f, dh, dh, vec);
  }
}

// ---- backward: dK, dV of one key tile (each warp 16 keys), walking its query tiles. The warp's
// products run transposed (Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ: rows are keys), so (P∘Z)ᵀ and dSᵀ are A operands
// of dV += (P∘Z)ᵀ·dO and dK += dSᵀ·Q straight from the accumulators. ----
// ROWS: dK, dV to the QKV rows (QkvRows, parts 1 and 2) instead of fp32 in the head layout.
template <int NC, bool DROP, bool AHEAD, class TIn, bool ROWS>
__global__ void __launch_bounds__(kThreads) tc_dkdv_kernel(float* dk, float* dv, QkvRows rows, const uint16_t* dout,
                                                           const TIn* q, const TIn* k, const TIn* v, const float* lse,
                                                           const float* D, FlashArgs p, bool vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dh = int(p.dh), ld = kTileWidth<NC> + 8;
  const Tiles t = tiles_of(Kernel::dkdv, smem, kTileWidth<NC>, AHEAD);
  zero_tile_padding<NC>(smem, t.bytes, dh);
  const BlockTile bt = block_tile(p, false);
  const int64_t s = p.s, bh = bt.bh, head = bt.head, j0 = bt.first, nk = bt.n;
  const int lane = bt.lane, g = bt.g, tq = bt.tq, r0 = bt.w0;
  const float scale_log2 = p.scale * kLog2e;
  const int64_t* key = bt.row;
  const int64_t qh = qkv_head(p, bh);  // Q, K, V's rows of the head, ld apart
  const int ld_in = int(p.ld_qkv);
  load_tile<kTileWidth<NC>>(t.K, k + qh + j0 * ld_in, ld_in, nk, p, vec);  // visible at the first tile's barrier
  load_tile<kTileWidth<NC>>(t.V, v + qh + j0 * ld_in, ld_in, nk, p, vec);
  float acc_k[2 * NC][4], acc_v[2 * NC][4];
#pragma unroll
  for (int dt = 0; dt < 2 * NC; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_k[dt][e] = 0.0f, acc_v[dt][e] = 0.0f;
  const uint64_t base = DROP ? mask_base(p, bh) : 0;
  // A query tile's log-sum-exp (times log2 e) and D into side buffer `buf`, written a tile ahead (TilePairs).
  const auto side = [&](int64_t i0, int buf) {
    if (threadIdx.x < kT) {
      const bool ok = i0 + int64_t(threadIdx.x) < s;
      t.L[buf * kT + threadIdx.x] = ok ? lse[bh * s + i0 + threadIdx.x] * kLog2e : 0.0f;  // tc_exp_scaled's
      t.D[buf * kT + threadIdx.x] = ok ? D[bh * s + i0 + threadIdx.x] : 0.0f;
    }
  };
  TilePairs<AHEAD, kTileWidth<NC>, TIn, uint16_t, decltype(side)> tiles{
      t.Q, t.dO, t.A2, t.B2, q + qh, dout + head, ld_in, dh, p, s, vec, side};
  tiles.start(j0);

  for (int64_t i0 = j0; i0 < s; i0 += kT) {  // causal: query tiles before the key tile see none of it
    const int64_t nq = min(int64_t(kT), s - i0);
    const uint16_t *Q, *dO;
    tiles.next(i0, Q, dO);
    const float* L = t.L + tiles.turn() * kT;
    const float* Dq = t.D + tiles.turn() * kT;
    float st[8][4], dpt[8][4];  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, this warp's 16 keys × 64 queries
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] = 0.0f, dpt[nt][e] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      uint32_t ka[4], va[4];
      load_a(ka, t.K, ld, r0, 16 * c);
      load_a(va, t.V, ld, r0, 16 * c);
#pragma unroll
      for (int nt = 0; nt < 8; nt += 2) {
        uint32_t b[4];
        load_b2(b, Q, ld, nt * 8, 16 * c);
        mma_bf16(st[nt], ka, b[0], b[1]);
        mma_bf16(st[nt + 1], ka, b[2], b[3]);
        load_b2(b, dO, ld, nt * 8, 16 * c);
        mma_bf16(dpt[nt], va, b[0], b[1]);
        mma_bf16(dpt[nt + 1], va, b[2], b[3]);
      }
    }
    // Keep flags: lane l draws queries 2l and 2l + 1 over the warp's 16 keys (bit: key − (j0 + r0)),
    // and a lane's columns nt·8 + 2t + h come from lane 4·nt + t (low half h 0, high half h 1).
    uint32_t drawn = 0;
    if (DROP) {
      const uint64_t first = base + uint64_t(i0 + 2 * lane) * uint64_t(s) + uint64_t(j0 + r0);
      drawn = keep_bits16(p.words, p.threshold, first) | keep_bits16(p.words, p.threshold, first + uint64_t(s)) << 16;
    }
    // Key `key` sees query i0 + ql where key < s, ql < nq and key − i0 <= ql: ql in [first_visible[half], nq)
    // in 32-bit terms (key − i0 is below 64 and at least −i0: clamped to 0), the same flags as the
    // 64-bit compares an element they replace.
    int first_visible[2];
    const int rows_in = int(nq);
#pragma unroll
    for (int half = 0; half < 2; ++half)
      first_visible[half] = key[half] < s ? int(max(int64_t(0), key[half] - i0)) : kT;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const uint32_t w = DROP ? __shfl_sync(0xffffffffu, drawn, 4 * nt + tq) : ~0u;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ql = nt * 8 + 2 * tq + h;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float pz = 0.0f, ds = 0.0f;
          if (ql < rows_in && ql >= first_visible[half]) {
            const float pr = tc_exp_scaled(st[nt][2 * half + h], scale_log2, L[ql]);
            const float z = keep_factor_at<DROP>(p, w, 16 * h + g + 8 * half);
            pz = pr * z;
            ds = pr * (dpt[nt][2 * half + h] * z - Dq[ql]) * p.scale;
          }
          st[nt][2 * half + h] = pz, dpt[nt][2 * half + h] = ds;
        }
      }
    }
    add_rows_by_tile<NC>(acc_v, st, dO, ld);  // dV += (P∘Z)ᵀ·dO
    add_rows_by_tile<NC>(acc_k, dpt, Q, ld);  // dK += dSᵀ·Q
  }
  if constexpr (ROWS) {
    store_qkv_rows<NC>(smem, acc_k, bt, p, rows, 1, vec);
    store_qkv_rows<NC>(smem, acc_v, bt, p, rows, 2, vec);
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      if (key[half] < s) {
        store_row<NC>(dk + head, key[half], acc_k, half, 1.0f, dh, dh, vec);
        store_row<NC>(dv + head, key[half], acc_v, half, 1.0f, dh, dh, vec);
      }
  }
}

}  // namespace

bool flash_tc_shape(const FlashShape& x) {
  // s below 2^31: the kernels take a row's and a tile's place in the sequence as 32-bit counts.
  return x.bf16_operands && x.dh % 16 == 0 && x.dh <= kFlashMaxHeadDim && x.s < (int64_t(1) << 31);
}

namespace {
// The forward's query slabs a head size allows: kForwardSlabs (two at dh ≤ 64), one past that.
int max_forward_slabs(int64_t dh) { return chunks_for(dh) == 4 ? kForwardSlabs<4> : 1; }
// The forms lattice_cuda_check asks for (flash_tc_force_forms; tuned: the fastest), and the forms this
// thread's last calls took (flash_tc_last_forward_form, flash_tc_last_dq_form).
thread_local ForwardForm forced_forward = ForwardForm::tuned, last_forward = ForwardForm::none;
thread_local DqForm forced_dq = DqForm::tuned, last_dq = DqForm::none;

// Where several forms serve a shape, the call takes the fastest, timed on the call's own arguments the
// first time the shape comes (the kernel, device, b·a, s, dh, dropout, copies ahead, operand and output
// types): each form once to warm, then three interleaved rounds, the fastest of each; on a tie the
// earlier form. The forms give the same bits (lattice_cuda_check's [bits] lines) and write only their
// outputs, so running one several times moves only the time, and a rerun choosing another form
// repeats the run to the bit. Which is faster depends on the card: two slabs halve the key tiles'
// reads and loads, one slab runs twice the blocks an SM (127 registers against 236), a dense form
// more blocks again at the price of a few spilled bytes. On any CUDA error the first form is taken and
// the error cleared.
using FormKey = std::array<int64_t, 10>;
std::mutex tuned_mutex;
// LATTICE_CUDA_ATTENTION_DENSE=0 leaves the dense forms out of the tuner's choice (device-check's
// fallback where their lines fail); a form forced by flash_tc_force_forms still runs.
bool dense_forms_tuned() {
  static const bool on = env_switch_on("LATTICE_CUDA_ATTENTION_DENSE");
  return on;
}
std::map<FormKey, int> tuned_forms;
template <class Form, size_t F, class Run>
Form tuned_form(const FormKey& key, const std::array<Form, F>& forms, Run run, cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(tuned_mutex);
    const auto it = tuned_forms.find(key);
    if (it != tuned_forms.end()) return forms[size_t(it->second)];
  }
  size_t chosen = 0;
  struct Events {  // destroyed however the timing ends (a launch that throws included)
    cudaEvent_t e[F + 1] = {};
    ~Events() {
      for (auto x : e)
        if (x) (void)cudaEventDestroy(x);
    }
  } events;
  cudaEvent_t* ev = events.e;
  bool ok = true;
  for (size_t i = 0; i <= F; ++i) ok = ok && cudaEventCreate(&ev[i]) == cudaSuccess;
  if (ok) {
    for (Form f : forms) run(f);  // warm: the first launches of a kernel pay its loading
    std::array<float, F> best;
    best.fill(1e30f);
    for (int round = 0; round < 3 && ok; ++round) {
      ok = cudaEventRecord(ev[0], stream) == cudaSuccess;
      for (size_t i = 0; i < F; ++i) {
        run(forms[i]);
        ok = ok && cudaEventRecord(ev[i + 1], stream) == cudaSuccess;
      }
      ok = ok && cudaEventSynchronize(ev[F]) == cudaSuccess;
      for (size_t i = 0; i < F && ok; ++i) {
        float ms = 0.0f;
        ok = cudaEventElapsedTime(&ms, ev[i], ev[i + 1]) == cudaSuccess;
        best[i] = std::min(best[i], ms);
      }
    }
    if (ok)
      for (size_t i = 1; i < F; ++i)
        if (best[i] < best[chosen]) chosen = i;
  }
  if (!ok) (void)cudaGetLastError(), chosen = 0;
  std::lock_guard<std::mutex> lock(tuned_mutex);
  return forms[size_t(tuned_forms.emplace(key, int(chosen)).first->second)];
}

// The largest block's shared memory, with or without the second buffers of the copies ahead.
size_t most_smem(int64_t dh, bool ahead) {
  size_t most = 0;
  for (Kernel kind : {Kernel::forward, Kernel::dq, Kernel::dkdv})
    most = std::max(most, tiles_of(kind, nullptr, tile_width(dh), ahead,
                                   kind == Kernel::forward ? max_forward_slabs(dh) : 1).bytes);
  return most;
}
}  // namespace

bool flash_tc_supported(const FlashShape& x) {
  if (!flash_tc_shape(x)) return false;
  // The card needs bf16 tensor cores (sm_80 on) and the shared memory of the largest block without the
  // copies ahead (69 KiB at dh 128: a 99 KiB consumer card's limit holds it; the copies ahead run
  // where theirs fits too), and the build must hold the kernels as compiled for sm_80 or later (built
  // for an older architecture, they trap).
  int device = 0, major = 0, optin = 0;
  cudaFuncAttributes built{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaFuncGetAttributes(&built, tc_forward_kernel<4, 1, false, false, uint16_t, float>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (built.ptxVersion < 80) return false;
  return major >= 8 && size_t(optin) >= most_smem(x.dh, false);
}

namespace {
static_assert(kMaxChunks == 8, "the kernels' register tiles are instantiated for dh up to 64, 96 and 128");

// 16-byte loads and 8-byte stores where every pointer allows them (cudaMalloc's always do).
template <class... P>
bool all_aligned(const P*... ptrs) {
  return (aligned_to(ptrs, 16) && ...);
}

// The kernels' compile-time choices for a call, handed to f(nc, drop, ahead) as integral constants: NC
// (chunks_for: 4, 6 or 8), DROP, and AHEAD (key tiles copied ahead: bf16 bits at 16-byte-aligned addresses
// only; fp32 operands never instantiate it).
template <class F, class NC, class D>
void with_ahead(const float*, bool, F& f, NC nc, D d) {
  f(nc, d, std::false_type{});
}
template <class F, class NC, class D>
void with_ahead(const uint16_t*, bool ahead, F& f, NC nc, D d) {
  if (ahead) f(nc, d, std::true_type{});
  else f(nc, d, std::false_type{});
}
template <class TIn, class F>
void with_choices(const FlashShape& x, bool drop, bool ahead, F f) {
  const auto with_drop = [&](auto nc) {
    if (drop) with_ahead(static_cast<const TIn*>(nullptr), ahead, f, nc, std::true_type{});
    else with_ahead(static_cast<const TIn*>(nullptr), ahead, f, nc, std::false_type{});
  };
  switch (chunks_for(x.dh)) {
    case 4: return with_drop(std::integral_constant<int, 4>{});
    case 6: return with_drop(std::integral_constant<int, 6>{});
    default: return with_drop(std::integral_constant<int, 8>{});
  }
}

// The kernels' arguments, with Q, K, V in the QKV rows where qkv_rows says so (bf16 bits only: the
// fp32 operands are the head layout's). Their row stride must keep a tile's source offsets within 32
// bits (load_tile_async).
FlashArgs qkv_args(const FlashShape& x, const AttentionDropout& drop, bool qkv_rows) {
  FlashArgs p = make_args(x, drop);
  if (!qkv_rows) return p;
  p.qkv_rows = true, p.ld_qkv = 3 * x.a * x.dh;
  if (p.ld_qkv >= (int64_t(1) << 24))
    throw std::invalid_argument("CUDA: flash attention: QKV rows of " + std::to_string(p.ld_qkv) +
                                " columns are past the kernels' 2^24");
  return p;
}

template <class TIn, class TOut>
void tc_forward(TOut* out, float* lse, const TIn* q, const TIn* k, const TIn* v, const FlashShape& x,
                const AttentionDropout& drop, cudaStream_t stream, bool qkv_rows = false) {
  const FlashArgs p = qkv_args(x, drop, qkv_rows);
  const bool vec = all_aligned(q, k, v) && aligned_to(out, 16);  // the bf16 rows' pair stores need 4
  const bool ahead = vec && size_t(smem_optin()) >= most_smem(x.dh, true);
  const char* name = "flash_attention_forward (tensor cores)";
  with_choices<TIn>(x, p.dropout, ahead, [&](auto nc, auto d, auto ahead) {
    constexpr int kNC = decltype(nc)::value;
    constexpr bool kDrop = decltype(d)::value, kAhead = decltype(ahead)::value;
    const auto launch = [&](auto mt, auto dense) {
      constexpr int kMT = decltype(mt)::value;
      constexpr bool kDense = decltype(dense)::value;
      const auto kernel = tc_forward_kernel<kNC, kMT, kDrop, kAhead, TIn, TOut, kDense>;
      const size_t bytes = tiles_of(Kernel::forward, nullptr, kTileWidth<kNC>, kAhead, kMT).bytes;
      const dim3 grid(unsigned((x.s + kMT * kT - 1) / (kMT * kT)), unsigned(x.b * x.a));
      allow_smem(kernel, bytes, name);
      kernel<<<grid, kThreads, bytes, stream>>>(out, lse, q, k, v, p, vec);
      last_forward = kMT == 2 ? ForwardForm::two_slabs : kDense ? ForwardForm::one_slab_dense : ForwardForm::one_slab;
    };
    // A form this shape has not compiled runs as one slab.
    const auto launch_form = [&](ForwardForm f) {
      if constexpr (kForwardSlabs<kNC> == 2) {
        if (f == ForwardForm::two_slabs) return launch(std::integral_constant<int, 2>{}, std::false_type{});
        if constexpr (kHasDense<kNC, kDrop, TIn>)
          if (f == ForwardForm::one_slab_dense) return launch(std::integral_constant<int, 1>{}, std::true_type{});
      }
      launch(std::integral_constant<int, 1>{}, std::false_type{});
    };
    ForwardForm form = forced_forward;
    if constexpr (kForwardSlabs<kNC> == 2) {
      if (form == ForwardForm::tuned) {
        int device = 0;
        (void)cudaGetDevice(&device);
        const FormKey key{0, device, x.b * x.a, x.s, x.dh, p.dropout, kAhead, int64_t(sizeof(TIn)),
                          int64_t(sizeof(TOut)), qkv_rows};
        using F = ForwardForm;
        bool dense = false;
        if constexpr (kHasDense<kNC, kDrop, TIn>) dense = dense_forms_tuned();
        if (dense)
          form = tuned_form(key, std::array<F, 3>{F::two_slabs, F::one_slab, F::one_slab_dense}, launch_form, stream);
        else
          form = tuned_form(key, std::array<F, 2>{F::two_slabs, F::one_slab}, launch_form, stream);
      }
    }
    launch_form(form);
  });
  check_launch(name);
}
// dout16: dO rounded to bf16 once (by the caller's D pass), as the kernels rounded it tile by tile
// before (the same bits): every key tile's block reads every later query tile's dO, at half the bytes
// and by cp.async. `rows` given (bf16 bits in only): the gradients go to the QKV rows, not dq, dk, dv.
template <class TIn>
void tc_backward(float* dq, float* dk, float* dv, QkvRows rows, const uint16_t* dout16, const TIn* q, const TIn* k,
                 const TIn* v, const float* lse, const float* D, const FlashShape& x, const AttentionDropout& drop,
                 cudaStream_t stream, bool qkv_rows = false) {
  const FlashArgs p = qkv_args(x, drop, qkv_rows);
  const bool vec = all_aligned(q, k, v) && aligned_to(dout16, 16) &&
                   all_aligned(static_cast<const float*>(dq), static_cast<const float*>(dk),
                               static_cast<const float*>(dv)) &&
                   aligned_to(rows.rows, 8);  // the rows' four-element stores
  const bool ahead = vec && size_t(smem_optin()) >= most_smem(x.dh, true);
  const dim3 grid(unsigned((x.s + kT - 1) / kT), unsigned(x.b * x.a));
  const char* name1 = "flash_attention_backward dK dV (tensor cores)";
  const char* name2 = "flash_attention_backward dQ (tensor cores)";
  const auto launch = [&](auto nc, auto d, auto ahead, auto to_rows) {
    constexpr int kNC = decltype(nc)::value;
    constexpr bool kDrop = decltype(d)::value, kAhead = decltype(ahead)::value, kRows = decltype(to_rows)::value;
    const auto dkdv = tc_dkdv_kernel<kNC, kDrop, kAhead, TIn, kRows>;
    const size_t b1 = tiles_of(Kernel::dkdv, nullptr, kTileWidth<kNC>, kAhead).bytes;
    const size_t b2 = tiles_of(Kernel::dq, nullptr, kTileWidth<kNC>, kAhead).bytes;
    if (kRows && std::min(b1, b2) < qkv_stage_floats(int(x.dh)) * sizeof(float))
      throw std::logic_error("CUDA: flash_attention_backward: the QKV rows' stage is past the block's tiles");
    allow_smem(dkdv, b1, name1);
    dkdv<<<grid, kThreads, b1, stream>>>(dk, dv, rows, dout16, q, k, v, lse, D, p, vec);
    check_launch(name1);
    const auto launch_dq = [&](auto dense) {
      const auto dqk = tc_dq_kernel<kNC, kDrop, kAhead, TIn, kRows, decltype(dense)::value>;
      allow_smem(dqk, b2, name2);
      dqk<<<grid, kThreads, b2, stream>>>(dq, rows, dout16, q, k, v, lse, D, p, vec);
      last_dq = decltype(dense)::value ? DqForm::dense : DqForm::plain;
    };
    const auto launch_form = [&](DqForm f) {  // a form this shape has not compiled runs plain
      if constexpr (kHasDense<kNC, kDrop, TIn>)
        if (f == DqForm::dense) return launch_dq(std::true_type{});
      launch_dq(std::false_type{});
    };
    DqForm form = forced_dq;
    if constexpr (kHasDense<kNC, kDrop, TIn>) {
      if (form == DqForm::tuned && !dense_forms_tuned()) form = DqForm::plain;
      if (form == DqForm::tuned) {
        int device = 0;
        (void)cudaGetDevice(&device);
        const FormKey key{1, device, x.b * x.a, x.s, x.dh, p.dropout, kAhead, int64_t(sizeof(TIn)), kRows, qkv_rows};
        form = tuned_form(key, std::array<DqForm, 2>{DqForm::plain, DqForm::dense}, launch_form, stream);
      }
    }
    launch_form(form);
    check_launch(name2);
  };
  with_choices<TIn>(x, p.dropout, ahead, [&](auto nc, auto d, auto ahead) {
    if constexpr (std::is_same_v<TIn, uint16_t>) {
      if (rows.rows) return launch(nc, d, ahead, std::true_type{});
    }
    launch(nc, d, ahead, std::false_type{});
  });
}
}  // namespace

void flash_tc_force_forms(ForwardForm forward, DqForm dq) {
  if (forward == ForwardForm::none || dq == DqForm::none)
    throw std::invalid_argument("flash_tc_force_forms: a form or tuned");
  forced_forward = forward, forced_dq = dq;
}
ForwardForm flash_tc_last_forward_form() { return last_forward; }
DqForm flash_tc_last_dq_form() { return last_dq; }
const char* flash_tc_form_name(ForwardForm f) {
  switch (f) {
    case ForwardForm::two_slabs: return "128-row query tiles";
    case ForwardForm::one_slab: return "64-row query tiles";
    case ForwardForm::one_slab_dense: return "64-row query tiles, 96 registers";
    case ForwardForm::tuned: return "tuned";
    case ForwardForm::none: break;
  }
  return "none";
}
const char* flash_tc_form_name(DqForm f) {
  switch (f) {
    case DqForm::plain: return "dQ as compiled";
    case DqForm::dense: return "dQ in 128 registers";
    case DqForm::tuned: return "tuned";
    case DqForm::none: break;
  }
  return "none";
}
void flash_tc_forward(float* out, float* lse, const float* q, const float* k, const float* v, const FlashShape& x,
                      const AttentionDropout& drop, cudaStream_t stream) {
  tc_forward(out, lse, q, k, v, x, drop, stream);
}
void flash_tc_forward(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                      const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream) {
  tc_forward(out, lse, q, k, v, x, drop, stream);
}
void flash_tc_forward_rows(uint16_t* out_rows, float* lse, const QkvBits& in, const FlashShape& x,
                           const AttentionDropout& drop, cudaStream_t stream) {
  tc_forward(out_rows, lse, in.q, in.k, in.v, x, drop, stream, in.rows);
}
void flash_tc_backward(float* dq, float* dk, float* dv, const uint16_t* dout16, const float* q, const float* k,
                       const float* v, const float* lse, const float* D, const FlashShape& x,
                       const AttentionDropout& drop, cudaStream_t stream) {
  tc_backward(dq, dk, dv, QkvRows{}, dout16, q, k, v, lse, D, x, drop, stream);
}
void flash_tc_backward(float* dq, float* dk, float* dv, const uint16_t* dout16, const QkvBits& in, const float* lse,
                       const float* D, const FlashShape& x, const AttentionDropout& drop, cudaStream_t stream) {
  tc_backward(dq, dk, dv, QkvRows{}, dout16, in.q, in.k, in.v, lse, D, x, drop, stream, in.rows);
}
void flash_tc_backward_qkv_rows(uint16_t* dqkv16, float* partial, const uint16_t* dout16, const QkvBits& in,
                                const float* lse, const float* D, const FlashShape& x, const AttentionDropout& drop,
                                cudaStream_t stream) {
  if (x.s % kColumnChunkRows != 0)
    throw std::invalid_argument("CUDA: flash_attention_backward: the QKV rows' column sums need s a multiple of 64");
  tc_backward(nullptr, nullptr, nullptr, QkvRows{dqkv16, partial}, dout16, in.q, in.k, in.v, lse, D, x, drop, stream,
              in.rows);
}

}  // namespace lattice::cuda
