#!/usr/bin/env bash
# The whole trainer with `--device cuda` served by the host simulation (no GPU, no nvcc): src/cuda's
# kernels rewritten and compiled by the host compiler against tests/host_sim/include (as
# scripts/cuda-host-check.sh does), the GEMMs the CPU's on the same memory (tests/host_sim/gemm_host.cpp),
# src/backend recompiled with LATTICE_HAVE_CUDA, and linked with a CPU build's other layers. What it
# tests is what no kernel check reaches: the backend seam's CUDA side (cuda_device.cpp: which kernel,
# which workspace, which copies), the model's calls through it and the memory accounting, by training
# with --device cuda against --device cpu (scripts/device-check.sh's parity phase runs on it:
# DEVICE_FULL_BUILD_DIR=OUT_DIR DEVICE_CHECK_DEVICE=cuda-host). Slow: a kernel's threads run one at a
# time, so small models only. Not a measurement of anything on a GPU.
#
#   scripts/cuda-host-trainer.sh [BUILD_DIR] [OUT_DIR]    BUILD_DIR: a CPU build (default build);
#   the program is OUT_DIR/lattice (default BUILD_DIR/cuda-host).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
if [[ ! -d $build ]]; then
  echo "cuda-host-trainer: $build is not a build folder: build lattice first (scripts/build.sh)" >&2
  exit 1
fi
build=$(cd "$build" && pwd)
out=${2:-$build/cuda-host}
link_txt=$build/CMakeFiles/lattice.dir/link.txt
flags_make=$build/CMakeFiles/lattice_layer_backend.dir/flags.make
for f in "$link_txt" "$flags_make" "$build/liblattice_layer_backend.a"; do
  if [[ ! -f $f ]]; then
    echo "cuda-host-trainer: $f not found: build lattice first with CMake's default Makefile generator (scripts/build.sh): the link line and flags are read from its files" >&2
    exit 1
  fi
done
. "$root/scripts/cuda-host-common.sh"
cuda_host_claim_dir "$out" cuda-host-trainer || exit $?
out=$(cd "$out" && pwd)
rm -rf "$out/cuda" "$out/obj" && mkdir -p "$out/obj/cuda" "$out/obj/backend"
cuda_host_rewrite "$root" "$out"
sim=(-I"$root/tests/host_sim/include" -I"$out" -I"$root/src")
cuda_host_compile "$out/obj/cuda" "${CXX:-g++}" -std=c++17 -O2 -g "${CUDA_HOST_SANITIZE[@]}" "${sim[@]}" -Wall \
  -Wextra -Werror -Wno-unknown-pragmas -fopenmp -x c++ -- $(ls "$out"/cuda/*.cu | grep -v '/check_main\.cu$')
cuda_host_compile "$out/obj/cuda" "${CXX:-g++}" -std=c++17 -O2 -g "${sim[@]}" -Wall -Wextra -Werror -fopenmp \
  -- "$root/tests/host_sim/gemm_host.cpp"
# src/backend as the CPU build compiles it, with the simulation's CUDA headers and LATTICE_HAVE_CUDA.
read -r -a cxx_flags <<<"$(sed -n 's/^CXX_FLAGS = //p' "$flags_make")"
read -r -a cxx_includes <<<"$(sed -n 's/^CXX_INCLUDES = //p' "$flags_make")"
cuda_host_compile "$out/obj/backend" "${CXX:-g++}" "${cxx_flags[@]}" -DLATTICE_HAVE_CUDA "${sim[@]}" \
  "${cxx_includes[@]}" -- "$root"/src/backend/*.cpp
rm -f "$out/libsim_backend.a" "$out/libsim_cuda.a"
ar qc "$out/libsim_backend.a" "$out"/obj/backend/*.o
ar qc "$out/libsim_cuda.a" "$out"/obj/cuda/*.o
# The CPU build's link line with the backend swapped for these two.
read -r -a link <<<"$(cat "$link_txt")"
cmd=()
for w in "${link[@]}"; do
  case $w in
    liblattice_layer_backend.a) cmd+=("$out/libsim_backend.a" "$out/libsim_cuda.a") ;;
    -o) cmd+=("${CUDA_HOST_SANITIZE[@]}" -o) ;;
    lattice) cmd+=("$out/lattice") ;;
    *.a | *.o) [[ $w == /* ]] && cmd+=("$w") || cmd+=("$build/$w") ;;
    *) cmd+=("$w") ;;
  esac
done
"${cmd[@]}"
echo "cuda-host-trainer: $out/lattice (--device cuda on the host simulation)"
