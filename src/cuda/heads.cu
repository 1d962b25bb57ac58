// Attention's head layout on the device (model/attention.cpp's four loops), and the bf16 pass's
// narrowing split and merge (cuda/bf16_fused.hpp): one thread per element of the [b, a, s, dh] side,
// grid-stride. Copies (and bf16 rounding): the results are the CPU's bits.
#include "cuda/bf16_fused.hpp"
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

// Element k of [b, a, s, dh] and where it sits in a [b·s, width] row block: row bi·s + si, column
// hd·dh + e (plus the q/k/v part's offset, a multiple of hl).
struct HeadIndex {
  int64_t row, col;
};
__device__ __forceinline__ HeadIndex head_index(int64_t k, int64_t s, int64_t a, int64_t dh) {
  const int64_t e = k % dh, si = (k / dh) % s, bh = k / (dh * s), hd = bh % a, bi = bh / a;
  return {bi * s + si, hd * dh + e};
}

// T: the heads as stored, fp32 or narrowed to bf16 (the bf16 pass, cuda/bf16_fused.hpp).
template <class T>
__global__ void split_heads_kernel(T* q, T* kk, T* v, const float* qkv, int64_t s, int64_t a, int64_t dh,
                                   int64_t total) {
  const int64_t hl = a * dh;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const HeadIndex x = head_index(k, s, a, dh);
    const float* row = qkv + x.row * 3 * hl;
    q[k] = stored_as<T>(row[x.col]);
    kk[k] = stored_as<T>(row[hl + x.col]);
    v[k] = stored_as<T>(row[2 * hl + x.col]);
  }
}
__global__ void merge_qkv_grads_kernel(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t s,
                                       int64_t a, int64_t dh, int64_t total) {
  const int64_t hl = a * dh;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const HeadIndex x = head_index(k, s, a, dh);
    float* row = dqkv + x.row * 3 * hl;
    row[x.col] = dq[k];
    row[hl + x.col] = dk[k];
    row[2 * hl + x.col] = dv[k];
  }
}
// to_rows: heads [b, a, s, dh] → rows [b·s, hl]; otherwise rows → heads. T: the destination as stored.
template <bool to_rows, class T = float>
__global__ void head_rows_kernel(T* dst, const float* src, int64_t s, int64_t a, int64_t dh, int64_t total) {
  const int64_t hl = a * dh;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const HeadIndex x = head_index(k, s, a, dh);
    if (to_rows)
      dst[x.row * hl + x.col] = stored_as<T>(src[k]);
    else
      dst[k] = stored_as<T>(src[x.row * hl + x.col]);
  }
}

}  // namespace

void split_heads(float* q, float* k, float* v, const float* qkv, int64_t b, int64_t s, int64_t a, int64_t dh,
                 cudaStream_t stream) {
  const int64_t total = b * a * s * dh;
  if (total <= 0) return;
  split_heads_kernel<<<grid_for(total), kBlock, 0, stream>>>(q, k, v, qkv, s, a, dh, total);
  check_launch("split_heads");
}
void split_heads_bf16(uint16_t* q, uint16_t* k, uint16_t* v, const float* qkv, int64_t b, int64_t s, int64_t a,
                      int64_t dh, cudaStream_t stream) {
  const int64_t total = b * a * s * dh;
  if (total <= 0) return;
  split_heads_kernel<<<grid_for(total), kBlock, 0, stream>>>(q, k, v, qkv, s, a, dh, total);
  check_launch("split_heads_bf16");
}
void merge_heads_bf16(uint16_t* out, const float* heads, int64_t b, int64_t s, int64_t a, int64_t dh,
                      cudaStream_t stream) {
  const int64_t total = b * a * s * dh;
  if (total <= 0) return;
  head_rows_kernel<true><<<grid_for(total), kBlock, 0, stream>>>(out, heads, s, a, dh, total);
  check_launch("merge_heads_bf16");
}
void merge_heads(float* out, const float* heads, int64_t b, int64_t s, int64_t a, int64_t dh, cudaStream_t stream) {
  const int64_t total = b * a * s * dh;
  if (total <= 0) return;
  head_rows_kernel<true><<<grid_for(total), kBlock, 0, stream>>>(out, heads, s, a, dh, total);
  check_launch("merge_heads");
}
void unmerge_heads(float* heads, const float* rows, int64_t b, int64_t s, int64_t a, int64_t dh, cudaStream_t stream) {
  const int64_t total = b * a * s * dh;
  if (total <= 0) return;
  head_rows_kernel<false><<<grid_for(total), kBlock, 0, stream>>>(heads, rows, s, a, dh, total);
  check_launch("unmerge_heads");
}
void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t b, int64_t s, int64_t a,
                     int64_t dh, cudaStream_t stream) {
  const int64_t total = b * a * s * dh;
  if (total <= 0) return;
  merge_qkv_grads_kernel<<<grid_for(total), kBlock, 0, stream>>>(dqkv, dq, dk, dv, s, a, dh, total);
  check_launch("merge_qkv_grads");
}

}  // namespace lattice::cuda
