#!/usr/bin/env bash
# lattice_cuda_check on the host, without a GPU: src/cuda's kernels (every .cu but the cuBLASLt GEMMs)
# and the check program compiled by the host's C++ compiler against a simulated CUDA runtime
# (tests/host_sim/include: a block's threads as fibers switched at __syncthreads, __syncwarp, the
# shuffles and the warp's tensor-core operations, emulated in tests/host_sim/mma_emulated.inc), then
# run: every kernel against its CPU kernel, as on a GPU, with the same tolerances. It checks the
# kernels' text (indexing, masking, tails, alignment paths, barriers every thread reaches, warp
# operations no lane has left), not the device's arithmetic or speed: the device check does that.
# A read well past a device buffer faults (guard pages). The suite runs it (cuda.host_check).
#
#   scripts/cuda-host-check.sh [BUILD_DIR] [SEED]    BUILD_DIR: a CPU build (default build)
#   CUDA_HOST_CHECK_KEEP=DIR keeps the rewritten sources and the program there (to rerun or debug it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
seed=${2:-1234}
libs=()
for lib in kernels tensor random core; do
  [[ $lib == random && ! -f $build/liblattice_layer_$lib.a ]] && continue  # header-only so far
  if [[ ! -f $build/liblattice_layer_$lib.a ]]; then
    echo "cuda-host-check: $build/liblattice_layer_$lib.a not found: build lattice first (scripts/build.sh)" >&2
    exit 1
  fi
  libs+=("$build/liblattice_layer_$lib.a")
done
if [[ -n ${CUDA_HOST_CHECK_KEEP:-} ]]; then
  work=$CUDA_HOST_CHECK_KEEP
  rm -rf "$work/cuda" && mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/cuda"
cp "$root"/src/cuda/*.cu "$root"/src/cuda/*.cuh "$root"/src/cuda/*.hpp "$work/cuda/"
rm "$work/cuda/gemm.cu"
# A launch `kernel<<<grid, block, smem, stream>>>(args);` becomes a call of the simulation's launcher
# with the kernel call as a lambda (its overloads and conversions resolved as the compiler would), and
# `extern __shared__ T name[];` a pointer to the simulation's dynamic shared memory.
for f in "$work"/cuda/*.cu "$work"/cuda/*.cuh; do
  perl -0777 -pi -e '
    s{([A-Za-z_][\w:]*(?:<[^;{}]*?>)?)<<<([^;]*?)>>>\(([^;]*?)\);}{sim::launch(sim::Cfg{$2}, [&] { $1($3); }, "$1");}gs;
    s{extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([^;\[]+?)\s+(\w+)\[\];}{$1* $2 = sim::dynamic_shared<$1>();}g;
  ' "$f"
  if grep -q '<<<\|extern __shared__' "$f"; then
    echo "cuda-host-check: a launch or dynamic shared array in $(basename "$f") the rewrite did not take" >&2
    exit 1
  fi
done
# mma.cuh: its PTX replaced by the emulation, its fragment loads (plain C++ past word_at) kept.
{
  sed -n '1,/^namespace lattice::cuda::mma {/p' "$root/src/cuda/mma.cuh"
  echo 'using namespace detail;'
  cat "$root/tests/host_sim/mma_emulated.inc"
  sed -n '/^__device__ __forceinline__ uint32_t word_at/,$p' "$root/src/cuda/mma.cuh"
} > "$work/cuda/mma.cuh"
grep -q 'a_from_c' "$work/cuda/mma.cuh" || { echo "cuda-host-check: could not cut mma.cuh (markers moved?)" >&2; exit 1; }

sources=("$work"/cuda/*.cu)
objs=()
flags=(-std=c++17 -O2 -g -DLATTICE_CUDA_HOST_SIM -I"$root/tests/host_sim/include" -I"$work" -I"$root/src"
       -Wall -Wextra -Werror -Wno-unknown-pragmas -fopenmp)
pids=()
for src in "${sources[@]}" "$root/tests/host_sim/gemm_stub.cpp"; do
  obj="$work/$(basename "$src").o"
  objs+=("$obj")
  ${CXX:-g++} "${flags[@]}" -x c++ -c "$src" -o "$obj" &
  pids+=($!)
  if (( ${#pids[@]} >= ${JOBS:-2} )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
${CXX:-g++} -fopenmp -o "$work/lattice_cuda_check_host" "${objs[@]}" "${libs[@]}" -lpthread
"$work/lattice_cuda_check_host" "$seed"
