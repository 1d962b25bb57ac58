// fp16 casts (tensor/half.hpp's fp16 format, the CPU's _Float16 rounding through cuda/fp16_bits.hpp)
// and the pieces of fp16's loss scaling (the overflow check and the unscale).
#include "cuda/common.cuh"
#include "cuda/fp16_bits.hpp"
#include "cuda/kernels.hpp"

namespace lattice::cuda {
using namespace detail;

namespace {

__global__ void to_fp16_kernel(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = fp16_from_float(src[i]);
}
__global__ void from_fp16_kernel(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = fp16_to_float(src[i]);
}
__global__ void fp16_accumulate_kernel(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = fp16_from_float(__fadd_rn(fp16_to_float(dst[i]), src[i]));
}
__global__ void nonfinite_kernel(int32_t* flag, const float* g, int64_t n) {
  bool bad = false;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(g[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}
__global__ void mul_kernel(float* g, int64_t n, float factor) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    g[i] *= factor;
}

}  // namespace

void to_fp16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  to_fp16_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  check_launch("to_fp16");
}
void from_fp16(const uint16_t* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  from_fp16_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  check_launch("from_fp16");
}
void fp16_accumulate(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  fp16_accumulate_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  check_launch("fp16_accumulate");
}
void grads_nonfinite(int32_t* flag, const float* grads, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  nonfinite_kernel<<<grid_for(n), kBlock, 0, stream>>>(flag, grads, n);
  check_launch("grads_nonfinite");
}
void unscale_grads(float* grads, int64_t n, double loss_scale, cudaStream_t stream) {
  if (n <= 0) return;
  mul_kernel<<<grid_for(n), kBlock, 0, stream>>>(grads, n, float(1.0 / loss_scale));
  check_launch("unscale_grads");
}

}  // namespace lattice::cuda
