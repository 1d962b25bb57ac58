#!/usr/bin/env bash
# --schedule pipedream-2bw (docs/design.md §6.3): 1F1B without a flush, two weight versions. Global
# batch t runs forward and backward on W(t-1) and update t writes W(t+1) = Opt(W(t), g_t). Those
# semantics do not depend on when anything runs, so the one-rank run (which updates at every step's
# end) is the reference: every pipeline layout trains it (1e-5), through drains at save steps and a
# resume. Both versions are in the checkpoint and both are counted in memory.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
MODEL=("${MODEL[@]}" --layers 4 --schedule pipedream-2bw)

# previous_matches NAME [REFERENCE]: model_previous.safetensors within 1e-5 of the reference's (with
# BF16_ULP=1, for versions kept in bf16: the masters agree to 1e-4 as bf16 runs do, so the rounded
# versions to 1e-4 plus one bf16 ulp, |x - y| <= 1e-4 + 2^-7 max(|x|, |y|)).
previous_matches() {
  "$PY" - "ck_$1" "ck_${2:-one}" <<'PYEOF'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}
a, b = tensors(sys.argv[2] + "/model_previous.safetensors"), tensors(sys.argv[1] + "/model_previous.safetensors")
newest = tensors(sys.argv[1] + "/model.safetensors")
assert a.keys() == b.keys() == newest.keys()
import os
ulp = os.environ.get("BF16_ULP") == "1"
excess = lambda x, y: abs(x - y) - (1e-4 + 2 ** -7 * max(abs(x), abs(y)) if ulp else 1e-5)
worst = max(excess(x, y) for k in a for x, y in zip(a[k], b[k]))
apart = max(abs(x - y) for k in b for x, y in zip(b[k], newest[k]))
print("%s: previous version %s the reference's (worst margin %.2e), %.2e from the newest" %
      (sys.argv[1], "within 1e-4 + one bf16 ulp of" if ulp else "within 1e-5 of", -worst, apart))
sys.exit(0 if worst <= 0 and apart > 1e-4 else 1)
PYEOF
}

run one 1
P2=(--pipeline-model-parallel-size 2)
layout() {  # layout NAME NP FLAGS...: trains the one-rank model, both weight versions
  local name=$1 np=$2; shift 2
  run "$name" "$np" "$@"
  check "$name trains the one-rank 2BW model" compare "$name"
  check "$name keeps the one-rank previous version" previous_matches "$name"
}
layout pp2 2 "${P2[@]}"
# A pipelined step applies the update of the step before (its tail ran in this step), and the last step
# drains both: its lr and gradient norm are that update's, said so (update_of_step), not the step's own.
check "pp2: each step names the update it applied, its norm the one-rank run's of that step" "$PY" -c "
import json
steps = lambda f: [r for r in map(json.loads, open(f)) if r.get('event') == 'step']
one, pp = steps('one.jsonl'), steps('pp2.jsonl')
assert all('update_of_step' not in r for r in one), 'one rank updates at each step: no field'
n = len(pp)
assert [r.get('update_of_step', r['step']) for r in pp] == [0] + list(range(1, n - 1)) + [n], pp
norm = {r['step']: r['grad_norm'] for r in one}
for r in pp[1:]:
    u = r.get('update_of_step', r['step'])
    assert abs(r['grad_norm'] - norm[u]) <= 1e-5 * norm[u], (r, norm[u])"
