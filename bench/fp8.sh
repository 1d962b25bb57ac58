#!/usr/bin/env bash
# --activation-compression fp8 against uncompressed training on the King James Bible (issue 15):
# the same model, seed and batches, fp32 activations; prints the training loss every 50 steps, the
# validation loss at the end, the kept bytes per layer (measured beside the formula) and the median
# step time of each run (consecutive runs on a shared host: indicative, not a measured ratio).
#
# Usage: bench/fp8.sh [build-dir]   Env: STEPS (300), LAYERS (4), HIDDEN (256), SEQ (256), MICRO (8)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd)/lattice"
[[ -x "$LATTICE" ]] || { echo "fp8.sh: no $LATTICE (build first or pass the build dir)" >&2; exit 2; }
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
command -v bible > /dev/null || { echo "fp8.sh: needs the bible-kjv package (scripts/install-deps.sh)" >&2; exit 2; }
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-fp8.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"
bible "Gen1:1-Rev22:21" > kjv.txt
"$LATTICE" prepare --input kjv.txt --out kjv 2>/dev/null
MODEL=(--data kjv --layers "${LAYERS:-4}" --hidden "${HIDDEN:-256}" --heads 8 --seq-len "${SEQ:-256}"
       --micro-batch "${MICRO:-8}" --global-batch "${MICRO:-8}" --dropout 0.1 --lr 1e-3 --warmup 30
       --steps "${STEPS:-300}" --eval-every "${STEPS:-300}" --threads 2 --json)
for mode in none fp8; do
  "$LATTICE" train "${MODEL[@]}" --activation-compression "$mode" > "$mode.jsonl" 2> "$mode.err" ||
    { echo "fp8.sh: the $mode run failed: $(tail -1 "$mode.err")" >&2; exit 1; }
done
"$PY" - <<'PYEOF'
import json, statistics
runs = {m: [json.loads(l) for l in open(m + ".jsonl")] for m in ("none", "fp8")}
steps = {m: [e for e in r if e.get("event") == "step"] for m, r in runs.items()}
evals = {m: [e for e in r if e.get("event") == "eval"] for m, r in runs.items()}
print("| step | loss, uncompressed | loss, fp8 kept | difference |")
print("|---|---|---|---|")
for i in range(0, len(steps["none"]), 50):
    a, b = steps["none"][i]["loss"], steps["fp8"][i]["loss"]
    print("| %d | %.4f | %.4f | %+.4f |" % (steps["none"][i]["step"], a, b, b - a))
a, b = steps["none"][-1]["loss"], steps["fp8"][-1]["loss"]
print("| %d | %.4f | %.4f | %+.4f |" % (steps["none"][-1]["step"], a, b, b - a))
mean = lambda m: statistics.mean(e["loss"] for e in steps[m][-50:])
print()
print("mean loss over the last 50 steps: uncompressed %.4f, fp8 %.4f (%+.2f%%)" % (mean("none"), mean("fp8"), 100 * (mean("fp8") / mean("none") - 1)))
for m in ("none", "fp8"):
    if evals[m]: print("validation loss, %s: %.4f" % (m, evals[m][-1]["loss"]))
for m in ("none", "fp8"):
    r = runs[m][-1]["memory"]["ranks"][0]
    print("%s: kept per layer %d bytes (formula %d), activation peak %.2f MiB, median step %.1f ms" % (
        m, r["activation_bytes_per_layer"][0], r["activation_bytes_per_layer_formula"][0], r["activation_peak_bytes"] / 2**20,
        1000 * statistics.median(e["step_s"] for e in steps[m][5:])))
PYEOF
