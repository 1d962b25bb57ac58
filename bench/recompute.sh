#!/usr/bin/env bash
# Recompute, chosen (issue 19): for each shape, the accounted peak and step time of every recompute
# mode on one rank — none, selective, full, block L/2, uniform segments of the divisor nearest √L and
# of the best length, and `--recompute auto` at three memory budgets a quarter, half and three
# quarters of the way from full's predicted peak to none's. Each row: the plan the run kept (one
# character a layer, `n s c ~`), the predicted accounted peak (`lattice plan --json`) beside the
# measured one (the run's summary), its activations, the median step after the first, and the share
# of the step spent recomputing (the trace's split) beside the planner's.
#
# Shapes (SHAPES, default "gpt2s deep deep_fused"): gpt2s = 12 layers, h 768, 12 heads, s 256;
# deep = 48 layers, h 256, 8 heads, s 256; deep_fused = deep with --attention fused (where two-layer
# segments beat full recompute). All: vocab 8192, micro-batch 4, fp32, dropout 0.1, 2 threads.
#
# Usage: bench/recompute.sh [path/to/lattice]   Env: SHAPES, STEPS (4, the first untimed), ROWS (a subset
# by name), KEEP=1 keeps the scratch directory.
# Exit status 1 if a measured accounted peak is above its prediction or below 0.95 of it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-$ROOT/build/lattice}"
[[ -x "$LATTICE" ]] || { echo "recompute.sh: no lattice binary at $LATTICE" >&2; exit 2; }
SHAPES=${SHAPES:-"gpt2s deep deep_fused"} STEPS=${STEPS:-4}
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lattice-recompute.XXXXXX")
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT
random_token_file "$SCRATCH/data" 300000 8192 4321
echo "recompute.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2

shape_flags() {
  case $1 in
    gpt2s)      echo "--layers 12 --hidden 768 --heads 12 --seq-len 256" ;;
    deep)       echo "--layers 48 --hidden 256 --heads 8 --seq-len 256" ;;
    deep_fused) echo "--layers 48 --hidden 256 --heads 8 --seq-len 256 --attention fused" ;;
    *) echo "recompute.sh: SHAPES may hold gpt2s, deep and deep_fused (got $1)" >&2; exit 2 ;;
  esac
}
layers_of() { shape_flags "$1" | awk '{print $2}'; }
# The divisor of L nearest √L (the lower one on a tie).
nearest_root_divisor() {
  "$PY" -c "import math,sys; L=int(sys.argv[1]); print(min((k for k in range(1, L + 1) if L % k == 0), key=lambda k: (abs(k - math.sqrt(L)), k)))" "$1"
}
plan_peak() {  # plan_peak FILE: the largest stage's predicted accounted peak
  "$PY" -c "import json,sys; print(max(s['accounted_peak_bytes'] for s in json.load(open(sys.argv[1]))['memory_by_stage']))" "$1"
}
# The best segment length the planner reports for full recompute (segment_table's least), else 1.
best_segment() {
  "$PY" -c "
import json,sys
d = json.load(open(sys.argv[1]))
t = d.get('segment_table') or []
rows = t[0].get('rows', []) if t else []
best = [r for r in rows if r.get('least')]
print(best[0]['k'] if best else 1)" "$1" 2>/dev/null || echo 1
}

