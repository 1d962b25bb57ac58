// Attention's head layout on the device (model/attention.cpp's four loops), and the bf16 pass's
// narrowing split and merge (cuda/bf16_fused.hpp): one block per row of the [b·s, ·] side. Copies
// (and bf16 rounding): the results are the CPU's bits.
#include <algorithm>
#include <type_traits>

#include "core/fast_divisor.hpp"
#include "cuda/bf16_fused.hpp"
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

// One block per row (bi, si) of the [b·s, width] side (width = hl, or 3·hl for the qkv rows), its
// threads walking the row's hl columns: the reads or writes of a row are contiguous, and those of one
// head's dh columns land contiguous in [b, a, s, dh]. A column's head is c / dh by a multiply-high
// (core/fast_divisor.hpp; columns < 2^31, checked at launch). The form before, one thread per element
// of a flat index split by four 64-bit divisions, moved 0.8–1.8 TB/s of the H200's 4.8 (2026-11-27
// profile, GPT-2 at micro-batch 32).
struct HeadRow {
  int64_t row, base;  // the row's offset in [b·s, ·] rows, and (bi, head 0, si, 0) in [b, a, s, dh]
  int64_t head_stride;  // s·dh: from one head to the next
};
__device__ __forceinline__ HeadRow head_row(int64_t s, int64_t a, int64_t dh) {
  const int64_t row = blockIdx.x, bi = row / s, si = row - bi * s;  // one division a block
  return {row, (bi * a * s + si) * dh, s * dh};
}
__device__ __forceinline__ int64_t head_at(const HeadRow& r, int c, const FastDivisor& dh) {
  const uint32_t hd = dh.div(uint32_t(c));
  return r.base + int64_t(hd) * r.head_stride + int64_t(dh.mod(uint32_t(c), hd));
}

// T: the heads as stored, fp32 or narrowed to bf16 (the bf16 pass, cuda/bf16_fused.hpp); S: the rows
// as stored, fp32 or bf16 bits already (then T bf16: the bits copied as they are; T fp32: widened,
// split_heads_widened).
template <class T, class S>
__device__ __forceinline__ T head_value(S x) {
  if constexpr (std::is_same_v<T, S>) return x;
  else if constexpr (std::is_same_v<S, uint16_t>) return from_bf16_bits(x);  // widened (T fp32)
  else return stored_as<T>(x);
}
template <class T, class S = float>
__global__ void split_heads_kernel(T* q, T* kk, T* v, const S* qkv, int64_t s, int64_t a, FastDivisor dh) {
  const HeadRow r = head_row(s, a, dh.d);
  const int hl = int(a * dh.d);
  const S* src = qkv + r.row * 3 * hl;
  for (int c = int(threadIdx.x); c < hl; c += int(blockDim.x)) {
    const int64_t at = head_at(r, c, dh);
    q[at] = head_value<T>(src[c]);
    kk[at] = head_value<T>(src[hl + c]);
    v[at] = head_value<T>(src[2 * hl + c]);
  }
}
__global__ void merge_qkv_grads_kernel(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t s,
                                       int64_t a, FastDivisor dh) {
  const HeadRow r = head_row(s, a, dh.d);
  const int hl = int(a * dh.d);
  float* dst = dqkv + r.row * 3 * hl;
  for (int c = int(threadIdx.x); c < hl; c += int(blockDim.x)) {
    const int64_t at = head_at(r, c, dh);
    dst[c] = dq[at];
    dst[hl + c] = dk[at];
    dst[2 * hl + c] = dv[at];
  }
}
// split_heads16 eight columns a thread (dh a multiple of 8, every pointer 16-byte aligned): eight
// columns from c, a multiple of 8, lie in one head and land contiguous there, so each part is one
// 16-byte load and store where the form above moved two bytes at a time, its three loads of a column
// waiting on the stores before them (1.6 TB/s of the H200's 4.8, run 4). Copies: the same bits.
__global__ void split_heads16_x8_kernel(uint16_t* q, uint16_t* kk, uint16_t* v, const uint16_t* qkv, int64_t s,
                                        int64_t a, FastDivisor dh) {
  const HeadRow r = head_row(s, a, dh.d);
  const int hl = int(a * dh.d);
  const uint16_t* src = qkv + r.row * 3 * hl;
  const int c = 8 * int(threadIdx.x);
  if (c >= hl) return;
  const uint4 x0 = *reinterpret_cast<const uint4*>(src + c), x1 = *reinterpret_cast<const uint4*>(src + hl + c),
              x2 = *reinterpret_cast<const uint4*>(src + 2 * hl + c);
  const int64_t at = head_at(r, c, dh);
  *reinterpret_cast<uint4*>(q + at) = x0;
  *reinterpret_cast<uint4*>(kk + at) = x1;
  *reinterpret_cast<uint4*>(v + at) = x2;
}
// to_rows: heads [b, a, s, dh] → rows [b·s, hl]; otherwise rows → heads. T: the destination as stored;
// S: the source as stored (bf16 rows read widened: the fused backward's kept O).
template <bool to_rows, class T = float, class S = float>
__global__ void head_rows_kernel(T* dst, const S* src, int64_t s, int64_t a, FastDivisor dh) {
  const HeadRow r = head_row(s, a, dh.d);
  const int hl = int(a * dh.d);
  for (int c = int(threadIdx.x); c < hl; c += int(blockDim.x)) {
    const int64_t at = head_at(r, c, dh);
    if (to_rows)
      dst[r.row * hl + c] = stored_as<T>(load_f32(src, at));
    else
      dst[at] = stored_as<T>(load_f32(src, r.row * hl + c));
  }
}

