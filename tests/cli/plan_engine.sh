#!/usr/bin/env bash
# The planner against the engine on small configs: model-state bytes equal what the tracking
# allocator measured; per-layer activation bytes equal the engine's formula column exactly and
# its measurement up to the small buffers docs/design.md §3 leaves out (LayerNorm mean/rstd).
set -euo pipefail
LATTICE=$1; SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH"

for i in $(seq 1 300); do printf 'line %04d: the quick brown fox jumps\n' "$i"; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2> /dev/null

model=(--layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2)
for recompute in none selective full; do
  for dtype in fp32 bf16; do
    "$LATTICE" train --data data "${model[@]}" --recompute "$recompute" --activation-dtype "$dtype" \
      --steps 1 --threads 2 --json 2> /dev/null | tail -1 > "train_${recompute}_${dtype}.json"
    "$LATTICE" plan "${model[@]}" --recompute "$recompute" --activation-dtype "$dtype" --json \
      > "plan_${recompute}_${dtype}.json"
    python3 - "train_${recompute}_${dtype}.json" "plan_${recompute}_${dtype}.json" "$recompute $dtype" <<'PY'
import json, sys
engine = json.load(open(sys.argv[1]))["memory"]["ranks"][0]
plan = json.load(open(sys.argv[2]))
what = sys.argv[3]
states = engine["model_state_bytes"]
# 16 bytes a parameter either way; a bf16 run's 16-bit compute copy is reported apart.
assert states["params"] + states["grads"] + states["optimizer"] == plan["model_state_bytes"], (what, states, plan)
assert engine["activation_bytes_per_layer_formula"][0] == plan["activation_bytes_per_layer"], what
measured = engine["activation_bytes_per_layer"][0]
assert abs(measured - plan["activation_bytes_per_layer"]) <= 0.01 * measured, (what, measured, plan["activation_bytes_per_layer"])
print("ok:", what, measured, plan["activation_bytes_per_layer"])
PY
  done
done
