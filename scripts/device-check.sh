#!/usr/bin/env bash
# Issue 33's device check, for a machine with one NVIDIA GPU (H100, sm_90), nvcc, cuBLAS and CMake but
# none of Debian's packages (oneDNN, OpenMPI, SentencePiece, CLI11, nlohmann-json): docs/gpu.md.
#   scripts/device-check.sh [all|build|kernels|parity|memory|layouts|speed|table4]...   (default: all)
# Each phase runs alone or in order; every result is appended to one results file as soon as it is
# measured (so a run cut off still reports what it reached): $OUT/device-check-results.txt when OUT is
# set (the lent machine's folder that comes back), else device-check-results.txt in the repository.
# Logs go beside it. Phases not built yet say so and claim nothing. Exit status: 1 if a phase failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST=${OUT:-$ROOT}
RESULTS=$DEST/device-check-results.txt
BUILD_DIR=${DEVICE_BUILD_DIR:-$ROOT/build-device}
JOBS=$(nproc 2>/dev/null || echo 4)
status=0

record() { printf '%s\n' "$*" | tee -a "$RESULTS"; }
fail() { record "$*"; status=1; }

# The nvcc ($CUDACXX, /usr/local/cuda/bin/nvcc, else PATH) and, for nvcc 11.x, g++-11 as its host
# compiler: scripts/cuda-toolchain.sh (docs/gpu.md "Toolchains").
. "$ROOT/scripts/cuda-toolchain.sh"

header() {
  local commit gpu
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "unknown (no .git)")
  # A copied tree (the lent machine's) can hold files newer than its HEAD: say so, not just HEAD.
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || commit="$commit+uncommitted changes"
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  record "# device-check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit ${commit} gpu: ${gpu:-none seen by nvidia-smi} phases: $*"
}

phase_build() {
  local nvcc t0 log=$DEST/device-check-build.log
  nvcc=$(cuda_find_nvcc)
  if [ -z "$nvcc" ]; then fail "phase build: FAIL (no nvcc: \$CUDACXX, /usr/local/cuda/bin or PATH)"; return; fi
  cuda_host_args "$nvcc"
  [ -z "$CUDA_HOST_WARN" ] || record "phase build: $CUDA_HOST_WARN"
  local host=""
  [ ${#CUDA_HOST_ARGS[@]} -eq 0 ] || host="; nvcc's host compiler $("${CUDA_HOST_ARGS[0]#*=}" --version | head -1)"
  record "phase build: nvcc $(cuda_nvcc_version "$nvcc") ($nvcc), $(cmake --version | head -1), $(c++ --version 2>/dev/null | head -1)$host"
  t0=$(date +%s)
  # Only the layers the CUDA kernels and their parity check need: no oneDNN, MPI, ... (CMakeLists.txt).
  if timeout 600 cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" \
       "${CUDA_HOST_ARGS[@]}" -DLATTICE_CUDA=ON -DLATTICE_CUDA_KERNELS_ONLY=ON -DLATTICE_WERROR=ON -DLATTICE_ARCH=native >"$log" 2>&1 &&
     timeout 600 cmake --build "$BUILD_DIR" -j"$JOBS" --target lattice_cuda_check >>"$log" 2>&1; then
    record "phase build: ok ($(( $(date +%s) - t0 )) s; lattice_cuda_check built with -DLATTICE_CUDA=ON -DLATTICE_CUDA_KERNELS_ONLY=ON)"
  else
    tail -n 30 "$log" | sed 's/^/  build: /' | tee -a "$RESULTS"
    fail "phase build: FAIL (log: device-check-build.log)"
  fi
}

phase_kernels() {
  local bin=$BUILD_DIR/lattice_cuda_check log=$DEST/device-check-kernels.log rc
  if [ ! -x "$bin" ]; then fail "phase kernels: FAIL (lattice_cuda_check not built: run the build phase first)"; return; fi
  # One line per kernel as it is measured (kernel NAME fwd|bwd max_abs_diff=.. rel=.. tol=.. ok|FAIL).
  : >"$log"
  timeout 300 "$bin" 2>&1 | while IFS= read -r l; do
    printf '%s\n' "$l" >>"$log"
    printf '  %s\n' "$l" >>"$RESULTS"
    printf '%s\n' "$l"
  done
  rc=${PIPESTATUS[0]}
  local n_ok n_fail
  n_ok=$(grep -c ' ok$' "$log")
  n_fail=$(grep -c ' FAIL$' "$log")
  if [ "$rc" -eq 0 ]; then record "phase kernels: ok (${n_ok} comparisons, 0 FAIL)"
  elif [ "$rc" -eq 2 ]; then fail "phase kernels: FAIL (no CUDA device usable: nothing checked)"
  else fail "phase kernels: FAIL (exit ${rc}; ${n_ok} ok, ${n_fail} FAIL)"; fi
}

not_yet() { record "phase $1: not built yet (issue 33)"; }

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(all)
[ "${phases[0]}" = all ] && phases=(build kernels parity memory layouts speed table4)
header "${phases[*]}"
for p in "${phases[@]}"; do
  case "$p" in
    build) phase_build ;;
    kernels) phase_kernels ;;
    parity | memory | layouts | speed | table4) not_yet "$p" ;;
    *) fail "unknown phase '$p' (build|kernels|parity|memory|layouts|speed|table4|all)" ;;
  esac
done
record "# device-check done: $([ $status -eq 0 ] && echo ok || echo FAIL)"
exit $status
