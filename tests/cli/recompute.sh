#!/usr/bin/env bash
# Uniform segments (--recompute full --recompute-method uniform --recompute-layers k, docs/design.md
# §3): one rank trains byte-identical weights to no recompute; TP + SP, PP 1F1B, interleaved, ZB-H1,
# DP ZeRO-3 agree with the one-rank model (losses and weights 1e-5), PipeDream-2BW and EP with and
# without segments are byte-identical; each layer keeps its input or nothing, as the formula says; the
# traffic formulas count a segment's re-gathers and re-run conjugates; every misuse is one line.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
MODEL=("${MODEL[@]}" --layers 4)
UNIFORM2=(--recompute full --recompute-method uniform --recompute-layers 2)

run one 1
run one_uniform2 1 "${UNIFORM2[@]}"
run one_plan 1 --recompute-plan c~sn
check "uniform 2 on one rank: byte-identical weights to no recompute" \
  cmp ck_one/model.safetensors ck_one_uniform2/model.safetensors
check "uniform 2 on one rank: the same losses, bit for bit" test \
  "$(grep -o '"loss":[^,]*' one.jsonl)" = "$(grep -o '"loss":[^,]*' one_uniform2.jsonl)"
check "--recompute-plan c~sn: byte-identical weights" cmp ck_one/model.safetensors ck_one_plan/model.safetensors

run tp2_sp 2 --tensor-model-parallel-size 2 --sequence-parallel "${UNIFORM2[@]}"
run pp2_1f1b 2 --pipeline-model-parallel-size 2 "${UNIFORM2[@]}"
run pp2_zb 2 --pipeline-model-parallel-size 2 --schedule zb-h1 "${UNIFORM2[@]}"
run dp2_zero3 2 --zero 3 "${UNIFORM2[@]}"
for name in tp2_sp pp2_1f1b pp2_zb dp2_zero3; do
  check "$name with uniform 2 trains the one-rank model" compare "$name"
done

# PipeDream-2BW (updates one step late) and EP (the MoE model) against the same layout without segments.
run pp2_2bw 2 --pipeline-model-parallel-size 2 --schedule pipedream-2bw
run pp2_2bw_uniform2 2 --pipeline-model-parallel-size 2 --schedule pipedream-2bw "${UNIFORM2[@]}"
check "pipedream-2bw: uniform 2 byte-identical to none" cmp ck_pp2_2bw/model.safetensors ck_pp2_2bw_uniform2/model.safetensors
MOE=(--num-experts 4 --moe-layer-freq 2 --ep 2)
run ep2 2 "${MOE[@]}"
run ep2_uniform2 2 "${MOE[@]}" "${UNIFORM2[@]}"
check "EP 2: a segment over an MoE layer is byte-identical to none" cmp ck_ep2/model.safetensors ck_ep2_uniform2/model.safetensors

# Interleaved: 8 layers, 2 a chunk, one segment each.
MODEL_SAVED=("${MODEL[@]}")
MODEL=("${MODEL[@]}" --layers 8)
run one8 1
run pp2_interleaved 2 --pipeline-model-parallel-size 2 --schedule interleaved --virtual-stages 2 "${UNIFORM2[@]}"
check "interleaved with uniform 2 trains the one-rank model" compare pp2_interleaved one8
MODEL=("${MODEL_SAVED[@]}")

check "each layer keeps its input (checkpoint) or nothing (in a segment), as the formula says" "$PY" -c "
import json, sys
for f in ['one_uniform2.jsonl', 'tp2_sp.jsonl', 'pp2_1f1b.jsonl', 'dp2_zero3.jsonl', 'one_plan.jsonl']:
    d = [json.loads(l) for l in open(f)][-1]
    for r in d['memory']['ranks']:
        kept, fo = r['activation_bytes_per_layer'], r['activation_bytes_per_layer_formula']
        print(f, r['rank'], kept, fo)
        for m, x in zip(kept, fo):
            if not (x <= m <= 1.02 * x): sys.exit('%s rank %d: %d vs %d' % (f, r['rank'], m, x))
one = [json.loads(l) for l in open('one_uniform2.jsonl')][-1]['memory']['ranks'][0]['activation_bytes_per_layer']
sys.exit(0 if one[1] == 0 and one[3] == 0 and one[0] == one[2] == 32 * 2 * 64 * 4 else 'one_uniform2: %s' % one)"
check "conjugate bytes count the re-run's, DP bytes ZeRO-3's re-gathers" "$PY" -c "
import json, sys
for f in ['tp2_sp.jsonl', 'dp2_zero3.jsonl']:
    for r in [json.loads(l) for l in open(f)][-1]['comm']['ranks']:
        print(f, r['rank'], r['tp_conjugate'], r['tp_conjugate_formula'], r['dp'], r['dp_formula'])
        if abs(r['tp_conjugate'] - r['tp_conjugate_formula']) > 1: sys.exit('%s: tp %s' % (f, r))
        if not (0 <= r['dp'] - r['dp_formula'] <= 64): sys.exit('%s: dp %s' % (f, r))
