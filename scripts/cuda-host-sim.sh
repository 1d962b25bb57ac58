#!/usr/bin/env bash
# Runs the tensor-core fused attention's kernel text (src/cuda/flash_attention_tc.cu) on the host,
# without a GPU: one std::thread per CUDA thread, a block barrier for __syncthreads and the shuffles,
# mma.sync and ldmatrix emulated from the PTX ISA's fragment layouts (tests/host_sim/flash_tc_sim.cpp).
# Compares with the CPU's fused attention at the device check's shapes (2^-7), the bf16-in kernels
# with the fp32-in ones bit for bit, and the dropout masks exactly; checks the operand tiles' shared
# memory for races between cp.async copies and reads (by barrier phase: tests/host_sim). It checks
# the kernels' indexing, masking, dropout draw and fragment bookkeeping, not the device:
# lattice_cuda_check's "mma fragments" lines check the emulated layouts on a GPU. The suite runs it
# (cuda.host_sim).
#
#   scripts/cuda-host-sim.sh [BUILD_DIR] [CASE]    BUILD_DIR: a CPU build (default build), CASE: 0-7
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
case_arg=${2:-}
for lib in kernels tensor core; do
  if [[ ! -f $build/liblattice_layer_$lib.a ]]; then
    echo "cuda-host-sim: $build/liblattice_layer_$lib.a not found: build lattice first (scripts/build.sh)" >&2
    exit 1
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$root/src/cuda
# The kernel text, cut from the sources at markers (the sim supplies what the device headers would).
sed -n '/^struct FlashArgs {/,/^}  \/\/ namespace lattice::cuda::flash/p' "$src/flash_common.cuh" | sed '$d' |
  sed '/^template <class Kernel>/,$d' > "$work/common.inc"
# (word_at is the sim's own: it notes each fragment read for the race check.)
sed -n '/^__device__ __forceinline__ uint32_t word_at/,/^}  \/\/ namespace lattice::cuda::mma/p' "$src/mma.cuh" |
  sed '$d' | sed '/uint32_t word_at(/d' > "$work/mma.inc"
sed -n '/^constexpr int kT = 64; /,/^}  \/\/ namespace$/p' "$src/flash_attention_tc.cu" | sed '$d' > "$work/tc.inc"
for f in common mma tc; do
  [[ -s $work/$f.inc ]] || { echo "cuda-host-sim: could not cut $f.inc from the sources (markers moved?)" >&2; exit 1; }
done
${CXX:-g++} -std=c++20 -O1 -I"$root/src" -I"$work" -o "$work/sim" "$root/tests/host_sim/flash_tc_sim.cpp" \
  "$build/liblattice_layer_kernels.a" "$build/liblattice_layer_tensor.a" "$build/liblattice_layer_core.a" \
  -lpthread -fopenmp
"$work/sim" $case_arg
