// The bf16 passes' element-wise and column-sum kernels (cuda/bf16_fused.hpp); the row kernels'
// (LayerNorm, softmax) and the head layouts' bf16 forms are beside their fp32 forms, in cuda/rows.cu
// and cuda/heads.cu. Each reads its fp32 inputs once and writes only the narrowed results: the staged
// sequence they replace wrote and re-read an fp32 copy per step.
#include "cuda/bf16_fused.hpp"

#include <algorithm>

#include "cuda/common.cuh"

namespace lattice::cuda {
using namespace detail;

namespace {

__global__ void gelu_forward16_kernel(uint16_t* act16, const uint16_t* pre16, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    act16[i] = to_bf16_bits(gelu_value(from_bf16_bits(pre16[i])));
}
// The same values four elements a group, where the pointers allow it (both 8-byte aligned): one
// 8-byte load and store in place of four 2-byte ones, and kGroupsInFlight groups a thread, all loaded
// before any is stored. One group a thread kept 16 KB of loads in flight an SM, which moved 1.7 TB/s
// of the H200's 4.8 (run 4): an SM needs some 40 KB in flight to cover the memory's latency.
constexpr int kGroupsInFlight = 4;
__global__ void gelu_forward16_x4_kernel(uint2* act16, const uint2* pre16, int64_t n4) {
  const int64_t width = int64_t(blockDim.x) * kGroupsInFlight;
  for (int64_t i0 = int64_t(blockIdx.x) * width + threadIdx.x; i0 < n4; i0 += int64_t(gridDim.x) * width) {
    uint2 p[kGroupsInFlight];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u)
      if (i0 + u * int64_t(blockDim.x) < n4) p[u] = pre16[i0 + u * int64_t(blockDim.x)];
#pragma unroll
    for (int u = 0; u < kGroupsInFlight; ++u) {
      const int64_t i = i0 + u * int64_t(blockDim.x);
      if (i >= n4) break;
      const float x0 = from_bf16_bits(uint16_t(p[u].x & 0xffffu)), x1 = from_bf16_bits(uint16_t(p[u].x >> 16)),
                  x2 = from_bf16_bits(uint16_t(p[u].y & 0xffffu)), x3 = from_bf16_bits(uint16_t(p[u].y >> 16));
      act16[i] = make_uint2(bf16_pair(gelu_value(x0), gelu_value(x1)), bf16_pair(gelu_value(x2), gelu_value(x3)));
    }
  }
}

// Column-sum elements (cuda/common.cuh's column_partials_kernel) that also store their value narrowed.
struct NarrowElement {  // dy itself
  const float* dy;
  uint16_t* dst16;
  int64_t out;
  using Input = float;
  __device__ Input load(int64_t r, int64_t c) const { return dy[r * out + c]; }
  __device__ float finish(int64_t r, int64_t c, Input v) const {
    dst16[r * out + c] = to_bf16_bits(v);
    return v;
  }
};
struct GeluGradElement {  // dout · gelu'(pre), both read from bf16
  const uint16_t* pre16;
  const uint16_t* dout16;
  uint16_t* dst16;
  int64_t out;
  struct Input {
    uint16_t dout16, pre16;
  };
  __device__ Input load(int64_t r, int64_t c) const { return {dout16[r * out + c], pre16[r * out + c]}; }
  __device__ float finish(int64_t r, int64_t c, Input in) const {
    const float v = from_bf16_bits(in.dout16) * gelu_grad(from_bf16_bits(in.pre16));
    dst16[r * out + c] = to_bf16_bits(v);
    return v;
  }
};
// gelu_backward_narrow's column partials two adjacent columns a thread (out even, the pointers 4-byte
// aligned): each row's dout and pre of both columns one 32-bit load apiece, where the one-column form
// (column_partials_kernel with GeluGradElement) made two 2-byte loads a column; kColumnBatch rows loaded
// before any is finished, as there. Each column adds its rows in order from zero, as there: the bits
// are that form's (the kernel check's [bits] line).
__global__ void gelu_grad_pair_partials_kernel(float* partial, const uint32_t* pre16, const uint32_t* dout16,
                                               uint32_t* g16, int64_t N, int64_t out, int64_t chunks) {
  const int64_t pairs = out / 2;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < chunks * pairs;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t chunk = k / pairs, c2 = k - chunk * pairs;
    const int64_t r1 = min(N, (chunk + 1) * kColumnChunkRows);
    float acc0 = 0.0f, acc1 = 0.0f;
    const auto finish = [&](int64_t r, uint32_t d, uint32_t p) {
      const float v0 = from_bf16_bits(uint16_t(d & 0xffffu)) * gelu_grad(from_bf16_bits(uint16_t(p & 0xffffu)));
      const float v1 = from_bf16_bits(uint16_t(d >> 16)) * gelu_grad(from_bf16_bits(uint16_t(p >> 16)));
      g16[r * pairs + c2] = bf16_pair(v0, v1);
      acc0 += v0, acc1 += v1;
    };
    int64_t r = chunk * kColumnChunkRows;
    for (; r + kColumnBatch <= r1; r += kColumnBatch) {
      uint32_t d[kColumnBatch], p[kColumnBatch];
#pragma unroll
      for (int u = 0; u < kColumnBatch; ++u) d[u] = dout16[(r + u) * pairs + c2], p[u] = pre16[(r + u) * pairs + c2];
#pragma unroll
      for (int u = 0; u < kColumnBatch; ++u) finish(r + u, d[u], p[u]);
    }
    for (; r < r1; ++r) finish(r, dout16[r * pairs + c2], pre16[r * pairs + c2]);
    partial[chunk * out + 2 * c2] = acc0;
    partial[chunk * out + 2 * c2 + 1] = acc1;
  }
}
struct QkvGradElement {  // row r, column c of merge_qkv_grads' [b·s, 3·hl] rows, read from dq, dk, dv
  const float* dq;
  const float* dk;
  const float* dv;
  uint16_t* dst16;
  int s, a, dh, hl;  // 32-bit index arithmetic: rows and 3·hl columns < 2^31 (merge_qkv_grads_narrow checks)
  using Input = float;
  __device__ Input load(int64_t r, int64_t c) const {
    // The column's part, head and element do not change down a column: the compiler keeps them out of
    // column_partials_kernel's row loop, leaving one 32-bit division an element (five 64-bit ones
    // before: the pass moved 1.0 TB/s of the H200's 4.8, 2026-11-27 profile).
    const int ci = int(c), part = ci / hl, in_part = ci - part * hl, hd = in_part / dh, e = in_part - hd * dh;
    const int ri = int(r), bi = ri / s, si = ri - bi * s;
    const float* src = part == 0 ? dq : (part == 1 ? dk : dv);
    return src[((int64_t(bi) * a + hd) * s + si) * dh + e];
  }
  __device__ float finish(int64_t r, int64_t c, Input v) const {
    dst16[r * 3 * hl + c] = to_bf16_bits(v);
    return v;
  }
};

