#!/usr/bin/env bash
# ZeRO and mixed precision on 4 data-parallel ranks (oversubscribing this machine's cores): per-rank
# model-state bytes measured by the tracking allocator beside docs/design.md §8's formula, the transient
# gather/scatter peak, DP bytes per step beside 2Ψ / 3Ψ, the time a rank blocked on ZeRO's collectives
# in the last step (median rank: what prefetch and overlap did not hide) and the step time (relative:
# 4 ranks share the cores). One run per configuration, same model, data and seed.
#
# Usage: bench/zero.sh [build-dir]   Env: LAYERS (8), HIDDEN (256), STEPS (4), KEEP=1 keeps the scratch dir.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd)/lattice"
[[ -x "$LATTICE" ]] || { echo "zero.sh: no $LATTICE (build first or pass the build dir)" >&2; exit 2; }
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-zero.XXXXXX")"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"
for i in $(seq 1 2000); do echo "In the beginning $i the ranks divided the states among them."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
MODEL=(--data data --layers "${LAYERS:-8}" --hidden "${HIDDEN:-256}" --heads 8 --seq-len 128 --micro-batch 2
       --global-batch 8 --steps "${STEPS:-4}" --threads 1 --json)
configs=("zero0:--zero 0" "zero1:--zero 1" "zero2:--zero 2" "zero3:--zero 3"
         "zero3_no_prefetch:--zero 3 --zero-prefetch off"
         "bf16:--params-dtype bf16" "bf16_zero1:--params-dtype bf16 --zero 1"
         "bf16_zero2:--params-dtype bf16 --zero 2" "bf16_zero3:--params-dtype bf16 --zero 3")
for c in "${configs[@]}"; do
  name=${c%%:*}; flags=${c#*:}
  # shellcheck disable=SC2086
  mpirun --oversubscribe -np 4 "$LATTICE" train "${MODEL[@]}" $flags > "$name.jsonl" 2> "$name.err" ||
    { echo "zero.sh: $name failed: $(tail -1 "$name.err")" >&2; exit 1; }
done
"$PY" - "${configs[@]%%:*}" <<'PYEOF'
import json, sys
print("| run (4 DP ranks) | params | grads | optimizer | total / formula | transient peak | DP bytes/step (formula) | DP wait ms | step s |")
print("|---|---|---|---|---|---|---|---|---|")
mib = lambda b: "%.2f MiB" % (b / 2**20)
for name in sys.argv[1:]:
    lines = [json.loads(l) for l in open(name + ".jsonl")]
    steps, summary = [l for l in lines if l.get("event") == "step"], lines[-1]
    r = summary["memory"]["ranks"][0]; c = summary["comm"]["ranks"][0]
    m, f = r["model_state_bytes"], r["model_state_bytes_formula"]
    step_s = sorted(s["step_s"] for s in steps[1:])[len(steps[1:]) // 2]
    wait_ms = 1e3 * sorted(x["dp_wait_s"] for x in summary["comm"]["ranks"])[len(summary["comm"]["ranks"]) // 2]
    print("| %s | %s | %s | %s | %.4f | %s | %s (%s) | %.0f | %.3f |" % (
        name, mib(m["params"]), mib(m["grads"]), mib(m["optimizer"]), sum(m.values()) / sum(f.values()),
        mib(r["transient_peak_bytes"]), mib(c["dp"]), mib(c["dp_formula"]), wait_ms, step_s))
PYEOF