// A launch: b·s blocks (one a row) of as many threads as the row's hl columns need, up to 256 (a
// tensor-parallel shard's hl of 128 leaves none idle). `width`, the widest row a kernel indexes (3·hl
// for the qkv rows), and the row count must stay within 32-bit indices and the grid.
struct HeadLaunch {
  unsigned blocks = 0, threads = 0;
  FastDivisor dh;
};
bool head_launch(int64_t b, int64_t s, int64_t a, int64_t dh, int64_t width, HeadLaunch* l, const char* kernel) {
  if (b <= 0 || s <= 0 || a <= 0 || dh <= 0) return false;
  if (width > int64_t(0x7fffffff) || b * s > int64_t(0x7fffffff))
    throw std::runtime_error(std::string("CUDA: ") + kernel + ": rows of " + std::to_string(width) + " columns, " +
                             std::to_string(b * s) + " of them, are past one launch");
  const int64_t hl = a * dh;
  l->blocks = unsigned(b * s);
  l->threads = unsigned(std::min<int64_t>(kBlock, (hl + 31) / 32 * 32));
  l->dh = FastDivisor(dh);
  return true;
}

}  // namespace

void split_heads(float* q, float* k, float* v, const float* qkv, int64_t b, int64_t s, int64_t a, int64_t dh,
                 cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, 3 * a * dh, &l, "split_heads")) return;
  split_heads_kernel<<<l.blocks, l.threads, 0, stream>>>(q, k, v, qkv, s, a, l.dh);
  check_launch("split_heads");
}
void split_heads16(uint16_t* q, uint16_t* k, uint16_t* v, const uint16_t* qkv16, int64_t b, int64_t s, int64_t a,
                   int64_t dh, cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, 3 * a * dh, &l, "split_heads16")) return;
  const int64_t groups = a * dh / 8;  // a row's eight-column groups: one thread each
  if (dh % 8 == 0 && groups <= 1024 && aligned_to(qkv16, 16) && aligned_to(q, 16) && aligned_to(k, 16) &&
      aligned_to(v, 16))
    split_heads16_x8_kernel<<<l.blocks, unsigned((groups + 31) / 32 * 32), 0, stream>>>(q, k, v, qkv16, s, a, l.dh);
  else
    split_heads_kernel<<<l.blocks, l.threads, 0, stream>>>(q, k, v, qkv16, s, a, l.dh);
  check_launch("split_heads16");
}
void split_heads_widened(float* q, float* k, float* v, const uint16_t* qkv16, int64_t b, int64_t s, int64_t a,
                         int64_t dh, cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, 3 * a * dh, &l, "split_heads_widened")) return;
  split_heads_kernel<<<l.blocks, l.threads, 0, stream>>>(q, k, v, qkv16, s, a, l.dh);
  check_launch("split_heads_widened");
}
void merge_heads_bf16(uint16_t* out, const float* heads, int64_t b, int64_t s, int64_t a, int64_t dh,
                      cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, a * dh, &l, "merge_heads_bf16")) return;
  head_rows_kernel<true><<<l.blocks, l.threads, 0, stream>>>(out, heads, s, a, l.dh);
  check_launch("merge_heads_bf16");
}
void unmerge_heads_bf16(float* heads, const uint16_t* rows16, int64_t b, int64_t s, int64_t a, int64_t dh,
                        cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, a * dh, &l, "unmerge_heads_bf16")) return;
  head_rows_kernel<false, float, uint16_t><<<l.blocks, l.threads, 0, stream>>>(heads, rows16, s, a, l.dh);
  check_launch("unmerge_heads_bf16");
}
void merge_heads(float* out, const float* heads, int64_t b, int64_t s, int64_t a, int64_t dh, cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, a * dh, &l, "merge_heads")) return;
  head_rows_kernel<true><<<l.blocks, l.threads, 0, stream>>>(out, heads, s, a, l.dh);
  check_launch("merge_heads");
}
void unmerge_heads(float* heads, const float* rows, int64_t b, int64_t s, int64_t a, int64_t dh, cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, a * dh, &l, "unmerge_heads")) return;
  head_rows_kernel<false><<<l.blocks, l.threads, 0, stream>>>(heads, rows, s, a, l.dh);
  check_launch("unmerge_heads");
}
void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t b, int64_t s, int64_t a,
                     int64_t dh, cudaStream_t stream) {
  HeadLaunch l;
  if (!head_launch(b, s, a, dh, 3 * a * dh, &l, "merge_qkv_grads")) return;
  merge_qkv_grads_kernel<<<l.blocks, l.threads, 0, stream>>>(dqkv, dq, dk, dv, s, a, l.dh);
  check_launch("merge_qkv_grads");
}

}  // namespace lattice::cuda
