#!/usr/bin/env bash
# --recompute auto --memory-budget BYTES (docs/design.md §4, plan/recompute_auto.hpp): plan and train
# choose the same per-layer plan; a budget at none's predicted peak keeps everything, one byte less
# recomputes something, the least peak fits and one byte less is an error naming it; lower budgets
# never cost fewer recompute FLOPs; the run's measured accounted peak lies within [0.95, 1] of its
# prediction and under the budget, on one rank, on a PP 2 pipeline and under CP 2; every misuse is one line.
set -u
LATTICE=$1; SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/subcommand.sh"
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for i in $(seq 1 800); do echo "In the beginning $i was the word, and every byte was counted."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data > /dev/null 2>&1 || { echo "FAIL: prepare"; exit 1; }
MODEL=(--layers 6 --hidden 128 --heads 4 --seq-len 64 --micro-batch 4 --dropout 0.1 --activation-dtype fp32
       --params-dtype fp32)
PLAN=("${MODEL[@]}" --vocab 256 --data data --threads 1)
json() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
plan_json() {  # plan_json OUT FLAGS...: lattice plan --json into OUT
  local out=$1; shift
  "$LATTICE" plan "${PLAN[@]}" "$@" --json > "$out" 2> "$out.err" || fail "plan $* -> $(cat "$out.err")"
}
PEAK="max(s['accounted_peak_bytes'] for s in d['memory_by_stage'])"

plan_json none.json --recompute none
none=$(json none.json "$PEAK")
plan_json at_none.json --recompute auto --memory-budget "$none"
[ "$(json at_none.json "d['layout']['recompute_plan']")" = nnnnnn ] || fail "a budget at none's peak keeps every layer"
plan_json below_none.json --recompute auto --memory-budget $((none - 1))
[ "$(json below_none.json "d['layout']['recompute_plan']")" != nnnnnn ] || fail "a byte below none's peak recomputes a layer"
least=$(json at_none.json "int(max(d['recompute_auto']['least_peak_bytes']))")
plan_json at_least.json --recompute auto --memory-budget "$least"
[ "$(json at_least.json "int(d['recompute_auto']['peak_bytes'])")" -le "$least" ] || fail "the least peak fits itself"
least_mib=$("$PY" -c "print('%.2f MiB' % ($least / 2**20))")
expect_status plan 1 "the least peak any recompute plan reaches on a rank's layers is $least_mib" \
  "${PLAN[@]}" --recompute auto --memory-budget $((least - 1))
expect_status plan 1 "below a rank's model states and buffers" "${PLAN[@]}" --recompute auto --memory-budget 1MiB

# Three budgets between the least peak and none's: FLOPs never fall as the budget shrinks; train
# chooses what plan chose, and its measured peak is within [0.95, 1] of the prediction, under the budget.
previous=-1
for q in 75 50 25; do
  budget=$((least + (none - least) * q / 100))
  plan_json "auto$q.json" --recompute auto --memory-budget "$budget"
  flops=$(json "auto$q.json" "int(d['recompute_auto']['recompute_flops'])")
  [ "$flops" -ge "$previous" ] || fail "budget $budget: recompute FLOPs $flops below the larger budget's $previous"
  previous=$flops
  want=$(json "auto$q.json" "d['layout']['recompute_plan']")
  "$LATTICE" train "${MODEL[@]}" --data data --steps 2 --threads 1 --recompute auto --memory-budget "$budget" \
    --json > "train$q.jsonl" 2> "train$q.err" || { fail "train at budget $budget: $(tail -1 "train$q.err")"; continue; }
  grep -q "recompute (auto, .*): $want — peak" "train$q.err" || fail "train at $budget prints plan's choice $want: $(cat "train$q.err")"
  "$PY" - "train$q.jsonl" "$budget" <<'PYEOF' || fail "budget $budget: the measured peak"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
budget = int(sys.argv[2])
start = next(r for r in recs if r.get("event") == "start")
summary = next(r for r in recs if r.get("event") == "summary")
predicted = start["predicted_memory"][0]["bytes"]["accounted_peak_bytes"]
measured = summary["memory"]["ranks"][0]["accounted_peak_bytes"]
ok = 0.95 * predicted <= measured <= predicted <= budget
print(f"budget {budget}: predicted {predicted}, measured {measured}" + ("" if ok else " — outside [0.95, 1] or over the budget"))
sys.exit(0 if ok else 1)
PYEOF
done

# A pipeline of two stages: each stage chooses its own layers, both ranks run the same plan.
pp_budget=$(( $(plan_json pp_none.json --recompute none --pipeline-model-parallel-size 2 --gpus 2 &&
               json pp_none.json "$PEAK") * 9 / 10 ))
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --data data --steps 2 --threads 1 \
  --pipeline-model-parallel-size 2 --recompute auto --memory-budget "$pp_budget" --json > pp.jsonl 2> pp.err ||
  fail "PP 2 auto: $(tail -2 pp.err)"