layout pp4 4 --pipeline-model-parallel-size 4
layout tp2_pp2_sp 4 --tensor-model-parallel-size 2 "${P2[@]}" --sequence-parallel
layout pp2_dp2 4 "${P2[@]}"
layout pp2_dp2_zero1 4 "${P2[@]}" --zero 1
layout pp2_dp2_zero2 4 "${P2[@]}" --zero 2
layout pp2_selective 2 "${P2[@]}" --recompute selective
layout pp2_full 2 "${P2[@]}" --recompute full
layout pp2_fused 2 "${P2[@]}" --attention fused
layout pp2_uneven 2 "${P2[@]}" --pipeline-layers 3,1
# --eval-every drains the pipeline at its steps, and the validation reads the newest weights: the
# one-rank run's validation losses, while training the same model through the extra drain.
run one_eval 1 --eval-every 2 --eval-batches 3
run pp2_eval 2 "${P2[@]}" --eval-every 2 --eval-batches 3
check "pp2_eval trains the one-rank 2BW model and validates it" compare pp2_eval one_eval
check "pp2_eval keeps the one-rank previous version" previous_matches pp2_eval one_eval
check "validation leaves one rank's training alone (losses and weights bit for bit)" "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
same = open('ck_one/model.safetensors', 'rb').read() == open('ck_one_eval/model.safetensors', 'rb').read()
print(l('one.jsonl'), l('one_eval.jsonl'), same)
sys.exit(0 if len(l('one.jsonl')) == 4 and l('one.jsonl') == l('one_eval.jsonl') and same else 1)"
# The summary's traffic is the last step's, which drains: on stage r the previous batch's last
# p − r − 1 backwards beside the step's own, and two updates. Each rank's formulas count its passes.
check "the drained last step's TP and DP bytes are each rank's formulas" "$PY" -c "
import json, sys
for f, zero in [('tp2_pp2_sp', False), ('pp2_dp2', False), ('pp2_dp2_zero1', True), ('pp2_dp2_zero2', True)]:
    for r in [json.loads(l) for l in open(f + '.jsonl')][-1]['comm']['ranks']:
        print(f, r['rank'], r['tp_conjugate'], r['tp_conjugate_formula'], r['dp'], r['dp_formula'])
        if abs(r['tp_conjugate'] - r['tp_conjugate_formula']) > 1: sys.exit('%s: tp %s' % (f, r))
        # Beyond the gradients the DP group (2 ranks; none under TP 2 x PP 2) carries the step's loss,
        # an fp32 pair gathered (8 bytes to the other rank), and under ZeRO each of the two updates'
        # norm sums (an all-reduce of 16 bytes: 16 sent).
        extra = (8 + (2 * 16 if zero else 0)) if 'dp2' in f else 0
        if r['dp'] - r['dp_formula'] != extra: sys.exit('%s: dp %s, %d beyond the formula' % (f, r, extra))
"
run clip_one 1 --clip-grad 0.05
run pp2_dp2_clip 4 "${P2[@]}" --clip-grad 0.05 --zero 1
check "pp2 x dp2 clipping update t's gradient norm trains the one-rank clipped model" compare pp2_dp2_clip clip_one
# MoE: its own one-rank reference (experts route per layer; EP 2 splits them over the DP pair).
run moe_one 1 --num-experts 4 --moe-router-topk 2
run pp2_ep2 4 "${P2[@]}" --num-experts 4 --moe-router-topk 2 --expert-model-parallel-size 2
check "pp2 x ep2 (MoE) trains the one-rank 2BW MoE model" compare pp2_ep2 moe_one
# 16-bit weights: fp32 masters once, two bf16 versions. bf16 gradients round where micro-batches
# accumulate, so the reference accumulates the same ones: one rank for pp2, DP 2 (ZeRO-2) for pp2 x dp2.
run bf16_one 1 --params-dtype bf16
run pp2_bf16 2 "${P2[@]}" --params-dtype bf16
# The weights: bf16 gradients round where micro-batches accumulate, and a last-bit difference
# upstream (the pipeline's partial sums) flips a few of those roundings, each an Adam step of one
# element; how many depends on the CPU's last bits, so no fixed number is a claim. A layout that
# rounded differently everywhere would move the weights about as far as bf16 moves them from fp32
# (E, measured in this run against the fp32 one-rank model): the bound is E/10, as compare_fp8's.
# Measured here: losses 3.4e-7 and 8.4e-7 (pp2_dp2), weights 2.3e-5 and 2.6e-5.
LOSS_TOL=1e-4 WEIGHT_GAP_REF=one check "pp2 bf16 weights train the one-rank bf16 2BW model (losses 1e-4, weights E/10)" \
  compare pp2_bf16 bf16_one
