#!/usr/bin/env bash
# Issue 33's device check, for a machine with one NVIDIA GPU (H100, sm_90), nvcc, cuBLAS and CMake but
# none of Debian's packages (oneDNN, OpenMPI, SentencePiece, CLI11, nlohmann-json): docs/gpu.md.
#   scripts/device-check.sh [all|build|kernels|parity|memory|layouts|speed|table4|profile]...   (default: all)
# Each phase runs alone or in order; every result is appended to one results file as soon as it is
# measured (so a run cut off still reports what it reached): $OUT/device-check-results.txt when OUT is
# set (the lent machine's folder that comes back), else device-check-results.txt in the repository.
# Logs go beside it. Phases not built yet say so and claim nothing. Exit status: 1 if a phase failed.
# The whole trainer (phases parity, memory, speed) builds against Debian's packages, which the GPU
# machine lacks: run scripts/device-bundle.sh here first and carry .device-debs (docs/gpu.md).
# DEVICE_PREBUILT=DIR: the two programs were built here by scripts/device-prebuild.sh (carry DIR too);
# the build phase then only unpacks the libraries and checks that both programs start (the builds took
# 290 of a lease's 900 s on the H200).
# Knobs for a short lease: DEVICE_CHECK_KERNELS_TIMEOUT (s, default 300), DEVICE_CHECK_SPEED_PEERS
# (default "eager:manual eager:sdpa compile:manual"), DEVICE_CHECK_SPEED_ROUNDS (default 2); and
# DEVICE_CHECK_PEAK_TFLOPS, the card's dense bf16 peak for the MFU lines where its name is not known.
# The profile phase (not in all): Nsight Compute over one launch of each timed call of the kernels
# that bound a GPT-2 step (DEVICE_CHECK_PROFILE_KERNELS, a regex of kernel names; _GROUPS, which of
# lattice_cuda_check's timing groups run; _TIMEOUT, s): the report in device-check-ncu.txt, a summary
# a kernel in the results (scripts/ncu-summary.py).
# One script past the usual length on purpose: the issue asks for one prepared script that anyone
# with a GPU reruns as it is, its phases sharing the results file, the build and the timeouts.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST=${OUT:-$ROOT}
mkdir -p "$DEST"
RESULTS=$DEST/device-check-results.txt
PREBUILT=${DEVICE_PREBUILT:+$(cd "$DEVICE_PREBUILT" 2>/dev/null && pwd)}
[ -z "${DEVICE_PREBUILT:-}" ] || [ -n "$PREBUILT" ] || { echo "device-check: DEVICE_PREBUILT=$DEVICE_PREBUILT is not a folder" >&2; exit 2; }
[[ -z ${DEVICE_CHECK_PEAK_TFLOPS:-} || $DEVICE_CHECK_PEAK_TFLOPS =~ ^[1-9][0-9]{0,4}(\.[0-9]+)?$ ]] ||
  { echo "device-check: DEVICE_CHECK_PEAK_TFLOPS=$DEVICE_CHECK_PEAK_TFLOPS is not a peak in TFLOP/s (1 to 99999)" >&2; exit 2; }
BUILD_DIR=${DEVICE_BUILD_DIR:-${PREBUILT:-$ROOT/build-device}}
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
  # The lent machine's copy can carry an older .git than its files: a digest of the sources says
  # which tree ran (the same find | sort | cat | sha256sum on a checkout gives the same digest).
  commit="$commit, sources $(cd "$ROOT" && find src scripts CMakeLists.txt -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-12)"
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  local note=${DEVICE_CHECK_DEVICE:+ (rehearsal: --device $DEVICE_CHECK_DEVICE for the GPU runs)}
  # --device cuda with no GPU seen: the host simulation's trainer (scripts/cuda-host-trainer.sh).
  [ "${DEVICE_CHECK_DEVICE:-}" = cuda ] && [ -z "$gpu" ] &&
    note=" (rehearsal: --device cuda on the host simulation, scripts/cuda-host-trainer.sh: no GPU, not a GPU result)"
  record "# device-check $(date -u +%Y-%m-%dT%H:%M:%SZ) commit ${commit} gpu: ${gpu:-none seen by nvidia-smi} phases: $*${note}"
}

