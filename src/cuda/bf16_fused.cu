// The bf16 passes' element-wise and column-sum kernels (cuda/bf16_fused.hpp); the row kernels'
// (LayerNorm, softmax) and the head layouts' bf16 forms are beside their fp32 forms, in cuda/rows.cu
// and cuda/heads.cu. Each reads its fp32 inputs once and writes only the narrowed results: the staged
// sequence they replace wrote and re-read an fp32 copy per step.
#include "cuda/bf16_fused.hpp"

#include <algorithm>
#include <type_traits>

#include "cuda/common.cuh"

namespace lattice::cuda {
using namespace detail;

namespace {

__global__ void gelu_forward16_kernel(uint16_t* act16, const uint16_t* pre16, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    act16[i] = to_bf16_bits(gelu_value(from_bf16_bits(pre16[i])));
}
// The same values four elements a group, where the pointers allow it (both 8-byte aligned): one
// 8-byte load and store in place of four 2-byte ones, kGroupsInFlight groups a thread loaded before
// any is stored (grid_stride_in_flight).
constexpr int kGroupsInFlight = 4;
__global__ void gelu_forward16_x4_kernel(uint2* act16, const uint2* pre16, int64_t n4) {
  grid_stride_in_flight<kGroupsInFlight>(
      n4, [&](int64_t i) { return pre16[i]; },
      [&](int64_t i, uint2 p) {
        const float2 a = bf16_pair_widened(p.x), b = bf16_pair_widened(p.y);
        act16[i] = make_uint2(bf16_pair(gelu_value(a.x), gelu_value(a.y)), bf16_pair(gelu_value(b.x), gelu_value(b.y)));
      });
}

// Column-sum elements (cuda/common.cuh's column_partials_kernel) that also store their value narrowed,
// W columns an element: 1, or 2 (out even, the pointers aligned for a pair: both columns' inputs in one
// load apiece, the bf16 pairs as 32-bit words), the same value a column either way.
template <int W>
using Bf16Columns = std::conditional_t<W == 2, uint32_t, uint16_t>;
template <int W>
__device__ __forceinline__ float bf16_column(Bf16Columns<W> bits, int w) {
  return from_bf16_bits(uint16_t(W == 2 ? (w == 0 ? bits & 0xffffu : bits >> 16) : bits));
}
template <int W>
struct NarrowColumns {  // dy itself
  using Input = std::conditional_t<W == 2, float2, float>;
  const Input* dy;
  Bf16Columns<W>* dst16;
  int64_t groups;  // out / W
  __device__ Input load(int64_t r, int64_t c) const { return dy[r * groups + c]; }
  __device__ Input finish(int64_t r, int64_t c, Input v) const {
    if constexpr (W == 2) dst16[r * groups + c] = bf16_pair(v.x, v.y);
    else dst16[r * groups + c] = to_bf16_bits(v);
    return v;
  }
};
template <int W>
struct GeluGradColumns {  // dout · gelu'(pre), both read from bf16
  const Bf16Columns<W>* pre16;
  const Bf16Columns<W>* dout16;
  Bf16Columns<W>* dst16;
  int64_t groups;  // out / W
  struct Input {
    Bf16Columns<W> dout16, pre16;
  };
  __device__ Input load(int64_t r, int64_t c) const { return {dout16[r * groups + c], pre16[r * groups + c]}; }
  __device__ float value(Input in, int w) const {
    return bf16_column<W>(in.dout16, w) * gelu_grad(bf16_column<W>(in.pre16, w));
  }
  __device__ auto finish(int64_t r, int64_t c, Input in) const {
    if constexpr (W == 2) {
      const float2 v = make_float2(value(in, 0), value(in, 1));
      dst16[r * groups + c] = bf16_pair(v.x, v.y);
      return v;
    } else {
      const float v = value(in, 0);
      dst16[r * groups + c] = to_bf16_bits(v);
      return v;
    }
  }
};
template <int W>
struct Bf16SumColumns {  // the bf16 values themselves, widened; nothing stored
  const Bf16Columns<W>* src16;
  int64_t groups;  // out / W
  using Input = Bf16Columns<W>;
  __device__ Input load(int64_t r, int64_t c) const { return src16[r * groups + c]; }
  __device__ auto finish(int64_t, int64_t, Input in) const {
    if constexpr (W == 2) return make_float2(bf16_column<W>(in, 0), bf16_column<W>(in, 1));
    else return bf16_column<W>(in, 0);
  }
};
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

template <class Element>
void column_sums(float* db, Element element, int64_t N, int64_t out, Workspace ws, cudaStream_t stream,
                 const char* kernel) {
  if (N <= 0 || out <= 0) return;
  if (ws.bytes < bias_backward_workspace_bytes(N, out) || !ws.data)
    throw std::runtime_error(std::string("CUDA: ") + kernel + ": workspace too small");
  const int64_t chunks = column_chunks(N);
  float* partial = static_cast<float*>(ws.data);
  column_partials_kernel<<<grid_for(column_partials_items<Element>(chunks, out)), kBlock, 0, stream>>>(
      partial, element, N, out, chunks);
  check_launch(kernel);
  column_reduce_kernel<<<column_group_grid(out), kReduceWarps * 32, 0, stream>>>(db, partial, out, chunks);
  check_launch(kernel);
}

}  // namespace

void gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const bool aligned = aligned_to(pre16, 8) && aligned_to(act16, 8);
  const int64_t done = four_wide(n, aligned, [&](int64_t n4) {
    gelu_forward16_x4_kernel<<<grid_in_flight(n4, kGroupsInFlight), kBlock, 0, stream>>>(
        reinterpret_cast<uint2*>(act16), reinterpret_cast<const uint2*>(pre16), n4);
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
  if (out % 2 == 0 && aligned_to(dy, 8) && aligned_to(dy16, 4))
    column_sums(db, NarrowColumns<2>{reinterpret_cast<const float2*>(dy), reinterpret_cast<uint32_t*>(dy16), out / 2},
                N, out, ws, stream, "narrow_bias_backward");
  else
    column_sums(db, NarrowColumns<1>{dy, dy16, out}, N, out, ws, stream, "narrow_bias_backward");
}
void gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout16, int64_t N,
                          int64_t out, Workspace ws, cudaStream_t stream) {
  if (out % 2 == 0 && aligned_to(pre16, 4) && aligned_to(dout16, 4) && aligned_to(g16, 4))
    column_sums(db,
                GeluGradColumns<2>{reinterpret_cast<const uint32_t*>(pre16), reinterpret_cast<const uint32_t*>(dout16),
                                   reinterpret_cast<uint32_t*>(g16), out / 2},
                N, out, ws, stream, "gelu_backward_narrow");
  else
    column_sums(db, GeluGradColumns<1>{pre16, dout16, g16, out}, N, out, ws, stream, "gelu_backward_narrow");
}
void bias_backward_bf16(float* db, const uint16_t* g16, int64_t N, int64_t out, Workspace ws, cudaStream_t stream) {
  if (out % 2 == 0 && aligned_to(g16, 4))
    column_sums(db, Bf16SumColumns<2>{reinterpret_cast<const uint32_t*>(g16), out / 2}, N, out, ws, stream,
                "bias_backward_bf16");
  else
    column_sums(db, Bf16SumColumns<1>{g16, out}, N, out, ws, stream, "bias_backward_bf16");
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
