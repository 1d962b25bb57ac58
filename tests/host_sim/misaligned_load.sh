#!/usr/bin/env bash
# cuda.host_misaligned: the host simulation stops at a misaligned vector load, as a GPU faults on one
# (x86 would load it and go on). A kernel reading a float4 at a 4-byte offset, compiled and linked as
# scripts/cuda-host-check.sh and cuda-host-trainer.sh compile src/cuda (scripts/cuda-host-common.sh's
# CUDA_HOST_SANITIZE), must die naming the misaligned address; the same kernel at offset 0 must run.
#   tests/host_sim/misaligned_load.sh
. "$(dirname "$0")/sim_test_lib.sh"
cat >"$work/misaligned.cpp" <<'CPP'
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
__global__ void sum4(const float* in, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(in + 4 * threadIdx.x);
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
int main(int argc, char** argv) {
  const int offset = argc > 1 ? std::atoi(argv[1]) : 0;  // in floats
  float *in = nullptr, *out = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&in), 68 * sizeof(float)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&out), 16 * sizeof(float)) != cudaSuccess)
    return 2;
  for (int i = 0; i < 68; ++i) in[i] = 1.0f;
  sim::launch(sim::Cfg{dim3(1), dim3(16)}, [&] { sum4(in + offset, out); }, "sum4", nullptr);
  std::printf("sum4 ran, out[0] = %g\n", double(out[0]));
  return out[0] == 4.0f ? 0 : 3;
}
CPP
sim_compile "$work/misaligned.cpp" "$work/misaligned"
expect_runs "the aligned float4 load" "$work/misaligned" 0
expect_stops "a float4 load 4 bytes off its alignment" 'misaligned address' "$work/misaligned" 1
exit $status
