#!/usr/bin/env bash
# Uneven pipeline stages (--pipeline-layers, Megatron's first/last-stage counts, docs/design.md §6):
# any partition of L layers trains the one-rank model (losses 1e-5, weights 1e-5) with TP + SP, DP +
# ZeRO and interleaving; a checkpoint of one partition resumes under another; each stage keeps its
# own layers' activations and parameters; bad counts are one clear line.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
MODEL=("${MODEL[@]}" --layers 5)

run one 1
run pp2_2_3 2 --pipeline-model-parallel-size 2 --pipeline-layers 2,3
run pp2_4_1 2 --pipeline-model-parallel-size 2 --pipeline-layers 4,1 --schedule gpipe
run pp4_first_last 4 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2 \
  --decoder-last-pipeline-num-layers 1
run tp2_pp2_sp_3_2 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \
  --pipeline-layers 3,2 --recompute selective
run pp2_dp2_zero2_1_4 4 --pipeline-model-parallel-size 2 --pipeline-layers 1,4 --zero 2
run pp2_interleaved 2 --pipeline-model-parallel-size 2 --schedule interleaved --virtual-stages 2 \
  --pipeline-layers 1,2,1,1
for name in pp2_2_3 pp2_4_1 pp4_first_last tp2_pp2_sp_3_2 pp2_dp2_zero2_1_4 pp2_interleaved; do
  check "$name trains the one-rank model" compare "$name"
done

# Each stage keeps its own layers: stage r of 1F1B holds p − r micro-batches of its layers (the
# formula's stage_layer_bytes), and its parameters are its layers' (plus the embeddings at the ends).
check "stage activation peaks follow their layer counts (2,3: 2 × 2 layers, 1 × 3 layers)" "$PY" -c "
import json, sys
ranks = [json.loads(l) for l in open('pp2_2_3.jsonl')][-1]['memory']['ranks']
for r in ranks:
    per = r['activation_bytes_per_layer_formula']
    want = (2 if r['pp_rank'] == 0 else 1) * sum(per)
    got = r['activation_peak_bytes'] - (0 if r['pp_rank'] == 0 else r['activation_bytes_outside_layers'])
    print(r['pp_rank'], len(per), got, want, got / want)
    if len(per) != (2 if r['pp_rank'] == 0 else 3) or not (want <= got <= 1.03 * want): sys.exit('stage %d: %d vs %d' % (r['pp_rank'], got, want))
"
check "stage parameters follow the layer counts (4,1)" "$PY" -c "
import json, sys
ranks = {r['pp_rank']: r['model_state_bytes']['params'] for r in [json.loads(l) for l in open('pp2_4_1.jsonl')][-1]['memory']['ranks']}
h, v, s = 64, 256, 32
layer = 4 * (12 * h * h + 13 * h)
want0, want1 = 4 * layer + 4 * (v * h + s * h), layer + 4 * (v * h + 2 * h)
print(ranks, want0, want1)
sys.exit(0 if ranks[0] == want0 and ranks[1] == want1 else 1)"

# A checkpoint stores weights by name in the one-rank layout: saved under 2,3, resumed under 4,1
# and on one rank, both continue the uninterrupted run.
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --steps 2 --pipeline-model-parallel-size 2 \
  --pipeline-layers 2,3 --save ck_half > half.jsonl 2> half.err
check "saved under 2,3" test -f ck_half/model.safetensors
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --pipeline-model-parallel-size 2 \
  --pipeline-layers 4,1 --resume ck_half > resumed_4_1.jsonl 2> resumed_4_1.err
check "resumed under 4,1: the uninterrupted run's steps 3-4" continues pp2_2_3.jsonl resumed_4_1.jsonl 1e-5
"$LATTICE" train "${MODEL[@]}" --resume ck_half > resumed_one.jsonl 2> resumed_one.err
check "resumed on one rank: the uninterrupted run's steps 3-4" continues one.jsonl resumed_one.jsonl 1e-5
check "trainer.json records the partition" grep -q '"pipeline_layers": "2,3"' ck_half/trainer.json

