#!/usr/bin/env bash
# Table 4 analogue under mpirun (paper: per-layer forward/backward time of the 22B model, t = 8, for
# baseline TP, SP, full recompute, selective, selective + SP): one transformer layer's TP shard,
# h=1024, a=16, s=512, b=2, dropout 0.1, t = RANKS (default 2) ranks with one OpenMP thread each,
# timed by bench/bench_layer_tp.cpp for fp32 and bf16 activations. Each table gives fwd/bwd ms (median
# over iterations of the slowest rank), the overhead against baseline TP (backward and total, as the
# paper), and the bytes one layer keeps per rank (tracking allocator) beside docs/design.md §4's row.
# Builds nothing.
#
# Usage: bench/table4_tp.sh [build-dir]   (default: the first of build, build-bench, build-t4 that has it)
# Env:   RANKS (default 2), THREADS per rank (default 1: the machine has 2 cores), ITERS (default 9),
#        WARMUP (default 1), JSON=1 prints the JSON lines instead of the tables, EXTRA (more flags).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-}"
if [[ -z "$BUILD" ]]; then
  for c in "$ROOT/build" "$ROOT/build-bench" "$ROOT/build-t4"; do
    [[ -x "$c/bench/bench_layer_tp" ]] && BUILD="$c" && break
  done
fi
[[ -n "$BUILD" && -x "$BUILD/bench/bench_layer_tp" ]] ||
  { echo "table4_tp.sh: need <build>/bench/bench_layer_tp (build it first or pass the build dir)" >&2; exit 2; }
RANKS="${RANKS:-2}" THREADS="${THREADS:-1}" ITERS="${ITERS:-9}" WARMUP="${WARMUP:-1}"
MPIRUN=(mpirun --oversubscribe -np "$RANKS" -x OMP_NUM_THREADS="$THREADS")
[[ "$(id -u)" == 0 ]] && MPIRUN+=(--allow-run-as-root)
FMT=()
[[ "${JSON:-0}" == 1 ]] && FMT=(--json)

echo "table4_tp.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for dt in fp32 bf16; do
  cmd=("${MPIRUN[@]}" "$BUILD/bench/bench_layer_tp" --hidden 1024 --heads 16 --seq-len 512 --micro-batch 2
       --dropout 0.1 --activation-dtype "$dt" --warmup "$WARMUP" --iters "$ITERS" ${EXTRA:-} "${FMT[@]}")
  echo "+ OMP_NUM_THREADS=$THREADS ${cmd[*]}" >&2
  OMP_NUM_THREADS="$THREADS" "${cmd[@]}"
  echo
done
echo "table4_tp.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2
