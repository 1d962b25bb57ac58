// The kernels the backend seam needed beyond the CPU kernels' first CUDA forms (cuda/kernels.hpp): the
// positions and the bf16 accumulate of 16-bit gradients (the shard embedding sits with the embedding,
// in elementwise.cu). The same arithmetic in the same order as the CPU's (kernels/vocab_shard.cpp,
// tensor/half.cpp).
#include "cuda/common.cuh"
#include "cuda/kernels.hpp"

namespace lattice::cuda {

using namespace detail;

namespace {

__global__ void add_positions_kernel(float* x, const float* wpe, int64_t s_local, int64_t pos0, int64_t h,
                                     int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / h, i = k % h;
    x[k] += wpe[(pos0 + n % s_local) * h + i];
  }
}

__global__ void position_grads_kernel(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0,
                                      int64_t h) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < s_local * h;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / h, c = k % h;
    float acc = dwpe[(pos0 + i) * h + c];
    for (int64_t bi = 0; bi < b; ++bi) acc += dx[(bi * s_local + i) * h + c];
    dwpe[(pos0 + i) * h + c] = acc;
  }
}

__global__ void bf16_accumulate_kernel(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    dst[k] = to_bf16_bits(from_bf16_bits(dst[k]) + src[k]);
}

}  // namespace

void add_positions(float* x, const float* wpe, int64_t b, int64_t s_local, int64_t pos0, int64_t h,
                   cudaStream_t stream) {
  const int64_t total = b * s_local * h;
  add_positions_kernel<<<grid_for(total), kBlock, 0, stream>>>(x, wpe, s_local, pos0, h, total);
  check_launch("add_positions");
}

void position_grads(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0, int64_t h,
                    cudaStream_t stream) {
  position_grads_kernel<<<grid_for(s_local * h), kBlock, 0, stream>>>(dwpe, dx, b, s_local, pos0, h);
  check_launch("position_grads");
}

void bf16_accumulate(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  bf16_accumulate_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  check_launch("bf16_accumulate");
}

}  // namespace lattice::cuda