BF16_ULP=1 check "pp2 bf16 weights keep the one-rank previous version" previous_matches pp2_bf16 bf16_one
# fp32 weights read by bf16 GEMMs: each version has its bf16 copy.
run act_bf16_one 1 --activation-dtype bf16
run pp2_act_bf16 2 "${P2[@]}" --activation-dtype bf16
# bf16 activations round differently by layout (1F1B's pp2 is 5e-4 from its one rank in weights), so
# as for 1F1B (cli.mixed_precision) the claim is the losses to 1e-4.
LOSS_TOL=1e-4 WEIGHT_TOL=1 check "pp2 with bf16 activations trains the one-rank bf16-activation 2BW model (losses 1e-4)" \
  compare pp2_act_bf16 act_bf16_one
check "each weight version has its bf16 copy for the GEMMs (2 x 2 bytes a parameter)" "$PY" -c "
import json
for r in [json.loads(l) for l in open('pp2_act_bf16.jsonl')][-1]['memory']['ranks']:
    print(r['compute_weight_bytes'], r['model_state_bytes']['params'])
    assert 2 * r['compute_weight_bytes'] == r['model_state_bytes']['params'], r
"
run dp2_bf16 2 --params-dtype bf16 --zero 2
run pp2_dp2_bf16 4 "${P2[@]}" --params-dtype bf16 --zero 2
LOSS_TOL=1e-4 WEIGHT_GAP_REF=one check "pp2 x dp2 bf16 weights, ZeRO-2, train the dp2 bf16 2BW model (E/10)" \
  compare pp2_dp2_bf16 dp2_bf16
BF16_ULP=1 check "pp2 x dp2 bf16 weights keep dp2's previous version" previous_matches pp2_dp2_bf16 dp2_bf16

# The delay is real: from step 2 on the losses differ from 1F1B's (step 1 runs the initial weights in both).
run sync 1 --schedule 1f1b
check "2BW's losses are 1F1B's at step 1 and differ after" "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
a, b = l('one.jsonl'), l('sync.jsonl')
print(a, b)
sys.exit(0 if a[0] == b[0] and all(abs(x - y) > 1e-6 for x, y in zip(a[1:], b[1:])) else 1)"
check "a 1F1B checkpoint has no previous version" test ! -e ck_sync/model_previous.safetensors

# A drain changes when updates run, never what they compute: saving at step 2 drains there.
run pp2_saves 2 "${P2[@]}" --save-every 2
check "pp2 draining at step 2 still trains the one-rank model" compare pp2_saves
# Resume: two steps, saved (both versions), then two more = the uninterrupted run.
MODEL_4=("${MODEL[@]}")
MODEL=("${MODEL_4[@]}" --steps 2)
run half 2 "${P2[@]}"
MODEL=("${MODEL_4[@]}")
run resumed 2 "${P2[@]}" --resume ck_half
check "a pp2 run resumed at step 2 continues the uninterrupted run" "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
a, b = l('one.jsonl'), l('half.jsonl') + l('resumed.jsonl')
print(a, b)
sys.exit(0 if len(b) == 4 and max(abs(x - y) / x for x, y in zip(a, b)) <= 1e-5 else 1)"
cat half.jsonl resumed.jsonl > resumed_all.jsonl && ln -s ck_resumed ck_resumed_all
check "the resumed run's final weights are the one-rank run's" compare resumed_all
check "the resumed run's previous version is the one-rank run's" previous_matches resumed
# An odd step too: the versions swap roles with the step's parity.
MODEL=("${MODEL_4[@]}" --steps 3)
run half3 2 "${P2[@]}"
MODEL=("${MODEL_4[@]}")
run resumed3 2 "${P2[@]}" --resume ck_half3
cat half3.jsonl resumed3.jsonl > resumed3_all.jsonl && ln -s ck_resumed3 ck_resumed3_all
check "a pp2 run resumed at step 3 continues the uninterrupted run" compare resumed3_all

