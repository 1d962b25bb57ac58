#!/usr/bin/env bash
# cuda.host_launch_limits: the host simulation refuses the launches a GPU refuses, where x86 would
# have run them (the launch fails, and the step with it):
# - more than 48 KiB of dynamic shared memory unless cudaFuncSetAttribute(MaxDynamicSharedMemorySize)
#   opted that kernel in to as many bytes: 64 KiB opted in to 64 KiB runs; not opted in, opted in to
#   56 KiB, or opted in on another kernel, each stops naming the launch;
# - a block of more threads than the kernel's __launch_bounds__: 128 threads under bounds of 128 run,
#   256 stop naming both numbers.
# The kernels are written with `<<<...>>>` and rewritten as scripts/cuda-host-common.sh rewrites src/cuda.
#   tests/host_sim/launch_limits.sh
. "$(dirname "$0")/sim_test_lib.sh"
cat >"$work/limits.cu" <<'CPP'
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
__global__ void fill_shared(float* out, int n) {
  extern __shared__ float stage[];
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) stage[i] = float(i);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = stage[n - 1];
}
__global__ void other_kernel(float* out, int) { out[0] = 0; }
__global__ void __launch_bounds__(128, 2)
    bounded(float* out) {
  out[threadIdx.x] = 2.0f;
}
// Two kernels of one name: a launch with no dynamic shared memory must still compile (no address taken).
__global__ void twin(float* out) { out[0] = 1; }
__global__ void twin(double* out) { out[0] = 1; }
int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "optin";
  const int n = 64 * 1024 / 4;
  float* out = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&out), 256 * sizeof(float)) != cudaSuccess) return 2;
  if (!std::strncmp(how, "bounds", 6)) {
    const unsigned threads = unsigned(std::atoi(how + 6));
    bounded<<<1, threads, 0, nullptr>>>(out);
    std::printf("bounded ran %u threads, out[0] = %g\n", threads, double(out[0]));
    return out[0] == 2.0f ? 0 : 3;
  }
  twin<<<1, 32, 0, nullptr>>>(out);
  int bytes = 0;
  void (*target)(float*, int) = fill_shared;
  if (!std::strcmp(how, "optin")) bytes = n * 4;
  if (!std::strcmp(how, "short")) bytes = 56 * 1024;
  if (!std::strcmp(how, "other")) bytes = n * 4, target = other_kernel;
  if (bytes && cudaFuncSetAttribute(target, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) return 2;
  fill_shared<<<1, 128, size_t(n) * 4, nullptr>>>(out, n);
  std::printf("fill_shared ran, out[0] = %g\n", double(out[0]));
  return out[0] == float(n - 1) ? 0 : 3;
}
CPP
sim_compile "$work/limits.cu" "$work/limits"
expect_runs "64 KiB opted in to 64 KiB" "$work/limits" optin
smem='past 48 KiB without cudaFuncSetAttribute.*launch of fill_shared \(limits.cu:'
expect_stops "64 KiB not opted in" "$smem" "$work/limits" none
expect_stops "64 KiB opted in to 56 KiB" "$smem" "$work/limits" short
expect_stops "64 KiB opted in on another kernel" "$smem" "$work/limits" other
expect_runs "128 threads under __launch_bounds__(128)" "$work/limits" bounds128
expect_stops "256 threads under __launch_bounds__(128)" \
  "a block of 256 threads past the kernel.s __launch_bounds__\(128\): kernel bounded \(limits.cu:" "$work/limits" bounds256
exit $status
