#!/usr/bin/env bash
# lattice_cuda_check on the host, without a GPU: src/cuda's kernels, its GEMMs (cuda/gemm.cu, over
# a simulated cuBLASLt: tests/host_sim/cublaslt_sim.cpp) and the check program compiled by the host's C++ compiler against a simulated CUDA runtime
# (tests/host_sim/include: a block's threads as fibers switched at __syncthreads, __syncwarp, the
# shuffles and the warp's tensor-core operations, emulated in tests/host_sim/mma_emulated.inc), then
# run: every kernel against its CPU kernel, as on a GPU, with the same tolerances. It checks the
# kernels' text (indexing, masking, tails, alignment paths, barriers every thread reaches, warp
# operations no lane has left), not the device's arithmetic or speed: the device check does that.
# A read well past a device buffer faults (guard pages), a load or store off its type's alignment
# stops it (UBSan: scripts/cuda-host-common.sh), and the tensor-core attention's cp.async
# tiles are checked for races (tests/host_sim/mma_emulated.inc). The suite runs it (cuda.host_check).
#
#   scripts/cuda-host-check.sh [BUILD_DIR [SEED...]]    BUILD_DIR: a CPU build (default build); seeds
#   1234 (the device check's) and 1 by default, the second, fourth, ... in the reverse schedule
#   CUDA_HOST_CHECK_KEEP=DIR keeps the rewritten sources and the program there (to rerun or debug it).
#   CUDA_HOST_CHECK_PROGRAM=P runs P, built already (the build's lattice_cuda_check_host, which the
#   suite runs: tests/host_sim/host_sim.cmake), instead of building it here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
seeds=("$@")
[[ ${#seeds[@]} -gt 0 ]] || seeds=(1234 1)  # the device check's seed, and one that once found a wrong bound
prebuilt=${CUDA_HOST_CHECK_PROGRAM:-}
if [[ -n $prebuilt && ! -x $prebuilt ]]; then
  echo "cuda-host-check: CUDA_HOST_CHECK_PROGRAM=$prebuilt is not a program: build it (cmake --build $build --target lattice_cuda_check_host)" >&2
  exit 1
fi
libs=()
for lib in kernels tensor random core; do
  [[ -n $prebuilt ]] && break
  [[ $lib == random && ! -f $build/liblattice_layer_$lib.a ]] && continue  # header-only so far
  if [[ ! -f $build/liblattice_layer_$lib.a ]]; then
    echo "cuda-host-check: $build/liblattice_layer_$lib.a not found: build lattice first (scripts/build.sh)" >&2
    exit 1
  fi
  libs+=("$build/liblattice_layer_$lib.a")
done
. "$root/scripts/cuda-host-common.sh"
if [[ -n ${CUDA_HOST_CHECK_KEEP:-} ]]; then
  work=$CUDA_HOST_CHECK_KEEP
  cuda_host_claim_dir "$work" cuda-host-check || exit $?
  rm -rf "$work/cuda"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
program=$work/lattice_cuda_check_host
if [[ -n $prebuilt ]]; then
  program=$prebuilt
else
  cuda_host_rewrite "$root" "$work"
  flags=(-std=c++17 -O2 -g "${CUDA_HOST_SANITIZE[@]}" -DLATTICE_CUDA_HOST_SIM -I"$root/tests/host_sim/include" -I"$work" -I"$root/src"
         -Wall -Wextra -Werror -Wno-unknown-pragmas -fopenmp)
  mkdir -p "$work/obj"
  rm -f "$work"/obj/*.o
  cuda_host_compile "$work/obj" "${CXX:-g++}" "${flags[@]}" -x c++ -- "$work"/cuda/*.cu
  # cuda/gemm.cu itself, against the simulation's cuBLASLt (tests/host_sim/cublaslt_sim.cpp): its plans,
  # epilogues and tuner run here; NVIDIA's library runs only on a GPU.
  cuda_host_compile "$work/obj" "${CXX:-g++}" "${flags[@]}" -- "$root/tests/host_sim/cublaslt_sim.cpp"
  cuda_host_compile "$work/obj" "${CXX:-g++}" "${flags[@]}" -x c++ -- "$root/src/cuda/gemm.cu"
  ${CXX:-g++} "${CUDA_HOST_SANITIZE[@]}" -fopenmp -o "$work/lattice_cuda_check_host" "$work"/obj/*.o "${libs[@]}" -lpthread
fi
# The seeds run side by side, one thread each (the simulation's fibers take turns on one; the CPU's
# reference kernels then run on one OpenMP thread), their outputs printed in order after; stopped,
# the script stops them too. Every second seed runs its blocks and threads last first
# (LATTICE_HOST_SIM_SCHEDULE=reverse): a kernel that reads what another thread or block writes with no
# barrier between reads it in one of the two orders before it is written, where the comparison sees it.
pids=()
if [[ -n ${CUDA_HOST_CHECK_KEEP:-} ]]; then
  trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
else
  trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
fi
for i in "${!seeds[@]}"; do
  order=forward
  (( i % 2 == 0 )) || order=reverse
  echo "cuda-host-check: seed ${seeds[$i]}, blocks and threads run $order" >"$work/seed$i.out"
  LATTICE_HOST_SIM_SCHEDULE=$order OMP_NUM_THREADS=1 "$program" "${seeds[$i]}" >>"$work/seed$i.out" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!seeds[@]}"; do
  wait "${pids[$i]}" || status=1
  cat "$work/seed$i.out"
done
exit $status
