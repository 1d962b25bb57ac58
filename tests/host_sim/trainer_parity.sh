#!/usr/bin/env bash
# cuda.host_trainer: the whole trainer with --device cuda on the host simulation
# (scripts/cuda-host-trainer.sh) against --device cpu on a small model, dropout on: fp32 (unfused
# attention) losses within 1e-5 relative a step, bf16 activations unfused and fused (the tensor-core
# kernels, context in the token rows) within 2^-7, and the fused run repeating itself bit for bit
# with its blocks and threads run in the reverse order,
# also where the GEMMs have no bf16 output (linear_forward_bf16's fallback); and without dropout, where
# the projection and FC2 add into the residual stream in their GEMM; and context parallelism's ring,
# two ranks under mpirun, against one rank. A head dimension past the device's attention kernels is
# refused in one line before anything is written.
# The bounds are the device check's parity bounds (docs/gpu.md): fp32 differs by summation order only;
# under bf16 both devices round the same operands, and one bf16 rounding (2^-7 relative) bounds what
# a step's loss can differ. What it checks is the seam's CUDA side, which no kernel check reaches.
#   tests/host_sim/trainer_parity.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ $# -eq 1 && -d $1 ]] || { echo "usage: tests/host_sim/trainer_parity.sh BUILD_DIR (a CPU build)" >&2; exit 2; }
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The build's program (tests/host_sim/host_sim.cmake, CUDA_HOST_TRAINER_PROGRAM) or one built here.
if [[ -n ${CUDA_HOST_TRAINER_PROGRAM:-} ]]; then
  [[ -x $CUDA_HOST_TRAINER_PROGRAM ]] || { echo "trainer_parity: $CUDA_HOST_TRAINER_PROGRAM is not a program" >&2; exit 1; }
  mkdir -p "$work/sim" && ln -s "$CUDA_HOST_TRAINER_PROGRAM" "$work/sim/lattice"
else
  "$root/scripts/cuda-host-trainer.sh" "$build" "$work/sim" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
fi
cd "$work"
python3 -c "
import random
random.seed(3)
words = ['the', 'device', 'and', 'host', 'agree', 'on', 'every', 'bit', 'of', 'it', 'when', 'kernels', 'run']
print('\n'.join(' '.join(random.choice(words) for _ in range(12)) for _ in range(4000)))" >corpus.txt
"$build/lattice" prepare --input corpus.txt --out data >/dev/null 2>&1
small=(--data data --layers 2 --hidden 64 --heads 4 --seq-len 64 --micro-batch 2 --global-batch 4 --steps 4
       --dropout 0.1 --threads 2 --json)
status=0
launch=()  # a launcher the next run goes under (mpirun), empty for one process
run() {  # NAME DEVICE BINARY FLAGS...
  local name=$1 device=$2 bin=$3
  shift 3
  "${launch[@]}" "$bin" train "${small[@]}" --device "$device" "$@" >"$name.jsonl" 2>"$name.err" || {
    echo "FAIL: $name (${launch[*]} $device $*): $(tail -n 2 "$name.err")"
    touch "$name.failed"
    status=1
  }
}
# pool NAME ...: run in the background, two at a time (a simulated run takes one core); `wait` and
# any *.failed after.
pool() {
  while (( $(jobs -rp | wc -l) >= 2 )); do wait -n || true; done
  run "$@" &
}
pool_done() {
  wait
  if compgen -G "*.failed" >/dev/null; then status=1; fi
}
compare() {  # NAME A B TOL: the device check's loss comparison (scripts/device-compare.py)
  python3 "$root/scripts/device-compare.py" losses "$@" || status=1
}
# Without dropout the projection and FC2 add into the residual stream in their GEMM (linear_forward_residual).
specs=("fp32:1e-5:" "bf16:0.0078125:--activation-dtype bf16" "fused_bf16:0.0078125:--attention fused --activation-dtype bf16"
       "fp32_nodrop:1e-5:--dropout 0" "fused_bf16_nodrop:0.0078125:--attention fused --activation-dtype bf16 --dropout 0")