phase_build() {
  local nvcc t0 log=$DEST/device-check-build.log
  if [ -n "$PREBUILT" ]; then phase_build_prebuilt; return; fi
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
  # A full build's check links oneDNN: the unpacked libraries where there are some (prebuilt).
  [ ! -d "$ARCH_LIB" ] || runtime_env
  timeout "${DEVICE_CHECK_KERNELS_TIMEOUT:-300}" "$bin" 2>&1 | while IFS= read -r l; do
    printf '%s\n' "$l" >>"$log"
    printf '  %s\n' "$l" >>"$RESULTS"
    printf '%s\n' "$l"
  done
  rc=${PIPESTATUS[0]}
  local n_ok n_fail
  n_ok=$(grep -c '^kernel .* ok$' "$log")
  n_fail=$(grep -c '^kernel .* FAIL$' "$log")  # not the summary line "lattice_cuda_check: 0 FAIL"
  # Forms not yet measured on a GPU that the later phases train with: where their own lines fail, or
  # the check stopped in their section (a fault, a hang cut by the timeout, an exception: the last
  # "section" line says where), the later phases run without them and say so, so that one form that
  # fails does not spend the lease's other phases.
  local stopped_in=""
  if [ "$rc" -ne 0 ] && { [ "$rc" -gt 3 ] || grep -q '^lattice_cuda_check: \(timing \)\?error:' "$log"; }; then
    stopped_in=$(grep '^lattice_cuda_check: section ' "$log" | tail -n 1 | cut -d' ' -f3)
  fi
  if grep -q '^kernel \(gemm tuner\|bits_fingerprint\).* FAIL$' "$log" ||
     [[ $stopped_in == gemm_tuner || $stopped_in == bits_fingerprint || $stopped_in == timing_gemm ]]; then
    export DEVICE_CHECK_GEMM_TUNE=0
    record "  fallback: the GEMM tuner's lines failed (or the check stopped in them): the later phases train with LATTICE_CUDA_GEMM_TUNE=0"
  fi
  if grep -q '^kernel gemm bf16 \(GELU_AUX_BIAS\|DGELU\).* FAIL$' "$log" || [[ $stopped_in == gemm_epilogues ]]; then
    export DEVICE_CHECK_GEMM_EPILOGUES=0
    record "  fallback: the GEMM epilogues' lines failed (or the check stopped in them): the later phases train with LATTICE_CUDA_GEMM_EPILOGUES=0"
  fi
  if grep -q '^kernel .*\(96 registers\|dQ in 128 registers\).* FAIL$' "$log"; then
    export DEVICE_CHECK_ATTENTION_DENSE=0
    record "  fallback: the attention's dense forms' lines failed: the later phases train with LATTICE_CUDA_ATTENTION_DENSE=0"
  fi
  [ -z "$stopped_in" ] || record "  the check stopped in its section '$stopped_in' (exit $rc)"
  if [ "$rc" -eq 0 ]; then record "phase kernels: ok (${n_ok} comparisons, 0 FAIL)"
  elif [ "$rc" -eq 3 ]; then fail "phase kernels: FAIL (every comparison passed, ${n_ok}; a timing threw)"
  elif [ "$rc" -eq 2 ]; then fail "phase kernels: FAIL (no CUDA device usable: nothing checked)"
  else fail "phase kernels: FAIL (exit ${rc}; ${n_ok} ok, ${n_fail} FAIL)"; fi
}

phase_profile() {
  local bin=$BUILD_DIR/lattice_cuda_check log=$DEST/device-check-ncu.txt ncu rc
  if [ ! -x "$bin" ]; then fail "phase profile: FAIL (lattice_cuda_check not built: run the build phase first)"; return; fi
  # What the compiler emitted for the attention kernels this binary runs (a static count: registers
  # and the main loop's instructions by kind, scripts/sass-census.py), where this machine has a
  # cuobjdump that reads it.
  local cuobjdump
  cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
  if [ -n "$cuobjdump" ]; then
    CUOBJDUMP=$cuobjdump "$PY" "$ROOT/scripts/sass-census.py" "$bin" 2>&1 | while IFS= read -r l; do record "  $l"; done
  else record "  census: skipped (no cuobjdump on this machine)"; fi
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -z "$ncu" ]; then record "phase profile: done without the stall breakdown (no ncu on this machine)"; return; fi
  [ ! -d "$ARCH_LIB" ] || runtime_env
  local kernels=${DEVICE_CHECK_PROFILE_KERNELS:-tc_forward_kernel|tc_dq_kernel|tc_dkdv_kernel|ce_whole_forward_kernel|ce_whole_forward_bf16_kernel|ce_backward_from_logits_kernel|layernorm_backward_fused_kernel|flash_rowdot_kernel|column_reduce_kernel|layernorm_param_reduce_kernel|layernorm_forward_rows_kernel|gelu_forward16_x4_kernel|column_partials_kernel|split_heads16_x8_kernel}
  local groups=${DEVICE_CHECK_PROFILE_GROUPS:-ce,passes,tc}
  # The warp-stall breakdown (cycles a warp spends stalled for each reason, per issued instruction):
  # only the reasons this ncu knows (asked first: an unknown metric name would stop the whole run).
  local stalls extra=()
  stalls=$("$ncu" --query-metrics 2>/dev/null | awk '{print $1}' |
    grep -E '^smsp__average_warps_issue_stalled_(barrier|long_scoreboard|short_scoreboard|mio_throttle|math_pipe_throttle|wait|not_selected|lg_throttle|dispatch_stall|no_instruction|branch_resolving|tex_throttle)_per_issue_active$' |
    sed 's/$/.ratio/' | paste -sd, -)
  [ -z "$stalls" ] || extra=(--metrics "$stalls")
  record "phase profile: $("$ncu" --version 2>/dev/null | tail -1), --clock-control none (the card's clocks as found), one launch of each of lattice_cuda_check's timed calls ($groups) of: $kernels; stall reasons: $([ -n "$stalls" ] && echo "$stalls" | tr ',' '\n' | wc -l || echo none found)"
  LATTICE_CHECK_PROFILE=$groups timeout "${DEVICE_CHECK_PROFILE_TIMEOUT:-240}" "$ncu" --clock-control none \
    --kernel-name "regex:^($kernels)\$" --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section SchedulerStats --section WarpStateStats ${extra[@]+"${extra[@]}"} "$bin" >"$log" 2>&1
  rc=$?
  "$PY" "$ROOT/scripts/ncu-summary.py" "$log" | while IFS= read -r l; do record "  $l"; done
  if [ "$rc" -eq 0 ]; then record "phase profile: done (report: device-check-ncu.txt)"
  else fail "phase profile: FAIL (exit $rc; $(grep -m1 -i 'error' "$log" | cut -c1-160); report: device-check-ncu.txt)"; fi
}

