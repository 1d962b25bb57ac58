#!/usr/bin/env bash
# Two builds of lattice against each other, interleaved in one run: the step of bench/speed.sh's
# GPT-2-small shape (fp32 and bf16 activations, one process, 2 threads) and, with LAYOUTS=1, a small
# model under DP 2 with ZeRO 0 and 3 and bf16 weights (mpirun -np 2). Each round runs every case
# with the old binary and then the new one; the figures are median step times (the first step of
# each run is warm-up) and new / old (below 1.03 = no slowdown beyond 3%).
#
# Usage: bench/ab_speed.sh OLD_LATTICE NEW_LATTICE
# Env:   ROUNDS (default 3), STEPS (default 4), THREADS (default 2), LAYOUTS (default 0), VOCAB
#        (default 8192; GPT-2's 50304 times its vocabulary-wide head too).
set -euo pipefail
OLD=${1:?usage: ab_speed.sh OLD_LATTICE NEW_LATTICE} NEW=${2:?usage: ab_speed.sh OLD_LATTICE NEW_LATTICE}
for b in "$OLD" "$NEW"; do [[ -x "$b" ]] || { echo "ab_speed.sh: $b is not an executable" >&2; exit 2; }; done
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-4} THREADS=${THREADS:-2} LAYOUTS=${LAYOUTS:-0} VOCAB=${VOCAB:-8192}
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lattice-ab.XXXXXX"); trap 'rm -rf "$SCRATCH"' EXIT

random_token_file "$SCRATCH/data" 300000 "$VOCAB" 8192

BIG=(--layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab "$VOCAB" --micro-batch 4 --dropout 0)
SMALL=(--layers 4 --hidden 256 --heads 4 --seq-len 128 --vocab "$VOCAB" --micro-batch 4 --global-batch 8 --dropout 0)
COMMON=(--data "$SCRATCH/data" --steps "$STEPS" --lr-schedule constant --warmup 0 --json)
MPI=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1)
cases=("fp32" "bf16")
[[ "$LAYOUTS" == 1 ]] && cases+=("dp2" "dp2_zero3" "dp2_bf16w")
run() {  # $1 binary tag, $2 case, $3 round
  local bin=$OLD; [[ $1 == new ]] && bin=$NEW
  local out="$SCRATCH/$1_$2_$3.jsonl"
  case $2 in
    fp32) "$bin" train "${COMMON[@]}" "${BIG[@]}" --threads "$THREADS" >"$out" ;;
    bf16) "$bin" train "${COMMON[@]}" "${BIG[@]}" --threads "$THREADS" --activation-dtype bf16 >"$out" ;;
    dp2) "${MPI[@]}" "$bin" train "${COMMON[@]}" "${SMALL[@]}" --threads 1 >"$out" ;;
    dp2_zero3) "${MPI[@]}" "$bin" train "${COMMON[@]}" "${SMALL[@]}" --threads 1 --zero 3 >"$out" ;;
    dp2_bf16w) "${MPI[@]}" "$bin" train "${COMMON[@]}" "${SMALL[@]}" --threads 1 --params-dtype bf16 >"$out" ;;
  esac 2>/dev/null
}
echo "ab_speed.sh: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); old $OLD, new $NEW" >&2
for r in $(seq 1 "$ROUNDS"); do
  for c in "${cases[@]}"; do run old "$c" "$r"; run new "$c" "$r"; done
done
"$PY" - "$SCRATCH" "$ROUNDS" "${cases[@]}" <<'PYEOF'
import json, os, statistics, sys
scratch, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def steps(tag, case):
    out = []
    for r in range(1, rounds + 1):
        ev = [json.loads(l) for l in open(os.path.join(scratch, f"{tag}_{case}_{r}.jsonl")) if l.strip()]
        out += [e["step_s"] for e in ev if e.get("event") == "step"][1:]
    return out
print(f"{'case':<12}{'old median s':>14}{'new median s':>14}{'new / old':>11}")
worst = 0
for c in cases:
    o, n = statistics.median(steps("old", c)), statistics.median(steps("new", c))
    worst = max(worst, n / o)
    print(f"{c:<12}{o:>14.4f}{n:>14.4f}{n / o:>11.3f}")
print(f"slowest ratio {worst:.3f}: {'no slowdown beyond 3%' if worst <= 1.03 else 'SLOWER by more than 3%'}")
PYEOF