# The planner plans the same partition: per-stage memory follows the counts.
"$LATTICE" plan --layers 5 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 8 \
  --pipeline-model-parallel-size 2 --pipeline-layers 4,1 --json > plan_4_1.json 2> plan.err
check "plan --pipeline-layers 4,1: stage 0 holds more than stage 1" "$PY" -c "
import json, sys
st = json.load(open('plan_4_1.json'))['memory_by_stage']
a = [s['activations'] for s in st]
print(a)
sys.exit(0 if len(a) == 2 and a[0] > 4 * a[1] / 2 else 1)"

# --pipeline-layers auto: the planner's partition (time model + per-category memory), the same in
# train and plan, printed once; it trains the one-rank model; a limit nothing fits is one line.
run pp2_auto 2 --pipeline-model-parallel-size 2 --pipeline-layers auto
check "pp2_auto trains the one-rank model" compare pp2_auto
"$LATTICE" plan --layers 5 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 8 \
  --pipeline-model-parallel-size 2 --pipeline-layers auto --hardware cpu --json > plan_auto.json 2> plan.err
counts=$("$PY" -c "import json; print(json.load(open('plan_auto.json'))['layout']['pipeline_layers'])")
check "train and plan choose the same partition ($counts)" grep -q "pipeline layers (auto): $counts " pp2_auto.err
check "printed once" test "$(grep -c 'pipeline layers (auto)' pp2_auto.err)" -eq 1
check "the partition is uneven for 5 layers on 2 stages" test "$counts" = 3,2 -o "$counts" = 2,3
bad_layout "auto under a limit nothing fits" "the smallest peak is .* at [0-9],[0-9]" 2 --pipeline-model-parallel-size 2 \
  --pipeline-layers auto --pipeline-memory-limit 1MB
# A limit that does not parse as a size: a usage error, exit 2, on two ranks too (it was read where one
# rank's refusal stops all with exit 1), said once.
timeout 60 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --pipeline-model-parallel-size 2 \
  --pipeline-layers auto --pipeline-memory-limit 80XB > bad.out 2> bad.err
status=$?
check "a limit of no known unit, on two ranks: exit 2 (got $status), one line naming it" \
  bash -c "[ $status -eq 2 ] && [ \$(grep -c error bad.err) -eq 1 ] && grep -q \"unknown unit 'xb'\" bad.err"
bad_layout "auto with interleaving" "virtual-stages 1" 2 --pipeline-model-parallel-size 2 --pipeline-layers auto \
  --schedule interleaved --virtual-stages 2
expect_error "--hardware without auto" "auto only" train "${MODEL[@]}" --hardware cpu
expect_error "plan: auto under a limit nothing fits" "no partition of 5 layers" plan --layers 5 --hidden 64 --heads 4 \
  --seq-len 32 --pipeline-model-parallel-size 2 --pipeline-layers auto --gpu-memory 1MB

# Measured layer costs (lattice bench --layer-costs): a layer's forward, input and weight passes and the
# output layer at the run's shape; --hardware FILE hands them to the partitioner in place of the time
# model. A file whose output layer costs 100 layers leaves the last stage one layer.
SHAPE=(--hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2)
"$LATTICE" bench --seconds 0.05 --layer-costs "${SHAPE[@]}" --json > hw.json 2> hw.err
check "bench --layer-costs: positive times at the shape" "$PY" -c "
import json, sys
c = json.load(open('hw.json'))['layer_costs']
print(c)
sys.exit(0 if all(c[k] > 0 for k in ('forward_s', 'backward_input_s', 'backward_weight_s', 'head_s'))
         and c['hidden'] == 64 and c['micro_batch'] == 2 and c['vocab'] == 256 else 1)"