# ---- the whole trainer, against Debian's packages unpacked into a prefix (scripts/device-bundle.sh) ----
DEBS=${DEVICE_DEBS:-$ROOT/.device-debs}  # DEVICE_DEBS: elsewhere (tests/cli/device_check_script.sh)
DEPS=${DEVICE_DEPS:-/tmp/lattice-deps}
FULL_DIR=${DEVICE_FULL_BUILD_DIR:-${PREBUILT:-$ROOT/build-device-full}}
LATTICE_BIN=$FULL_DIR/lattice
ARCH_LIB=$DEPS/usr/lib/x86_64-linux-gnu
WORK=${DEVICE_WORK:-/tmp/device-check-work}
runtime_env() {  # the unpacked libraries at run time; OpenMPI and PMIx find their plugins there too
  # Last, the machine's CUDA 13: a program built elsewhere (prebuilt) names that machine's CUDA folder.
  export LD_LIBRARY_PATH="$ARCH_LIB:$ARCH_LIB/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:${CUDA_HOME:-/usr/local/cuda}/lib64"
  export OPAL_PREFIX=$DEPS/usr PMIX_INSTALL_PREFIX=$ARCH_LIB/pmix2
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}
# The device the GPU runs use: cuda; DEVICE_CHECK_DEVICE=cpu-guarded rehearses the script on a machine
# without a GPU (the CPU's kernels over guarded device memory: every comparison must then pass exactly),
# and DEVICE_CHECK_DEVICE=cuda with DEVICE_FULL_BUILD_DIR=scripts/cuda-host-trainer.sh's folder runs
# the CUDA seam and kernels on the host simulation (slow: the parity, memory and layouts phases take
# about 25 minutes on 2 cores, small table4 shapes a minute).
GPU=${DEVICE_CHECK_DEVICE:-cuda}
MPIRUN=$DEPS/usr/bin/orterun  # Debian's mpirun is an alternatives link to it, which dpkg-deb -x does not make
unpack_debs() {
  mkdir -p "$DEPS"
  local f
  for f in "$DEBS"/*.deb; do
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$f" "$DEPS" || return 1
    else (cd "$(mktemp -d)" && ar x "$f" && tar -xf data.tar.* -C "$DEPS") || return 1
    fi
  done
}
phase_build_full() {
  local log=$DEST/device-check-build-full.log t0
  if ! ls "$DEBS"/*.deb >/dev/null 2>&1; then
    fail "phase build: FAIL (the whole trainer: no .device-debs/*.deb; run scripts/device-bundle.sh on a Debian machine and carry .device-debs)"
    return
  fi
  t0=$(date +%s)
  unpack_debs >"$log" 2>&1 || { fail "phase build: FAIL (unpacking .device-debs into $DEPS; log: device-check-build-full.log)"; return; }
  runtime_env
  # Every library named, so nothing of the system's (or its absence) is picked up: MPI without its
  # compiler wrapper, oneDNN, SentencePiece by file, CLI11 and nlohmann-json by their CMake packages.
  # Warnings are counted, not fatal, here: the GPU machine's g++ (13) is not the one the project is kept
  # warning-free with (Debian 12's g++ 12, where -DLATTICE_WERROR=ON builds it), and a new warning must not
  # cost the lent minutes. CMAKE_POLICY_VERSION_MINIMUM: the GPU machine has CMake 4, which refuses package files that ask for
  # policies older than 3.5 (ignored by CMake 3).
  if timeout 900 cmake -S "$ROOT" -B "$FULL_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$(cuda_find_nvcc)" \
       "${CUDA_HOST_ARGS[@]}" -DLATTICE_CUDA=ON -DLATTICE_WERROR=OFF -DLATTICE_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$DEPS/usr" \
       -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
       -DMPI_CXX_SKIP_MPICXX=ON -DMPI_CXX_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$ARCH_LIB/openmpi/lib/libmpi.so" \
       -DMPI_CXX_HEADER_DIR="$ARCH_LIB/openmpi/include" \
       -DDNNL_LIBRARY="$ARCH_LIB/libdnnl.so" -DDNNL_INCLUDE_DIR="$DEPS/usr/include" \
       -DSENTENCEPIECE_INCLUDE_DIR="$DEPS/usr/include" -DSENTENCEPIECE_LIBRARY="$ARCH_LIB/libsentencepiece.so" \
       -DSENTENCEPIECE_TRAIN_LIBRARY="$ARCH_LIB/libsentencepiece_train.so" \
       -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$ARCH_LIB:$ARCH_LIB/openmpi/lib" >>"$log" 2>&1 &&
     timeout 900 cmake --build "$FULL_DIR" -j"$JOBS" --target lattice >>"$log" 2>&1 &&
     "$LATTICE_BIN" --version >>"$log" 2>&1; then
    record "phase build: ok ($(( $(date +%s) - t0 )) s; the whole trainer, $FULL_DIR/lattice, -DLATTICE_CUDA=ON, $(grep -c 'warning:' "$log") compiler warnings; $("$LATTICE_BIN" --version | head -1))"
    local missing; missing=$(ldd "$LATTICE_BIN" | grep -c 'not found')
    [ "$missing" -eq 0 ] || fail "phase build: FAIL ($missing libraries not found by ldd: $(ldd "$LATTICE_BIN" | grep 'not found' | tr -s ' \t' ' ' | tr '\n' ';'))"
  else
    tail -n 30 "$log" | sed 's/^/  build-full: /' | tee -a "$RESULTS"
    fail "phase build: FAIL (the whole trainer; log: device-check-build-full.log)"
  fi
}

# Prebuilt (scripts/device-prebuild.sh): the libraries unpacked, and both programs must start here.
phase_build_prebuilt() {
  local log=$DEST/device-check-build-full.log b missing
  if ! ls "$DEBS"/*.deb >/dev/null 2>&1; then fail "phase build: FAIL (prebuilt: no .device-debs/*.deb to run against)"; return; fi
  unpack_debs >"$log" 2>&1 || { fail "phase build: FAIL (unpacking .device-debs into $DEPS; log: device-check-build-full.log)"; return; }
  runtime_env
  for b in "$PREBUILT/lattice" "$PREBUILT/lattice_cuda_check"; do
    [ -x "$b" ] || { fail "phase build: FAIL (prebuilt: no $b)"; continue; }
    missing=$(ldd "$b" | grep -c 'not found')
    [ "$missing" -eq 0 ] || fail "phase build: FAIL ($b: $missing libraries not found by ldd: $(ldd "$b" | grep 'not found' | tr -s ' \t' ' ' | tr '\n' ';'))"
  done
  "$LATTICE_BIN" --version >>"$log" 2>&1 || { fail "phase build: FAIL (prebuilt lattice does not start; log: device-check-build-full.log)"; return; }
  record "phase build: prebuilt in $PREBUILT, not built here: $("$LATTICE_BIN" --version | head -1)$(cat "$PREBUILT/BUILT" 2>/dev/null | sed 's/^/; /')"
}

# ---- runs of the trainer ----
PY=${PYTHON:-python3}  # the GPU machine's python3 has numpy and PyTorch
COMPARE=$ROOT/scripts/device-compare.py
need_trainer() {
  if [ ! -x "$LATTICE_BIN" ]; then fail "phase $1: FAIL (no $LATTICE_BIN: run the build phase first)"; return 1; fi
  runtime_env
  # The kernels phase's fallbacks (a form whose lines failed), for every training run after it.
  [ -z "${DEVICE_CHECK_GEMM_TUNE:-}" ] || export LATTICE_CUDA_GEMM_TUNE=$DEVICE_CHECK_GEMM_TUNE
  [ -z "${DEVICE_CHECK_GEMM_EPILOGUES:-}" ] || export LATTICE_CUDA_GEMM_EPILOGUES=$DEVICE_CHECK_GEMM_EPILOGUES
  [ -z "${DEVICE_CHECK_ATTENTION_DENSE:-}" ] || export LATTICE_CUDA_ATTENTION_DENSE=$DEVICE_CHECK_ATTENTION_DENSE
  mkdir -p "$WORK" && cd "$WORK" || return 1
  if [ ! -f data/train.bin ]; then
    "$PY" -c "
import random
random.seed(7)
words = ['the', 'device', 'and', 'host', 'agree', 'on', 'every', 'bit', 'of', 'it', 'when', 'kernels', 'run']
print('\n'.join(' '.join(random.choice(words) for _ in range(12)) for _ in range(20000)))" > corpus.txt
    "$LATTICE_BIN" prepare --input corpus.txt --out data >/dev/null 2>&1 || { fail "phase $1: FAIL (lattice prepare)"; return 1; }
  fi
}
# train NAME DEVICE FLAGS...: one run, its JSON lines in NAME.jsonl and its checkpoint in ck_NAME.
train() {
  local name=$1 device=$2; shift 2
  rm -rf "ck_$name"
  timeout 300 "$LATTICE_BIN" train "${SMALL[@]}" --device "$device" --save "ck_$name" --json "$@" >"$name.jsonl" 2>"$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { fail "run $name ($device $*): FAIL exit $rc: $(tail -n 2 "$name.err" | tr '\n' ' ')"; return 1; }
}
compare() { "$PY" "$COMPARE" "$@" 2>&1 | while IFS= read -r l; do record "  $l"; [[ $l == *FAIL ]] && echo x; done | grep -q x && status=1; true; }
# The parity model: 4 layers, dropout on, 20 steps (issue 33's "Done when").
SMALL=(--data data --layers 4 --hidden 128 --heads 4 --seq-len 128 --micro-batch 4 --global-batch 8 --steps 20
       --dropout 0.1 --threads "$JOBS")

phase_parity() {
  need_trainer parity || return
  record "phase parity: the same small model on the CPU and on the GPU, fp32, TF32 off, dropout 0.1, 20 steps"
  train cpu cpu && train gpu "$GPU" || return
  compare losses "parity fp32 losses gpu vs cpu" cpu.jsonl gpu.jsonl 1e-5
  compare weights "parity fp32 final weights gpu vs cpu" ck_cpu/model.safetensors ck_gpu/model.safetensors 1e-5
  train gpu_again "$GPU" && compare weights "parity gpu repeats itself (bits)" ck_gpu/model.safetensors ck_gpu_again/model.safetensors 0
  for r in selective full; do
    train "gpu_$r" "$GPU" --recompute "$r" && compare losses "parity gpu --recompute $r = gpu none (bits)" gpu.jsonl "gpu_$r.jsonl" 0
  done
  train cpu_fused cpu --attention fused && train gpu_fused "$GPU" --attention fused &&
    compare losses "parity fused attention gpu vs cpu" cpu_fused.jsonl gpu_fused.jsonl 1e-5
  # bf16 activations: both devices round the same operands to bf16, but their GEMMs and reductions add
  # in different orders; a bf16 rounding (2^-7 relative) is the bound on what one step can differ.
  train cpu_bf16 cpu --activation-dtype bf16 && train gpu_bf16 "$GPU" --activation-dtype bf16 &&
    compare losses "parity bf16 activations gpu vs cpu (2^-7)" cpu_bf16.jsonl gpu_bf16.jsonl 0.0078125
  # Fused attention under bf16 activations takes the tensor-core kernels on the GPU (bf16 products).
  train cpu_fused_bf16 cpu --attention fused --activation-dtype bf16 &&
    train gpu_fused_bf16 "$GPU" --attention fused --activation-dtype bf16 &&
    compare losses "parity fused attention, bf16 activations (tensor cores) gpu vs cpu (2^-7)" cpu_fused_bf16.jsonl gpu_fused_bf16.jsonl 0.0078125
  # Without dropout the projection and FC2 add into the residual stream inside their GEMM (an accumulating
  # GEMM, the bias in its epilogue), as the speed phase's runs do: the fp32 bound, and bf16's.
  train cpu_nodrop cpu --dropout 0 && train gpu_nodrop "$GPU" --dropout 0 &&
    compare losses "parity fp32, dropout 0 (GEMMs adding into the residual) gpu vs cpu" cpu_nodrop.jsonl gpu_nodrop.jsonl 1e-5
  train cpu_fused_bf16_nodrop cpu --attention fused --activation-dtype bf16 --dropout 0 &&
    train gpu_fused_bf16_nodrop "$GPU" --attention fused --activation-dtype bf16 --dropout 0 &&
    compare losses "parity fused attention, bf16, dropout 0 gpu vs cpu (2^-7)" cpu_fused_bf16_nodrop.jsonl gpu_fused_bf16_nodrop.jsonl 0.0078125
  train gpu_p16 "$GPU" --params-dtype bf16 --activation-dtype bf16 && record "  parity gpu --params-dtype bf16: ran (final loss $(grep -o '"final_loss":[^,]*' gpu_p16.jsonl))"
  # Resume: 10 steps saved on the GPU, 10 more on the GPU (the bits of the straight run) and on the CPU.
  train gpu_half "$GPU" --steps 10 && {
    rm -rf ck_gpu_resumed ck_cpu_resumed
    timeout 300 "$LATTICE_BIN" train "${SMALL[@]}" --device "$GPU" --resume ck_gpu_half --save ck_gpu_resumed --json >gpu_resumed.jsonl 2>&1 &&
      compare weights "parity gpu resume is bit-exact" ck_gpu/model.safetensors ck_gpu_resumed/model.safetensors 0
    timeout 300 "$LATTICE_BIN" train "${SMALL[@]}" --device cpu --resume ck_gpu_half --save ck_cpu_resumed --json >cpu_resumed.jsonl 2>&1 &&
      compare weights "parity gpu checkpoint resumed on the cpu vs cpu straight" ck_cpu/model.safetensors ck_cpu_resumed/model.safetensors 1e-5
  }
  # And back: 10 steps saved on the CPU, 10 more on the GPU, against the GPU's straight run.
  train cpu_half cpu --steps 10 && {
    rm -rf ck_gpu_from_cpu
    timeout 300 "$LATTICE_BIN" train "${SMALL[@]}" --device "$GPU" --resume ck_cpu_half --save ck_gpu_from_cpu --json >gpu_from_cpu.jsonl 2>&1 &&
      compare weights "parity cpu checkpoint resumed on the gpu vs gpu straight" ck_gpu/model.safetensors ck_gpu_from_cpu/model.safetensors 1e-5
  }
  record "phase parity: done"
}

phase_memory() {
  need_trainer memory || return
  record "phase memory: kept bytes per layer measured on the device against the formula (1%), and the device's used bytes reconciled (5%)"
  local r dt
  # Its own shape, for this phase's runs only (train reads SMALL; bash's locals reach the functions called).
  local SMALL=(--data data --layers 4 --hidden 256 --heads 8 --seq-len 256 --micro-batch 4 --global-batch 4 --steps 2
               --dropout 0.1 --threads "$JOBS")
  for dt in fp32 bf16; do
    for r in none selective full; do

      train "mem_${r}_$dt" "$GPU" --recompute "$r" --activation-dtype "$dt" || continue
      [ "$r" = full ] || compare layers "memory $r $dt" "mem_${r}_$dt.jsonl" 0.01
      compare device "memory $r $dt device reconciliation" "mem_${r}_$dt.jsonl" 0.05
    done
  done
  # The fused attention under bf16 activations (the tensor-core kernels, the context in the token
  # rows): of the s² part only the log-sum-exp is kept (docs/design.md §3.1).
  train mem_fused_bf16 "$GPU" --attention fused --activation-dtype bf16 && {
    compare layers "memory fused bf16" mem_fused_bf16.jsonl 0.01
    compare device "memory fused bf16 device reconciliation" mem_fused_bf16.jsonl 0.05
  }
  record "phase memory: done"
}

# Several ranks on the one GPU, their communication staged through the host: each layout against the
# one-rank GPU run (the parity model, 1e-5 as every layout on the CPU).
phase_layouts() {
  need_trainer layouts || return
  record "phase layouts: TP 2 + SP, PP 2 (1F1B), DP 2 (ZeRO 1), CP 2 (all-to-all; the ring against the fused attention) as two processes on one GPU against one rank on it"
  train one_gpu "$GPU" || return
  train one_gpu_fused "$GPU" --attention fused || return
  local name np reference
  for spec in "tp2_sp:--tensor-model-parallel-size 2 --sequence-parallel" "pp2:--pipeline-model-parallel-size 2 --schedule 1f1b" \
              "dp2:--zero 1" "cp2_a2a:--cp 2 --cp-comm-type a2a" "cp2_ring:--cp 2 --cp-comm-type p2p --attention fused"; do
    name=${spec%%:*}
    reference=one_gpu  # the one-rank run with the same attention
    [[ $spec == *"--attention fused"* ]] && reference=one_gpu_fused
    rm -rf "ck_$name"
    # shellcheck disable=SC2086
    timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$LATTICE_BIN" train "${SMALL[@]}" --device "$GPU" --save "ck_$name" --json \
      ${spec#*:} >"$name.jsonl" 2>"$name.err" || { fail "  layouts $name: FAIL exit $?: $(grep -m2 -i error "$name.err" | tr '\n' ' ')"; continue; }
    compare losses "layouts $name losses vs one gpu rank" "$reference.jsonl" "$name.jsonl" 1e-5
    compare weights "layouts $name final weights vs one gpu rank" "ck_$reference/model.safetensors" "ck_$name/model.safetensors" 1e-5
  done
  record "phase layouts: done"
}

# The paper's Table 4 on the GPU: one tensor-parallel rank's share of the 22B layer (h 6144, 64 heads,
# t 8, s 2048, b 4; bf16), forward and backward, communication left out (bench --tp-share), for no
# recompute, selective and full, and fused attention; overheads against no recompute beside the
# paper's A100 figures (selective +7%, full +39%).
phase_table4() {
  need_trainer table4 || return
  record "phase table4: one TP rank's share (t 8) of the 22B layer (h 6144, 64 heads, s 2048, b 4, bf16), communication left out; the paper (A100): selective +7%, full +39%"
  local mode attn
  # DEVICE_CHECK_TABLE4_SHAPE: a small shape for a rehearsal on the CPU (the 22B share takes minutes there).
  local shape=(${DEVICE_CHECK_TABLE4_SHAPE:---hidden 6144 --heads 64 --seq-len 2048 --micro-batch 4})
  for attn in unfused fused; do
    for mode in none selective full; do
      timeout 300 "$LATTICE_BIN" bench --device "$GPU" --layer-costs --tp-share 8 "${shape[@]}" \
        --activation-dtype bf16 --dropout 0.1 --recompute "$mode" --attention "$attn" --seconds 5 --json \
        >"table4_${attn}_$mode.json" 2>"table4_${attn}_$mode.err" ||
        { fail "  table4 $attn $mode: FAIL: $(tail -n 1 "table4_${attn}_$mode.err")"; continue; }
      "$PY" - "table4_${attn}_$mode.json" "table4_unfused_none.json" "$attn $mode" <<'PY' | while IFS= read -r l; do record "  $l"; done
import json, sys
c = json.load(open(sys.argv[1]))["layer_costs"]
t = c["forward_s"] + c["backward_input_s"] + c["backward_weight_s"]
b = json.load(open(sys.argv[2]))["layer_costs"]
tb = b["forward_s"] + b["backward_input_s"] + b["backward_weight_s"]
print(f"table4 {sys.argv[3]}: forward {c['forward_s']*1e3:.1f} ms, backward {(c['backward_input_s']+c['backward_weight_s'])*1e3:.1f} ms, "
      f"together {t*1e3:.1f} ms, {100*(t/tb-1):+.0f}% against unfused none ({c['repetitions']} repetitions, median)")
PY
    done
  done
  record "phase table4: done"
}

# The dense bf16 peak of the card at hand (tensor cores, no sparsity: NVIDIA's data sheets), from its
# name: H100 and H200 SXM (and GH200, H800 SXM) 989 TFLOP/s, H100 and H800 PCIe 756, H100 and H200 NVL
# 835, A100 312. DEVICE_CHECK_PEAK_TFLOPS overrides; a card not in the list says so, and its MFU lines
# are against H100 SXM's 989 (each line names the peak it divides by).
gpu_name() { nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1; }
gpu_peak() {
  local name tf note; name=$(gpu_name)
  case "$name" in
    *H100*PCIe* | *H800*PCIe*) tf=756 note="PCIe" ;;
    *H100*NVL* | *H200*NVL*) tf=835 note="NVL" ;;
    *H100* | *H200* | *H800*) tf=989 note="SXM" ;;
    *A100*) tf=312 note="A100" ;;
    *) tf=989 note="a card not in this script's list: H100 SXM's figure, not this card's; set DEVICE_CHECK_PEAK_TFLOPS" ;;
  esac
  if [ -n "${DEVICE_CHECK_PEAK_TFLOPS:-}" ]; then tf=$DEVICE_CHECK_PEAK_TFLOPS note="DEVICE_CHECK_PEAK_TFLOPS"; fi
  echo "${tf}e12 ${name:-unnamed card}: ${tf} TFLOP/s dense bf16 (${note})"
}
# One lattice speed run's line: FILE (its --json output), the micro-batch, the peak, the attention's
# label, a suffix.
speed_lattice_line() {
  "$PY" - "$@" <<'PY' | while IFS= read -r l; do record "  $l"; done
import json, statistics, sys
steps = [json.loads(x) for x in open(sys.argv[1]) if '"event":"step"' in x][2:]  # past two warm-up steps
if not steps:
    print(f"speed lattice {sys.argv[4]}: FAIL (no step ran)"); sys.exit()
t = statistics.median(s["step_s"] for s in steps)
print(f"speed lattice {sys.argv[4]} attention{sys.argv[5] if len(sys.argv) > 5 else ''}: median step {t*1e3:.1f} ms, {int(sys.argv[2])*1024/t:,.0f} tokens/s, MFU {statistics.median(s['mfu'] for s in steps)*100:.1f}% (of {float(sys.argv[3])/1e12:.0f} TFLOP/s)")
PY
}
# One PyTorch peer run (bench/pytorch_peer.py) and its line: MODE:ATTENTION, the micro-batch, the peak,
# a tag for its files, a label's suffix.
speed_torch_run() {
  local mode=$1 b=$2 peak=$3 tag=$4 suffix=${5:-}
  timeout 150 "$PY" "$ROOT/bench/pytorch_peer.py" --device cuda --autocast bf16 --mode "${mode%%:*}" --attention "${mode#*:}" \
    --layers 12 --hidden 768 --heads 12 --seq-len 1024 --vocab 50304 --micro-batch "$b" --steps 10 --warmup 3 --peak-flops "$peak" \
    >"speed_torch_$tag.json" 2>"speed_torch_$tag.err"
  if [ -s "speed_torch_$tag.json" ]; then
    "$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
print(f\"speed pytorch {r['mode']} {r['attention']} attention{sys.argv[2]}: median step {r['median_step_s']*1e3:.1f} ms, {r['tokens_per_s']:,.0f} tokens/s, MFU {r['mfu']*100:.1f}% (torch {r['torch']})\")" \
      "speed_torch_$tag.json" "$suffix" | while IFS= read -r l; do record "  $l"; done
  else record "  speed pytorch ${mode/:/ } attention$suffix: did not run ($(tail -n 1 "speed_torch_$tag.err"))"; fi
}

# The planner beside the engine on this card (docs/plan.md, "Calibration of the presets"): `lattice
# plan` with the card's preset (no GPU needed: it is arithmetic) for the speed runs' model at micro-batch
# B, unfused and fused, against the median step of both rounds and the first round's accounted peak.
plan_preset() {
  local name; name=$(gpu_name)
  case "$name" in *H200*) echo H200 ;; *H100*PCIe*) ;; *H100*) echo H100-80GB ;; *A100*80GB*) echo A100-80GB ;; esac
}
speed_plan_lines() {
  local b=$1 preset attn; preset=${DEVICE_CHECK_PLAN_PRESET:-$(plan_preset)}
  if [ -z "$preset" ]; then record "  speed plan: no preset for this card (H200, H100-80GB, A100-80GB)"; return; fi
  for attn in unfused fused; do
    "$LATTICE_BIN" plan --hardware "$preset" --layers 12 --hidden 768 --heads 12 --seq-len 1024 --vocab 50304 \
      --dropout 0 --activation-dtype bf16 --micro-batch "$b" --global-batch "$b" --attention "$attn" --json \
      >"speed_plan_$attn.json" 2>"speed_plan_$attn.err" ||
      { fail "  speed plan $attn: FAIL: $(tail -n 1 "speed_plan_$attn.err")"; continue; }
    "$PY" - "speed_plan_$attn.json" "$attn" "$preset" speed_lattice_"$attn"_[0-9]*.jsonl <<'PY' | while IFS= read -r l; do record "  $l"; done
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
t, peak = [], None
for f in sys.argv[4:]:  # each run past its two warm-up steps, as speed_lattice_line
    events = [json.loads(x) for x in open(f) if x.startswith("{")]
    t += [e["step_s"] for e in events if e.get("event") == "step"][2:]
    for e in events:
        if e.get("event") == "summary" and peak is None:
            peak = e["memory"]["ranks"][0]["accounted_peak_bytes"]
pt, pm = plan["predicted_iteration_s"], plan["memory_by_stage"][0]["accounted_peak_bytes"]
if not t:
    print(f"speed plan {sys.argv[2]}: predicted {pt*1e3:.1f} ms a step ({sys.argv[3]} preset); no measured step"); sys.exit()
m = statistics.median(t)
mem = (f"accounted peak predicted {pm/1e9:.2f} GB, measured {peak/1e9:.2f} GB ({100*(peak/pm-1):+.1f}%)"
       if peak else f"accounted peak predicted {pm/1e9:.2f} GB, no summary measured")
print(f"speed plan {sys.argv[2]}: predicted {pt*1e3:.1f} ms a step ({sys.argv[3]} preset), measured {m*1e3:.1f} "
      f"ms, {m/pt:.2f}× the prediction; {mem}")
PY
  done
}

phase_speed() {
  need_trainer speed || return
  if [ ! -f "$DEBS/gpt2-data/train.bin" ]; then fail "phase speed: FAIL (no .device-debs/gpt2-data: scripts/device-bundle.sh prepares it)"; return; fi
  local peak note; read -r peak note <<<"$(gpu_peak)"
  record "phase speed: GPT-2 124M (12 layers, h 768, 12 heads, s 1024, vocab 50304), bf16, one micro-batch a step; peak $note"
  local b=16 flags=(--data "$DEBS/gpt2-data" --layers 12 --hidden 768 --heads 12 --seq-len 1024 --dropout 0
                    --activation-dtype bf16 --threads "$JOBS" --peak-flops "$peak" --json --lr 6e-4)
  # Micro-batch 32 (the runs' protocol since run 3), or the largest below it that fits.
  for b in 32 16 8 4; do
    timeout 300 "$LATTICE_BIN" train "${flags[@]}" --device "$GPU" --micro-batch $b --global-batch $b --steps 2 >probe.jsonl 2>probe.err && break
  done
  record "  speed: micro-batch $b (the largest of 32, 16, 8, 4 that ran)"
  local round attn mode
  # Interleaved, twice: lattice with the unfused attention (the paper's kept s×s tensors), with the
  # fused one, fused without the GEMMs' epilogues and fused without the GEMM tuner (docs/gpu.md: what
  # each buys); PyTorch eager with the same unfused attention and with F.scaled_dot_product_attention
  # (flash: the peer of lattice's fused), and torch.compile of the unfused model. The fused run reports
  # the tuner's choices (LATTICE_CUDA_GEMM_TUNE=report), recorded from its first round.
  for round in $(seq 1 "${DEVICE_CHECK_SPEED_ROUNDS:-2}"); do
    for attn in unfused fused fused_noepi fused_notune; do
      LATTICE_CUDA_GEMM_EPILOGUES=$([ $attn = fused_noepi ] && echo 0 || echo "${DEVICE_CHECK_GEMM_EPILOGUES:-1}") \
      LATTICE_CUDA_GEMM_TUNE=$(case $attn in fused_notune) echo 0 ;; fused) echo "${DEVICE_CHECK_GEMM_TUNE:-report}" ;; *) echo "${DEVICE_CHECK_GEMM_TUNE:-1}" ;; esac) \
        timeout 300 "$LATTICE_BIN" train "${flags[@]}" --device "$GPU" --micro-batch $b --global-batch $b --steps 12 \
        --attention "${attn%_no*}" >"speed_lattice_${attn}_$round.jsonl" 2>"speed_lattice_${attn}_$round.err"
      if [ "$attn" = fused ] && [ "$round" = 1 ]; then
        grep '^cuBLASLt tuner:' "speed_lattice_${attn}_$round.err" | while IFS= read -r l; do record "  speed $l"; done
      fi
      speed_lattice_line "speed_lattice_${attn}_$round.jsonl" "$b" "$peak" "$attn"
    done
    for mode in ${DEVICE_CHECK_SPEED_PEERS:-eager:manual eager:sdpa compile:manual}; do
      speed_torch_run "$mode" "$b" "$peak" "${mode/:/_}_$round"
    done
  done
  # The issue's batch is the largest micro-batch that fits: above 32 (DEVICE_CHECK_SPEED_LARGEST, the
  # sizes tried largest first; "" skips it), the first at which both lattice and PyTorch eager with
  # SDPA run two steps; then both there, interleaved, twice.
  local big="" m
  for m in ${DEVICE_CHECK_SPEED_LARGEST-64}; do
    [ "$m" -gt "$b" ] || continue
    if ! timeout 300 "$LATTICE_BIN" train "${flags[@]}" --device "$GPU" --micro-batch "$m" --global-batch "$m" --steps 2 \
         --attention fused >probe_big.jsonl 2>probe_big.err; then
      record "  speed: micro-batch $m does not run in lattice ($(tail -n 1 probe_big.err))"; continue
    fi
    if ! timeout 150 "$PY" "$ROOT/bench/pytorch_peer.py" --device cuda --autocast bf16 --mode eager --attention sdpa \
         --layers 12 --hidden 768 --heads 12 --seq-len 1024 --vocab 50304 --micro-batch "$m" --steps 2 --warmup 1 \
         --peak-flops "$peak" >probe_big_torch.json 2>probe_big_torch.err; then
      record "  speed: micro-batch $m runs in lattice, not in PyTorch ($(tail -n 1 probe_big_torch.err))"; continue
    fi
    big=$m; break
  done
  if [ -n "$big" ]; then
    record "  speed: micro-batch $big, the largest of ${DEVICE_CHECK_SPEED_LARGEST-64} at which both ran"
    for round in 1 2; do
      LATTICE_CUDA_GEMM_EPILOGUES=${DEVICE_CHECK_GEMM_EPILOGUES:-1} LATTICE_CUDA_GEMM_TUNE=${DEVICE_CHECK_GEMM_TUNE:-1} \
        timeout 300 "$LATTICE_BIN" train "${flags[@]}" --device "$GPU" --micro-batch "$big" --global-batch "$big" --steps 12 \
        --attention fused >"speed_lattice_big_$round.jsonl" 2>"speed_lattice_big_$round.err"
      speed_lattice_line "speed_lattice_big_$round.jsonl" "$big" "$peak" fused " (micro-batch $big)"
      speed_torch_run eager:sdpa "$big" "$peak" "big_$round" " (micro-batch $big)"
    done
  fi
  speed_plan_lines "$b"
  # Where the time goes: every operation timed to its end (serialised, so its sum can exceed a step).
  for attn in unfused fused; do
    timeout 300 "$LATTICE_BIN" train "${flags[@]}" --device "$GPU" --micro-batch $b --global-batch $b --steps 6 --profile-ops \
      --attention $attn >"speed_profile_$attn.jsonl" 2>"speed_profile_$attn.err"
    "$PY" - "speed_profile_$attn.jsonl" "$attn" <<'PY' | while IFS= read -r l; do record "  $l"; done
import json, sys
s = [json.loads(x) for x in open(sys.argv[1]) if '"event":"summary"' in x]
if not s or "op_profile" not in s[0]:
    print(f"speed profile {sys.argv[2]}: FAIL (no op_profile)"); sys.exit()
ops = s[0]["op_profile"]
total = sum(o["seconds"] for o in ops)
steps = s[0].get("steps", 6) - 1  # the first step is not profiled
for o in ops[:16]:
    print(f"speed profile {sys.argv[2]} {o['op']:<32} {o['calls']:5d} calls {o['seconds']*1e3/max(steps,1):8.2f} ms a step {100*o['seconds']/total:5.1f}%")
PY
  done
  record "phase speed: done"
}
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(all)
[ "${phases[0]}" = all ] && phases=(build kernels parity memory layouts speed table4)
header "${phases[*]}"
for p in "${phases[@]}"; do
  case "$p" in
    build) phase_build; [ -n "$PREBUILT" ] || phase_build_full ;;
    kernels) phase_kernels ;;
    parity) phase_parity ;;
    memory) phase_memory ;;
    speed) phase_speed ;;
    layouts) phase_layouts ;;
    table4) phase_table4 ;;
    profile) phase_profile ;;
    *) fail "unknown phase '$p' (build|kernels|parity|memory|layouts|speed|table4|profile|all)" ;;
  esac
done
record "# device-check done: $([ $status -eq 0 ] && echo ok || echo FAIL)"
exit $status