[ "$(grep -c "lattice train: recompute (auto" pp.err)" -eq 1 ] || fail "PP 2: rank 0 alone prints the plan"
"$PY" -c "
import json, sys
s = [json.loads(l) for l in open('pp.jsonl') if '\"summary\"' in l][0]
peaks = [r['accounted_peak_bytes'] for r in s['memory']['ranks']]
sys.exit(0 if len(peaks) == 2 and max(peaks) <= $pp_budget else 1)" || fail "PP 2: every rank's measured peak under $pp_budget"

# Context parallelism 2: both ranks choose what plan --cp 2 chose at a budget between its least peak and
# none's, and each measures within [0.95, 1] of the prediction, under the budget.
plan_json cp_none.json --recompute none --context-parallel-size 2 --cp-comm-type a2a --gpus 2
plan_json cp_auto.json --recompute auto --context-parallel-size 2 --cp-comm-type a2a --gpus 2 --memory-budget 1TiB
cp_least=$(json cp_auto.json "int(max(d['recompute_auto']['least_peak_bytes']))")
cp_budget=$(( (cp_least + $(json cp_none.json "$PEAK")) / 2 ))
plan_json cp_mid.json --recompute auto --context-parallel-size 2 --cp-comm-type a2a --gpus 2 --memory-budget "$cp_budget"
cp_want=$(json cp_mid.json "d['layout']['recompute_plan']")
[ "$cp_want" != nnnnnn ] || fail "CP 2: a budget below none's peak recomputes a layer"
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --data data --steps 2 --threads 1 \
  --context-parallel-size 2 --cp-comm-type a2a --recompute auto --memory-budget "$cp_budget" --json > cp.jsonl 2> cp.err ||
  fail "CP 2 auto: $(tail -2 cp.err)"
grep -q "recompute (auto, .*): $cp_want — peak" cp.err || fail "CP 2: train prints plan's choice $cp_want: $(cat cp.err)"
"$PY" - cp.jsonl "$cp_budget" <<'PYEOF' || fail "CP 2 at $cp_budget: the measured peaks"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
budget = int(sys.argv[2])
predicted = next(r for r in recs if r.get("event") == "start")["predicted_memory"][0]["bytes"]["accounted_peak_bytes"]
ranks = next(r for r in recs if r.get("event") == "summary")["memory"]["ranks"]
ok = len(ranks) == 2 and all(0.95 * predicted <= r["accounted_peak_bytes"] <= predicted <= budget for r in ranks)
print(f"CP 2 budget {budget}: predicted {predicted}, measured {[r['accounted_peak_bytes'] for r in ranks]}")
sys.exit(0 if ok else 1)
PYEOF

# Misuse: one line each, nothing trained.
expect_status train 1 "--recompute auto needs --memory-budget" "${MODEL[@]}" --data data --recompute auto
expect_status train 1 "--memory-budget applies to --recompute auto" "${MODEL[@]}" --data data --memory-budget 1GiB
expect_status train 1 "without --recompute-method, --recompute-layers" "${MODEL[@]}" --data data --recompute auto \
  --memory-budget 1GiB --recompute-layers 2
expect_status train 1 "--pipeline-layers auto" "${MODEL[@]}" --data data --recompute auto --memory-budget 1GiB \
  --pipeline-layers auto
expect_status train 2 "--memory-budget has an unknown unit" "${MODEL[@]}" --data data --recompute auto --memory-budget 12XB
expect_status train 1 "--memory-budget" "${MODEL[@]}" --data data --recompute auto --memory-budget -5
expect_status train 1 "below a rank's model states" "${MODEL[@]}" --data data --recompute auto --memory-budget 1000
expect_status plan 1 "dense models" "${PLAN[@]}" --recompute auto --memory-budget 1GiB --num-experts 4
expect_status plan 1 "--virtual-stages 1" "${PLAN[@]}" --recompute auto --memory-budget 1GiB \
  --pipeline-model-parallel-size 2 --virtual-stages 3 --gpus 2
expect_status plan 1 "ZB-H1" "${PLAN[@]}" --recompute auto --memory-budget 1GiB --pipeline-model-parallel-size 2 \
  --schedule zb-h1 --gpus 2
expect_status plan 1 "takes the place of --gpu-memory" "${PLAN[@]}" --recompute auto --memory-budget 1GiB --gpu-memory 2GiB
expect_status plan 1 "--memory-budget applies to --recompute auto and --search" "${PLAN[@]}" --memory-budget 1GiB

test "$fails" -eq 0 && echo ok