"$PY" -c "
import json
d = json.load(open('hw.json'))
d['layer_costs']['head_s'] = 100 * d['layer_costs']['forward_s']
json.dump(d, open('heavy_head.json', 'w'))"
PLAN_AUTO=(plan --layers 5 "${SHAPE[@]}" --global-batch 8 --activation-dtype fp32 --params-dtype fp32
           --pipeline-model-parallel-size 2 --pipeline-layers auto --json)
"$LATTICE" "${PLAN_AUTO[@]}" --hardware heavy_head.json > heavy.json 2> heavy.err
check "measured costs used: a heavy output layer leaves the last stage one layer" "$PY" -c "
import json, sys
sys.exit(0 if json.load(open('heavy.json'))['layout']['pipeline_layers'] == '4,1' else 1)"
check "... and plan says where the costs came from" grep -q "from measured layer costs" heavy.err
"$LATTICE" "${PLAN_AUTO[@]}" --hardware heavy_head.json --seq-len 64 > other.json 2> other.err
check "costs of another shape are not used" grep -q "the time model's layer costs" other.err
run pp2_auto_measured 2 --pipeline-model-parallel-size 2 --pipeline-layers auto --hardware hw.json
check "train partitions from the measured costs" grep -q "(measured layer costs)" pp2_auto_measured.err
check "pp2_auto_measured trains the one-rank model" compare pp2_auto_measured
expect_error "--layer-costs with a parallel layout" "one process" bench --seconds 0.05 --layer-costs \
  --tensor-model-parallel-size 2 "${SHAPE[@]}"

# Bad counts: one line each, before any rank starts work.
expect_error "counts not adding up to L" "adds up to 4 layers" train "${MODEL[@]}" --pipeline-layers 4
expect_error "a count that is not a number" "positive layer counts" train "${MODEL[@]}" --pipeline-layers 2,x
expect_error "a signed count" "positive layer counts" train "${MODEL[@]}" --pipeline-layers +2,3
expect_error "plan: auto for an MoE model" "Mixture-of-Experts" plan --layers 5 --hidden 64 --heads 4 --seq-len 32 \
  --num-experts 4 --pipeline-model-parallel-size 2 --pipeline-layers auto
expect_error "an empty stage" "positive layer counts" train "${MODEL[@]}" --pipeline-layers 0,5
expect_error "two lists at once" "pass one" train "${MODEL[@]}" --pipeline-layers 2,3 \
  --decoder-first-pipeline-num-layers 2
expect_error "first/last counts without a pipeline" "pipeline-model-parallel-size" train "${MODEL[@]}" \
  --decoder-first-pipeline-num-layers 2
expect_error "one stage given two counts" "gives 2 stages" train "${MODEL[@]}" --pipeline-layers 2,3
expect_error "plan: counts for another p" "gives 2 stages" plan --layers 5 --hidden 64 --heads 4 --seq-len 32 \
  --pipeline-model-parallel-size 4 --pipeline-layers 2,3
bad_layout "three counts for two stages" "gives 3 stages" 2 --pipeline-model-parallel-size 2 --pipeline-layers 1,2,2
bad_layout "two counts not adding up to L" "adds up to 6 layers" 2 --pipeline-model-parallel-size 2 --pipeline-layers 3,3
bad_layout "first/last leaving an uneven middle" "spread evenly" 4 --pipeline-model-parallel-size 4 \
  --decoder-first-pipeline-num-layers 1
bad_layout "5 layers, even stages" "pipeline-layers" 2 --pipeline-model-parallel-size 2
# A first or last stage given 0 layers was read as not given (even stages, exit 0); first + last on
# two stages not adding up to L was said as layers "which do not spread evenly over the other 0 stages".
bad_layout "a first stage of 0 layers" "decoder-first-pipeline-num-layers must be between 1 and" 2 \
  --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 0
bad_layout "first + last short of L on two stages" "(1 + 1) must add up to --layers 5: the 2 stages are the first and the last" 2 \
  --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