# The semantics checked against 1F1B runs, independently of the version logic: 2BW's step 2 is batch
# 1 on the initial weights (a 1F1B run with learning rate 0 computes that loss), and after two steps
# its previous version is update 0 applied to the initial weights (1F1B's weights after one step).
run lr0 1 --schedule 1f1b --lr 0 --min-lr 0
MODEL=("${MODEL_4[@]}" --steps 2 --lr-schedule constant)
run two_steps 1
run one_step_1f1b 1 --schedule 1f1b --steps 1
MODEL=("${MODEL_4[@]}")
check "2BW's step 2 is batch 1 on W(0); after 2 steps its previous version is 1F1B's W(1)" "$PY" - <<'PYEOF'
import json, struct, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '"event":"step"' in x]
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}
a, b = l('one.jsonl'), l('lr0.jsonl')
print(a[1], b[1])
same = tensors('ck_two_steps/model_previous.safetensors') == tensors('ck_one_step_1f1b/model.safetensors')
newest = tensors('ck_two_steps/model.safetensors') != tensors('ck_one_step_1f1b/model.safetensors')
print('previous = 1F1B W(1):', same, '; newest differs:', newest)
sys.exit(0 if abs(a[1] - b[1]) <= 1e-9 * abs(b[1]) and same and newest else 1)
PYEOF

# A 1F1B checkpoint has one version: 2BW resumes it with both versions the model, and says so.
MODEL=("${MODEL_4[@]}" --steps 5)
run from_sync 2 "${P2[@]}" --resume ck_sync
MODEL=("${MODEL_4[@]}")
check "a 1F1B checkpoint resumed under 2BW: one note, one step, two versions saved" \
  test "$(grep -c 'both versions start from its model' from_sync.err)" -eq 1 -a \
  "$(grep -c '"event":"step"' from_sync.jsonl)" -eq 1 -a -e ck_from_sync/model_previous.safetensors

# Memory: every weight and gradient array twice (the masters of 16-bit runs once), measured by
# the allocator, beside the formula (analysis::model_state_bytes with two versions).
for name in pp2 pp2_dp2_zero2 pp2_dp2_bf16 pp2_act_bf16; do
  check "$name: weights and gradients measured twice, = the two-version formula" "$PY" -c "
import json, sys
s = [json.loads(l) for l in open('$name.jsonl')][-1]['memory']['ranks']
for r in s:
    m, f = r['model_state_bytes'], r['model_state_bytes_formula']
    print(r['rank'], m, f)
    assert m['params'] == f['params'] and m['grads'] == f['grads'], r
"
done
run pp2_1f1b 2 "${P2[@]}" --schedule 1f1b
check "pp2: 2BW holds twice 1F1B's weights and gradients, the same optimizer states" "$PY" -c "
import json, sys
ranks = lambda f: [r['model_state_bytes'] for r in [json.loads(l) for l in open(f)][-1]['memory']['ranks']]
for a, b in zip(ranks('pp2_1f1b.jsonl'), ranks('pp2.jsonl')):
    print(a, b)
    assert b['params'] == 2 * a['params'] and b['grads'] == 2 * a['grads'] and b['optimizer'] == a['optimizer']
"

# The planner predicts both versions: each stage's steady model states exactly (ZeRO's transient
# buckets are the memory benchmark's rows), its activations (1F1B's) to 3%.
plan_vs_measured() {  # plan_vs_measured RUN NP PLAN-FLAGS...
  local run=$1 np=$2; shift 2
  "$LATTICE" plan --layers 4 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 8 \
    --activation-dtype fp32 --hardware cpu --gpus "$np" --schedule pipedream-2bw "$@" --json \
    > "$run.plan.json" 2> "$run.plan.err"
  "$PY" - "$run" <<'PYEOF'
import json, sys
run = sys.argv[1]
plan = json.load(open(run + '.plan.json'))['memory_by_stage']
for r in [json.loads(l) for l in open(run + '.jsonl')][-1]['memory']['ranks']:
    want = plan[r['pp_rank']]
    states, acts = sum(r['model_state_bytes'].values()), r['activation_peak_bytes']
    steady = want['model_states'] - want['model_states_transient']
    print(run, r['rank'], states, steady, acts, want['activations'])
    if states != steady or not 0.97 * want['activations'] <= acts <= 1.03 * want['activations']:
        sys.exit('%s rank %d: measured %d / %d, predicted %d / %d' % (run, r['rank'], states, acts, steady,
                                                                    want['activations']))
PYEOF
}
check "plan --schedule pipedream-2bw: pp2's stages as measured" plan_vs_measured pp2 2 --pipeline-model-parallel-size 2 \
  --params-dtype fp32