// Rows a block, a thread its columns: the column's bias rounded to bf16 and widened, added in fp32,
// the sum rounded.
__global__ void narrow_rows_bias_kernel(uint16_t* y16, const float* y, const float* bias, int64_t N, int64_t out) {
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x)
    for (int64_t c = threadIdx.x; c < out; c += blockDim.x)
      y16[r * out + c] = to_bf16_bits(y[r * out + c] + from_bf16_bits(to_bf16_bits(bias[c])));
}

// db = the column sums of the [N, out] values, in two passes: partials(partial, chunks) launches the
// first (each 64-row chunk's sums into partial[chunk][out]), then the chunks by a fixed tree.
template <class Partials>
void column_sums_by(float* db, int64_t N, int64_t out, Workspace ws, cudaStream_t stream, const char* kernel,
                    Partials partials) {
  if (N <= 0 || out <= 0) return;
  if (ws.bytes < bias_backward_workspace_bytes(N, out) || !ws.data)
    throw std::runtime_error(std::string("CUDA: ") + kernel + ": workspace too small");
  const int64_t chunks = column_chunks(N);
  float* partial = static_cast<float*>(ws.data);
  partials(partial, chunks);
  check_launch(kernel);
  column_reduce_kernel<<<column_group_grid(out), kReduceWarps * 32, 0, stream>>>(db, partial, out, chunks);
  check_launch(kernel);
}
template <class Element>
void column_sums(float* db, Element element, int64_t N, int64_t out, Workspace ws, cudaStream_t stream,
                 const char* kernel) {
  column_sums_by(db, N, out, ws, stream, kernel, [&](float* partial, int64_t chunks) {
    column_partials_kernel<<<grid_for(chunks * out), kBlock, 0, stream>>>(partial, element, N, out, chunks);
  });
}

}  // namespace

void gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const bool aligned = aligned_to(pre16, 8) && aligned_to(act16, 8);
  const int64_t done = four_wide(n, aligned, [&](int64_t n4) {
    gelu_forward16_x4_kernel<<<grid_for((n4 + kGroupsInFlight - 1) / kGroupsInFlight), kBlock, 0, stream>>>(
        reinterpret_cast<uint2*>(act16),
                                                                    reinterpret_cast<const uint2*>(pre16), n4);
  });
  if (done < n)
    gelu_forward16_kernel<<<grid_for(n - done), kBlock, 0, stream>>>(act16 + done, pre16 + done, n - done);
  check_launch("gelu_forward16");
}
void narrow_rows_bias(uint16_t* y16, const float* y, const float* bias, int64_t N, int64_t out, cudaStream_t stream) {
  if (N <= 0 || out <= 0) return;
  narrow_rows_bias_kernel<<<unsigned(std::min<int64_t>(N, 65535)), kBlock, 0, stream>>>(y16, y, bias, N, out);
  check_launch("narrow_rows_bias");
}
void narrow_bias_backward(uint16_t* dy16, float* db, const float* dy, int64_t N, int64_t out, Workspace ws,
                          cudaStream_t stream) {
  column_sums(db, NarrowElement{dy, dy16, out}, N, out, ws, stream, "narrow_bias_backward");
}
void gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout16, int64_t N,
                          int64_t out, Workspace ws, cudaStream_t stream) {
  if (out % 2 == 0 && aligned_to(pre16, 4) && aligned_to(dout16, 4) && aligned_to(g16, 4)) {
    column_sums_by(db, N, out, ws, stream, "gelu_backward_narrow", [&](float* partial, int64_t chunks) {
      gelu_grad_pair_partials_kernel<<<grid_for(chunks * out / 2), kBlock, 0, stream>>>(
          partial, reinterpret_cast<const uint32_t*>(pre16), reinterpret_cast<const uint32_t*>(dout16),
          reinterpret_cast<uint32_t*>(g16), N, out, chunks);
    });
    return;
  }
  column_sums(db, GeluGradElement{pre16, dout16, g16, out}, N, out, ws, stream, "gelu_backward_narrow");
}
void merge_qkv_grads_narrow(uint16_t* dqkv16, float* db, const float* dq, const float* dk, const float* dv, int64_t b,
                            int64_t s, int64_t a, int64_t dh, Workspace ws, cudaStream_t stream) {
  if (3 * a * dh > int64_t(0x7fffffff) || b * s > int64_t(0x7fffffff))
    throw std::runtime_error("CUDA: merge_qkv_grads_narrow: a row of " + std::to_string(3 * a * dh) +
                             " columns or " + std::to_string(b * s) + " rows is past one launch");
  column_sums(db, QkvGradElement{dq, dk, dv, dqkv16, int(s), int(a), int(dh), int(a * dh)}, b * s, 3 * a * dh, ws,
              stream, "merge_qkv_grads_narrow");
}

}  // namespace lattice::cuda
