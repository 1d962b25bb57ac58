#!/usr/bin/env bash
# cuda.host_schedule: the host simulation's reverse schedule (LATTICE_HOST_SIM_SCHEDULE=reverse) shows
# a race its fixed order hides. Each block's threads run in turn between their waits, so a thread
# reading what a lower thread wrote with no barrier between reads it written when they run first to
# last, and before it is written when they run last to first; the same for a block reading what a
# lower block of the launch wrote. Three kernels, each run in both orders: a neighbour's value read
# after __syncthreads (the same output both ways), read with the barrier left out, and read from the
# block before (each a different output one way, which is what scripts/cuda-host-check.sh and
# tests/host_sim/trainer_parity.sh compare). An unknown order is refused in one line.
#   tests/host_sim/schedule_race.sh
. "$(dirname "$0")/sim_test_lib.sh"
cat >"$work/race.cu" <<'CPP'
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
constexpr int kThreads = 64, kBlocks = 4;
template <bool Barrier>
__global__ void shift_left(const int* in, int* out) {
  __shared__ int stage[kThreads];
  const int t = int(threadIdx.x);
  stage[t] = in[blockIdx.x * kThreads + t];
  if (Barrier) __syncthreads();
  out[blockIdx.x * kThreads + t] = t > 0 ? stage[t - 1] : -1;
}
// Each block reads the last value the block before it wrote: defined only if blocks ran in order.
__global__ void chain(int* out) {
  const int b = int(blockIdx.x);
  if (threadIdx.x == 0) out[b] = b > 0 ? out[b - 1] + 1 : 0;
}
int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "barrier";
  int *in = nullptr, *out = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&in), kBlocks * kThreads * sizeof(int)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&out), kBlocks * kThreads * sizeof(int)) != cudaSuccess)
    return 2;
  for (int i = 0; i < kBlocks * kThreads; ++i) in[i] = 1000 + i, out[i] = 7;
  if (!std::strcmp(which, "barrier")) shift_left<true><<<kBlocks, kThreads, 0, nullptr>>>(in, out);
  if (!std::strcmp(which, "no_barrier")) shift_left<false><<<kBlocks, kThreads, 0, nullptr>>>(in, out);
  if (!std::strcmp(which, "chain")) chain<<<kBlocks, 32, 0, nullptr>>>(out);
  long sum = 0;
  for (int i = 0; i < kBlocks * kThreads; ++i) sum = sum * 31 + out[i];
  std::printf("%ld\n", sum);
  return 0;
}
CPP
sim_compile "$work/race.cu" "$work/race"
for kernel in barrier no_barrier chain; do
  forward=$(LATTICE_HOST_SIM_SCHEDULE=forward "$work/race" $kernel)
  reverse=$(LATTICE_HOST_SIM_SCHEDULE=reverse "$work/race" $kernel)
  default=$("$work/race" $kernel)
  [[ $default == "$forward" ]] || { echo "FAIL ($kernel): the default order is not first to last"; status=1; }
  if [[ $kernel == barrier ]]; then
    if [[ $forward == "$reverse" ]]; then echo "ok ($kernel): the same output in both orders"
    else echo "FAIL ($kernel): a kernel with its barrier gives two outputs ($forward, $reverse)"; status=1; fi
  elif [[ $forward != "$reverse" ]]; then
    echo "ok ($kernel): the race shows: $forward first to last, $reverse last to first"
  else
    echo "FAIL ($kernel): the race gives the same output in both orders"
    status=1
  fi
done
LATTICE_HOST_SIM_SCHEDULE=sideways expect_stops "an unknown schedule" '^cuda host sim: LATTICE_HOST_SIM_SCHEDULE is forward or reverse, not sideways$' \
  "$work/race" barrier
exit $status