check "plan --schedule pipedream-2bw: pp2 x dp2 bf16 weights ZeRO-2 as measured" plan_vs_measured pp2_dp2_bf16 4 \
  --pipeline-model-parallel-size 2 --params-dtype bf16 --zero 2
for sch in 1f1b pipedream-2bw; do
  "$LATTICE" plan --layers 8 --hidden 256 --heads 8 --seq-len 128 --vocab 256 --micro-batch 1 --global-batch 8 \
    --pipeline-model-parallel-size 4 --hardware cpu --schedule "$sch" --json > "plan_$sch.json" 2> plan.err
done
check "plan: 2BW's steady step has less bubble than 1F1B's, (p-1)F, and twice the weights and gradients" "$PY" -c "
import json, sys
a, b = json.load(open('plan_1f1b.json')), json.load(open('plan_pipedream-2bw.json'))
fa, fb = a['time_breakdown_s']['bubble'], b['time_breakdown_s']['bubble']
sa, sb = a['memory_by_stage'][0], b['memory_by_stage'][0]
print(fa, fb, sa['model_states'], sb['model_states'], b['layout']['schedule'])
# F is a third of a micro-batch's stage time: 1F1B idles 3 slots of F+B = 3F each, 2BW 3 slots of F.
sys.exit(0 if abs(fb - fa / 3) <= 1e-9 * fa and sb['model_states'] > sa['model_states'] and
         sb['activations'] == sa['activations'] and b['layout']['schedule'] == 'pipedream-2bw' else 1)"
expect_error "plan: 2BW with ZeRO-3" "zero 3" plan --layers 8 --hidden 256 --heads 8 --pipeline-model-parallel-size 2 \
  --gpus 4 --global-batch 8 --zero 3 --schedule pipedream-2bw
expect_error "plan: 2BW with fewer micro-batches than stages" "at least p" plan --layers 8 --hidden 256 --heads 8 \
  --pipeline-model-parallel-size 4 --global-batch 2 --schedule pipedream-2bw

# The trace has every forward and backward of the run.
run traced 2 "${P2[@]}" --trace traced.json
check "the trace holds 4 steps x 4 micro-batches of F and B on each of 2 ranks" "$PY" -c "
import json, sys
ev = json.load(open('traced.json'))
ev = ev['traceEvents'] if isinstance(ev, dict) else ev
f = sum(1 for e in ev if e.get('cat') == 'forward' and e.get('ph') == 'X')
b = sum(1 for e in ev if e.get('cat') == 'backward' and e.get('ph') == 'X')
print(f, b)
sys.exit(0 if f == b == 32 else 1)"

# Refused, one line each.
cp -r ck_half ck_previous_gone && rm ck_previous_gone/model_previous.safetensors
bad_layout "a 2BW checkpoint whose previous version was deleted" \
  "model_previous.safetensors, which lattice-checkpoint.json lists with its sum, is missing" 2 "${P2[@]}" --resume ck_previous_gone
cp -r ck_previous_gone ck_no_previous
"$PY" -c "
import json; m = json.load(open('ck_no_previous/lattice-checkpoint.json'))
m['files'] = [f for f in m['files'] if f != 'model_previous.safetensors']; m['sums'].pop('model_previous.safetensors')
json.dump(m, open('ck_no_previous/lattice-checkpoint.json', 'w'))"
bad_layout "a 2BW checkpoint without its previous version" "no model_previous.safetensors" 2 "${P2[@]}" \
  --resume ck_no_previous
bad_layout "2BW with ZeRO-3" "zero 3" 4 "${P2[@]}" --zero 3
bad_layout "2BW with fp16 weights" "fp16" 2 "${P2[@]}" --params-dtype fp16
bad_layout "2BW with fewer micro-batches than stages" "at least p" 4 --pipeline-model-parallel-size 4 --global-batch 4
bad_layout "2BW interleaved" "virtual stages" 2 "${P2[@]}" --virtual-stages 2
expect_error "a misspelt schedule" "pipedream-2bw" train --data data --schedule pipedream-2b
expect_error "schedule --steps for a flushing schedule" "needs --schedule pipedream-2bw" schedule \
  --pipeline-model-parallel-size 2 --micro-batches 4 --schedule 1f1b --steps 3

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