"

# The planner takes the same flags and shows each stage's segment lengths.
"$LATTICE" plan --layers 12 --hidden 768 --heads 12 --seq-len 256 --micro-batch 4 --global-batch 4 --gpus 1 \
  "${UNIFORM2[@]}" > plan.txt 2> plan.err
check "plan with uniform 2: exit 0" test $? -eq 0
check "plan shows the segment table with k* and Chen's √n" grep -q "Chen" plan.txt
"$LATTICE" plan --layers 12 --hidden 768 --heads 12 --seq-len 256 --micro-batch 4 --global-batch 4 --gpus 1 \
  "${UNIFORM2[@]}" --json > plan.json 2> plan.err
check "plan --json: recompute_plan and segment_table" "$PY" -c "
import json, sys
d = json.load(open('plan.json'))
print(d['layout']['recompute_plan'], [r['k'] for r in d['segment_table'][0]['rows']])
sys.exit(0 if d['layout']['recompute_plan'] == 'c~' * 6 and len(d['segment_table'][0]['rows']) == 6 else 1)"

# Misuse: one line on stderr, exit 1 (2 for the flag parser's usage errors).
SMALL=(train --data data --layers 4 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --steps 1)
expect_error "uniform without k" "needs --recompute-layers" "${SMALL[@]}" --recompute full --recompute-method uniform
expect_error "uniform k = 0" "at least 1" "${SMALL[@]}" --recompute full --recompute-method uniform --recompute-layers 0
expect_error "uniform k > L" "more than --layers" "${SMALL[@]}" --recompute full --recompute-method uniform --recompute-layers 5
expect_error "uniform k not dividing the stage" "stage 0 holds 4 layers, which 3 does not divide" \
  "${SMALL[@]}" --recompute full --recompute-method uniform --recompute-layers 3
expect_error "uniform without full" "applies to --recompute full only" "${SMALL[@]}" --recompute selective \
  --recompute-method uniform --recompute-layers 2
expect_error "a method without full" "applies to --recompute full only" "${SMALL[@]}" --recompute-method block
expect_error "an unknown method" "must be block or uniform" "${SMALL[@]}" --recompute full --recompute-method random
expect_error "a bad plan character" "not one of" "${SMALL[@]}" --recompute-plan c~xn
expect_error "a plan of the wrong length" "has 3 layers" "${SMALL[@]}" --recompute-plan c~n
expect_error "a plan beginning inside a segment" "cannot continue a segment" "${SMALL[@]}" --recompute-plan ~cnn
# A ~ above n or s continues no segment (it used to run as a checkpoint while the run said "none").
expect_error "a segment above a layer that keeps its activations" "layer 2 is in a segment no checkpoint below it starts" \
  "${SMALL[@]}" --recompute-plan cn~n
expect_error "a plan with --recompute-layers" "without --recompute-method and --recompute-layers" "${SMALL[@]}" \
  --recompute-plan c~nn --recompute-layers 2
expect_error "k not an integer (usage)" "recompute-layers" "${SMALL[@]}" --recompute full --recompute-layers two
check "usage error exits 2" grep -q . err.txt
"$LATTICE" "${SMALL[@]}" --recompute full --recompute-layers two > /dev/null 2>&1
check "usage error: exit 2" test $? -eq 2
expect_error "plan: k not dividing" "which 3 does not divide" plan --layers 4 --hidden 64 --heads 4 --seq-len 32 \
  --micro-batch 1 --global-batch 1 --gpus 1 --recompute full --recompute-method uniform --recompute-layers 3
bad_layout "pp 2 with a stage k does not divide" "stage 0 holds 3 layers, which 2 does not divide" 2 \
  --pipeline-model-parallel-size 2 --pipeline-layers 3,1 "${UNIFORM2[@]}"

# TOML: the same keys as the flags.
printf 'recompute = "full"\nrecompute-method = "uniform"\nrecompute-layers = 2\n' > uniform.toml
"$LATTICE" train "${MODEL[@]}" --config uniform.toml --save ck_toml > toml.jsonl 2> toml.err
check "a TOML config runs uniform 2 (byte-identical)" cmp ck_one/model.safetensors ck_toml/model.safetensors
"$LATTICE" train "${MODEL[@]}" "${UNIFORM2[@]}" --dump-config > dumped.toml 2> dump.err
check "--dump-config writes the method" grep -q '^recompute-method = "uniform"' dumped.toml

echo "$failures failure(s)"
exit $((failures > 0))