rows_all=()
for shape in $SHAPES; do
  # shellcheck disable=SC2046
  set -- $(shape_flags "$shape")
  MODEL=("$@" --vocab 8192 --micro-batch 4 --global-batch 4 --dropout 0.1 --activation-dtype fp32 --params-dtype fp32)
  L=$(layers_of "$shape")
  root=$(nearest_root_divisor "$L")
  # The plan sees the run as train does: its token files and its threads (the GEMM scratchpads are per thread).
  PLAN=("${MODEL[@]}" --data "$SCRATCH/data" --threads 2)
  "$LATTICE" plan "${PLAN[@]}" --json > "$SCRATCH/$shape.none.plan.json"
  "$LATTICE" plan "${PLAN[@]}" --recompute full --json > "$SCRATCH/$shape.full.plan.json"
  best=$(best_segment "$SCRATCH/$shape.full.plan.json")
  none_peak=$(plan_peak "$SCRATCH/$shape.none.plan.json")
  full_peak=$(plan_peak "$SCRATCH/$shape.full.plan.json")
  specs=("none:--recompute none" "selective:--recompute selective" "full:--recompute full"
         "block$((L / 2)):--recompute full --recompute-method block --recompute-layers $((L / 2))"
         "uniform$root:--recompute full --recompute-method uniform --recompute-layers $root")
  [[ $best != "$root" && $best != 1 ]] && specs+=("uniform$best:--recompute full --recompute-method uniform --recompute-layers $best")
  for q in 25 50 75; do
    budget=$(( full_peak + (none_peak - full_peak) * q / 100 ))
    specs+=("auto$q:--recompute auto --memory-budget $budget")
  done
  for spec in "${specs[@]}"; do
    name="$shape.${spec%%:*}"
    [[ -z "${ROWS:-}" || " $ROWS " == *" ${spec%%:*} "* ]] || continue
    read -r -a flags <<< "${spec#*:}"
    if ! "$LATTICE" plan "${PLAN[@]}" "${flags[@]}" --json > "$SCRATCH/$name.plan.json" 2> "$SCRATCH/$name.plan.err"; then
      echo "recompute.sh: plan $name: $(tail -1 "$SCRATCH/$name.plan.err")" >&2; continue
    fi
    echo "+ lattice train ${MODEL[*]} ${flags[*]}" >&2
    OMP_NUM_THREADS=2 "$LATTICE" train --data "$SCRATCH/data" "${MODEL[@]}" "${flags[@]}" --threads 2 --steps "$STEPS" \
      --lr-schedule constant --warmup 0 --json --trace "$SCRATCH/$name.trace.json" \
      > "$SCRATCH/$name.jsonl" 2> "$SCRATCH/$name.err" ||
      { echo "recompute.sh: train $name: $(tail -1 "$SCRATCH/$name.err")" >&2; continue; }
    "$LATTICE" schedule --from-trace "$SCRATCH/$name.trace.json" --split --json > "$SCRATCH/$name.split.json" 2>/dev/null || true
    rows_all+=("$name:${spec#*:}")
  done
done
echo "recompute.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" "${rows_all[@]}" <<'PYEOF'
import json, os, statistics, sys
scratch, rows = sys.argv[1], sys.argv[2:]
mib = lambda b: "%.1f" % (b / 2**20)
def lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []
print("| shape | row | flags | plan | peak predicted | measured | ratio | activations | step s | recompute share measured / predicted |")
print("|---|---|---|---|---|---|---|---|---|---|")
bad = 0
for row in rows:
    name, flags = row.split(":", 1)
    shape, mode = name.split(".", 1)
    plan = json.load(open(os.path.join(scratch, name + ".plan.json")))
    recs = lines(os.path.join(scratch, name + ".jsonl"))
    start = next((r for r in recs if r.get("event") == "start"), {})
    summary = next((r for r in recs if r.get("event") == "summary"), None)
    steps = [r["step_s"] for r in recs if r.get("event") == "step" and r["step"] > 1]
    if not summary or not steps:
        print(f"| {shape} | {mode} | `{flags}` | (no run) | | | | | | |"); bad += 1; continue
    rank = summary["memory"]["ranks"][0]
    predicted = max(s["accounted_peak_bytes"] for s in plan["memory_by_stage"])
    measured = rank["accounted_peak_bytes"]
    ratio = measured / predicted
    bad += ratio > 1.0 or ratio < 0.95
    text = start.get("layout", {}).get("recompute_plan") or plan["layout"]["recompute_plan"]
    split = lines(os.path.join(scratch, name + ".split.json"))
    share_m = "–"
    if split:
        r = split[0]["ranks"][0]
        share_m = "%.1f%%" % (100 * r["recompute_s"] / r["step_s"])
    t = plan.get("time_breakdown_s", {})
    share_p = "%.1f%%" % (100 * t.get("recompute", 0) / plan["predicted_iteration_s"]) if plan.get("predicted_iteration_s") else "–"
    print(f"| {shape} | {mode} | `{flags}` | `{text}` | {mib(predicted)} MiB | {mib(measured)} MiB | {ratio:.3f} | "
          f"{mib(rank['activation_peak_bytes'])} MiB | {statistics.median(steps):.3f} | {share_m} / {share_p} |")
print(f"\n{len(rows) - bad} of {len(rows)} rows with the measured peak within [0.95, 1] of the prediction")
sys.exit(1 if bad else 0)
PYEOF