for spec in "${specs[@]}"; do
  name=${spec%%:*} rest=${spec#*:}
  flags=${rest#*:}
  # shellcheck disable=SC2086
  pool "cpu_$name" cpu "$build/lattice" $flags
  # shellcheck disable=SC2086
  pool "sim_$name" cuda "$work/sim/lattice" $flags
done
# The repeat runs every launch's blocks, and each block's threads, last first: the same bits in the
# other order is what kernels free of races between threads and between blocks give (a GPU keeps no
# order; the simulation keeps one, so only a second order shows a race).
LATTICE_HOST_SIM_SCHEDULE=reverse pool sim_fused_bf16_again cuda "$work/sim/lattice" --attention fused --activation-dtype bf16
# Without the GEMMs' epilogues (the backend's switch) the two calls run: within 2^-7 (an epilogue
# rounds once where they round twice). A GEMM with no bf16 output for a shape (cuBLASLt may offer none,
# the simulation's GEMM answers so under its variable): the fp32 product narrowed instead, and the
# epilogues refused, the bits of the run without them.
LATTICE_CUDA_GEMM_EPILOGUES=0 pool sim_fused_bf16_noepi cuda "$work/sim/lattice" --attention fused --activation-dtype bf16
LATTICE_CUDA_GEMM_EPILOGUES=0 pool sim_fused_bf16_nodrop_noepi cuda "$work/sim/lattice" --attention fused --activation-dtype bf16 --dropout 0
LATTICE_HOST_SIM_GEMM_BF16_OUT=0 pool sim_fused_bf16_no16 cuda "$work/sim/lattice" --attention fused --activation-dtype bf16
# Context parallelism's ring (--cp-comm-type p2p) on the simulated device: two ranks, each its own
# simulated card, K and V staged through host memory by MPI (cuda/flash_block.cu's blocks), against
# one simulated rank with the fused attention; fp32, 2 steps (the blocks take a warp a row: slow here).
ring=(--attention fused --steps 2 --threads 1)
pool sim_fused_fp32 cuda "$work/sim/lattice" "${ring[@]}"
pool_done
for spec in "${specs[@]}"; do
  name=${spec%%:*} rest=${spec#*:}
  compare "host-simulated cuda vs cpu, $name" "cpu_$name.jsonl" "sim_$name.jsonl" "${rest%%:*}"
done
compare "host-simulated cuda repeats itself in the reverse schedule, fused bf16 (bits)" sim_fused_bf16.jsonl sim_fused_bf16_again.jsonl 0
compare "host-simulated cuda without the GEMMs' epilogues vs with, fused bf16" sim_fused_bf16.jsonl sim_fused_bf16_noepi.jsonl 0.0078125
compare "host-simulated cuda without the GEMMs' epilogues, dropout 0 (the residual's two calls)" sim_fused_bf16_nodrop.jsonl sim_fused_bf16_nodrop_noepi.jsonl 0.0078125
compare "host-simulated cuda without a bf16 GEMM output, fused bf16 (bits)" sim_fused_bf16_noepi.jsonl sim_fused_bf16_no16.jsonl 0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch=(timeout 300 mpirun --oversubscribe --bind-to none -np 2)
run sim_ring2 cuda "$work/sim/lattice" "${ring[@]}" --cp 2 --cp-comm-type p2p
compare "host-simulated cuda, CP 2 ring vs one rank, fused fp32" sim_fused_fp32.jsonl sim_ring2.jsonl 1e-5
launch=()
# Past the kernels' head dimensions (cli/device_support.cpp, from the device's table): refused before
# the model exists, exit 1, one line naming the limit, no --save folder made; where the kernel would
# have thrown at the first step. The ring's blocks take more than the fused kernels (160 runs there).
refused() {  # NAME EXPECTED-TEXT COMMAND...
  local name=$1 expected=$2
  shift 2
  local rc=0
  "$@" --save "ck_$name" >"$name.out" 2>"$name.err" || rc=$?
  if [[ $rc -ne 1 || -e ck_$name ]] || ! grep -qF -- "$expected" "$name.err"; then
    echo "FAIL: $name: rc $rc, $(ls -d "ck_$name" 2>/dev/null) $(head -n 2 "$name.err")"
    status=1
  else
    echo "ok: $name: $(grep -F -- "$expected" "$name.err" | head -n 1)"
  fi
}
wide=(--data data --layers 1 --seq-len 64 --micro-batch 1 --global-batch 1 --steps 1 --threads 1 --device cuda
      --attention fused --heads 2)
refused fused_dh160 "--attention fused takes a head dimension up to 128, and --hidden 320 / --heads 2 is 160" \
  "$work/sim/lattice" train "${wide[@]}" --hidden 320
refused ring_dh320 "ring (--cp-comm-type p2p) takes a head dimension up to 256, and --hidden 640 / --heads 2 is 320" \
  timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$work/sim/lattice" train "${wide[@]}" --hidden 640 --cp 2 \
  --cp-comm-type p2p
if timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$work/sim/lattice" train "${wide[@]}" --hidden 320 --cp 2 \
     --cp-comm-type p2p --json >ring_dh160.jsonl 2>ring_dh160.err && grep -q '"event":"summary"' ring_dh160.jsonl; then
  echo "ok: the ring at head dimension 160 trains (its blocks take up to 256)"
else
  echo "FAIL: the ring at head dimension 160: $(tail -n 2 ring_dh160.err)"
  status=1
fi
exit $status
