#!/usr/bin/env bash
# Every parallel layout trains the same model as one rank: same seed, data and dropout (on), the
# per-step losses agree to 1e-5 relative and the final weights to 1e-5 (issue 4's list of layouts).
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"

run one 1
run tp2 2 --tensor-model-parallel-size 2
run tp2_sp 2 --tensor-model-parallel-size 2 --sequence-parallel
run tp4_sp 4 --tensor-model-parallel-size 4 --sequence-parallel
run dp2 2
run tp2_dp2_selective 4 --tensor-model-parallel-size 2 --recompute selective
run one_packed 1 --pack-masks
check "--pack-masks trains bit for bit the model of byte masks (losses and weights equal)" "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
a, b = l('one.jsonl'), l('one_packed.jsonl')
same = open('ck_one/model.safetensors', 'rb').read() == open('ck_one_packed/model.safetensors', 'rb').read()
print(a, b, same)
sys.exit(0 if len(a) == 4 and a == b and same else 1)"
run tp2_sp_packed 2 --tensor-model-parallel-size 2 --sequence-parallel --pack-masks
for name in tp2 tp2_sp tp4_sp dp2 tp2_dp2_selective tp2_sp_packed; do
  check "$name trains the one-rank model" compare "$name"
done

# --activation-compression fp8: the 8-bit kept tensors' scales cover 32 elements of a row, never a
# TP rank's boundary, so every layout quantizes as one rank does; TP's and DP's partial sums differ
# from one rank's in the last bit, which can flip a rounding: compare_fp8's bound (compare.sh).
run one_fp8 1 --activation-compression fp8
run tp2_sp_fp8 2 --tensor-model-parallel-size 2 --sequence-parallel --activation-compression fp8
run tp2_dp2_full_fp8 4 --tensor-model-parallel-size 2 --recompute full --activation-compression fp8
for name in tp2_sp_fp8 tp2_dp2_full_fp8; do
  check "$name trains the one-rank fp8 model" compare_fp8 "$name" one_fp8 one
done

# Pipeline schedules (4 layers, 4 micro-batches a step), alone and in 3D with TP + SP and DP; the
# validation losses of --eval-every too (compare), which run through the stages one after another.
MODEL_SAVED=("${MODEL[@]}")
MODEL=("${MODEL[@]}" --layers 4 --eval-every 2 --eval-batches 3)
run one_l4 1
run pp2_gpipe 2 --pipeline-model-parallel-size 2 --schedule gpipe
run pp2_1f1b 2 --pipeline-model-parallel-size 2 --schedule 1f1b
run pp4_1f1b 4 --pipeline-model-parallel-size 4 --schedule 1f1b
run pp2_interleaved 2 --pipeline-model-parallel-size 2 --schedule interleaved --virtual-stages 2
run tp2_pp2_dp2_sp 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel
run pp2_full_recompute 2 --pipeline-model-parallel-size 2 --recompute full --recompute-layers 1
# Block k counts per stage, as Megatron's --recompute-num-layers: each stage's first layer of 4 (it was
# the model's first layer, cnnn, so stage 1 recomputed nothing).
check "pp2 --recompute-layers 1: the first layer of each stage" grep -q '"recompute_plan":"cncn"' pp2_full_recompute.jsonl
# --pack-masks keeps the same masks at one bit an element: every layout still trains the one-rank model.
run tp2_pp2_sp_selective_packed 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --sequence-parallel --recompute selective --pack-masks
run tp2_pp2_full 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --recompute full
for name in pp2_gpipe pp2_1f1b pp4_1f1b pp2_interleaved tp2_pp2_dp2_sp pp2_full_recompute tp2_pp2_sp_selective_packed \
  tp2_pp2_full; do
  check "$name trains the one-rank model" compare "$name" one_l4
done
# A stage's conjugates are its own layers' (and re-runs') and its end's: the embedding's f̄ on the
# first, the head's f on the last.
check "each stage's conjugate bytes are its formula" "$PY" -c "
import json, sys
for f in ['tp2_pp2_dp2_sp', 'tp2_pp2_sp_selective_packed', 'tp2_pp2_full']:
    for r in [json.loads(l) for l in open(f + '.jsonl')][-1]['comm']['ranks']:
        print(f, r['rank'], r['tp_conjugate'], r['tp_conjugate_formula'])
        if not (r['tp_conjugate'] > 0 and abs(r['tp_conjugate'] - r['tp_conjugate_formula']) <= 1): sys.exit('%s: tp %s' % (f, r))
"
# A pipeline adds the tied embedding's two gradients after the step (first + last stage) and the norm's
# per-tensor sums in table order: one rank summing the same way is the pipeline, bit for bit.
run one_l4_apart 1 --tied-embedding-grads apart
for name in pp2_gpipe pp2_1f1b pp4_1f1b pp2_interleaved pp2_full_recompute; do
  check "$name is the one-rank model summed apart, bit for bit" same_bits "$name" one_l4_apart
done
# So under 8-bit kept tensors too: no last bit differs, so no rounding flips.
run one_l4_fp8 1 --activation-compression fp8
run one_l4_fp8_apart 1 --activation-compression fp8 --tied-embedding-grads apart
run pp2_1f1b_fp8 2 --pipeline-model-parallel-size 2 --schedule 1f1b --activation-compression fp8
check "pp2_1f1b_fp8 is the one-rank fp8 model summed apart, bit for bit" same_bits pp2_1f1b_fp8 one_l4_fp8_apart
check "pp2_1f1b_fp8 trains the one-rank fp8 model" compare_fp8 pp2_1f1b_fp8 one_l4_fp8 one_l4
# First-stage activation peak (eq. 5): 1F1B holds L layers' worth, interleaved × (1 + (p−1)/(p·m)),
# GPipe n_mb micro-batches of L/p layers.
check "first-stage activation peak follows eq. 5" "$PY" -c "
import json, sys
cases = [('pp2_1f1b.jsonl', 4 * 1.0), ('pp4_1f1b.jsonl', 4 * 1.0), ('pp2_interleaved.jsonl', 4 * 1.25),
         ('pp2_gpipe.jsonl', 4 * 2 / 2 * 2)]
for f, layers_worth in cases:
    r = [x for x in [json.loads(l) for l in open(f)][-1]['memory']['ranks'] if x['pp_rank'] == 0][0]
    per = r['activation_bytes_per_layer_formula'][0]
    want = layers_worth * per
    got = r['activation_peak_bytes']
    print(f, got, want, got / want)
    if not (want <= got <= 1.03 * want): sys.exit('%s: peak %d, eq. 5 says %d' % (f, got, want))
"
check "pipeline stages hold only their own parameters (the tied embedding on the first and the last)" "$PY" -c "
import json, sys
one = [json.loads(l) for l in open('one_l4.jsonl')][-1]['memory']['ranks'][0]['model_state_bytes']['params']
ranks = [json.loads(l) for l in open('pp4_1f1b.jsonl')][-1]['memory']['ranks']
total = sum(r['model_state_bytes']['params'] for r in ranks)
wte = 256 * 64 * 4
print('one rank', one, 'sum of 4 stages', total)
sys.exit(0 if total == one + wte and max(r['model_state_bytes']['params'] for r in ranks) < one / 2 else 1)"
# bf16 activations (bf16 GEMM inputs) under TP + SP + PP: the one-rank bf16 losses to bf16 rounding.
run one_l4_bf16 1 --activation-dtype bf16
run tp2_pp2_sp_bf16 4 --activation-dtype bf16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --sequence-parallel --recompute selective
check "bf16 under TP + SP + PP trains the one-rank bf16 model (to 1e-4)" "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
a, b = l('one_l4_bf16.jsonl'), l('tp2_pp2_sp_bf16.jsonl')
print(a, b)
sys.exit(0 if len(a) == len(b) == 4 and all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b)) else 1)"
# --trace: a Chrome trace with one track per rank, a forward and a backward per micro-batch and step.
run pp4_trace 4 --pipeline-model-parallel-size 4 --trace trace.json
check "trace: one track per rank, every forward and backward" "$PY" -c "
import json, sys, collections
ev = json.load(open('trace.json'))['traceEvents']
tracks = [e for e in ev if e['ph'] == 'M']
count = collections.Counter((e['tid'], e['cat']) for e in ev if e['ph'] == 'X')
ok = len(tracks) == 4 and all(count[(r, 'forward')] == 4 * 4 and count[(r, 'backward')] == 4 * 4 for r in range(4))
ok = ok and all(count[(r, 'optimizer')] == 4 for r in range(4)) and count[(1, 'receive')] == 2 * 4 * 4
sys.exit(0 if ok else 'trace: %d tracks, %s' % (len(tracks), dict(count)))"
# The real run's step drawn and measured like a simulated one: 1F1B holds 4, 3, 2, 1 micro-batches.
"$LATTICE" schedule --pipeline-model-parallel-size 4 --micro-batches 4 --from-trace trace.json --svg real.svg \
  --json > real.json 2> real.err
check "trace drawn as a timeline, 1F1B's in-flight counts measured" "$PY" -c "
import json, sys
d = json.load(open('real.json'))
sys.exit(0 if d['peak_in_flight'] == [4, 3, 2, 1] and 0 < d['bubble'] < 1 else 'real.json: %s' % d)"
check "real timeline SVG written" grep -q "</svg>" real.svg
check "its caption says the bubble was measured in the trace (it said simulated)" grep -q "% measured in the trace, " real.svg
MODEL=("${MODEL_SAVED[@]}")

# The summary reports every rank, with TP-divided kept bytes (Table 2's TP and TP+SP rows).
check "tp4_sp reports 4 ranks" test "$("$PY" -c "import json; d=[json.loads(l) for l in open('tp4_sp.jsonl')][-1]; print(len(d['memory']['ranks']))")" -eq 4
check "kept bytes per layer within 2% of the formula on every rank" "$PY" -c "
import json, sys
for f in ['tp2.jsonl', 'tp2_sp.jsonl', 'tp4_sp.jsonl', 'tp2_dp2_selective.jsonl']:
    d = [json.loads(l) for l in open(f)][-1]
    for r in d['memory']['ranks']:
        for m, fo in zip(r['activation_bytes_per_layer'], r['activation_bytes_per_layer_formula']):
            if not (fo <= m <= 1.02 * fo): sys.exit('%s rank %d: %d vs %d' % (f, r['rank'], m, fo))
"
check "SP keeps less than TP alone" "$PY" -c "
import json, sys
kept = lambda f: [json.loads(l) for l in open(f)][-1]['memory']['ranks'][0]['activation_bytes_per_layer'][0]
sys.exit(0 if kept('tp2_sp.jsonl') < kept('tp2.jsonl') else 1)"
check "TP and TP+SP move the same bytes through f, f̄, g, ḡ (paper §4.3)" "$PY" -c "
import json, sys
conj = lambda f: [r['tp_conjugate'] for r in [json.loads(l) for l in open(f)][-1]['comm']['ranks']]
a, b = conj('tp2.jsonl'), conj('tp2_sp.jsonl')
print('TP', a, 'TP+SP', b)
sys.exit(0 if a == b and a[0] > 0 else 1)"
check "conjugate bytes equal the ring formula, DP bytes the gradient all-reduce (+ the loss)" "$PY" -c "
import json, sys
for f in ['tp2.jsonl', 'tp2_sp.jsonl', 'tp4_sp.jsonl', 'dp2.jsonl', 'tp2_dp2_selective.jsonl']:
    for r in [json.loads(l) for l in open(f)][-1]['comm']['ranks']:
        if abs(r['tp_conjugate'] - r['tp_conjugate_formula']) > 1: sys.exit('%s: tp %s' % (f, r))
        if not (0 <= r['dp'] - r['dp_formula'] <= 16): sys.exit('%s: dp %s' % (f, r))
"
check "TP bytes per layer equal 4·2(t-1)/t·sbh·4 per micro-batch (no SP)" "$PY" -c "
import json, sys
for f in ['tp2.jsonl', 'tp4_sp.jsonl']:
    c = [json.loads(l) for l in open(f)][-1]['comm']
    per, want = c['rank0_tp_bytes_per_layer'], c['tp_bytes_per_layer_formula']
    extra = 0 if f == 'tp2.jsonl' else want / 4   # SP re-gathers two inputs a layer: 2 of the 8 halves
    if not all(abs(x - want - extra) < 1 for x in per): sys.exit('%s: %s vs %s' % (f, per, want))
"
check "DP ranks report DP traffic" "$PY" -c "
import json, sys
d = [json.loads(l) for l in open('dp2.jsonl')][-1]
sys.exit(0 if all(r['dp'] > 0 and r['tp'] == 0 for r in d['comm']['ranks']) else 1)"

# Bad layouts: one line from rank 0, every rank exits non-zero.
bad_layout "world not divisible by t" "not divisible" 3 --tensor-model-parallel-size 2
bad_layout "t not dividing heads" "must divide --heads" 3 --tensor-model-parallel-size 3
bad_layout "SP without TP" "sequence-parallel" 2 --sequence-parallel
bad_layout "more ranks asked than exist" "needs at least" 2 --tensor-model-parallel-size 4
bad_layout "layers not divisible by p·m" "not divisible by p·m" 2 --pipeline-model-parallel-size 2 --schedule interleaved --virtual-stages 2
bad_layout "apart sums on many ranks" "is for one rank" 2 --pipeline-model-parallel-size 2 --tied-embedding-grads apart
bad_layout "micro-batches the schedule cannot run" "multiple" 2 --pipeline-model-parallel-size 2 --schedule interleaved --virtual-stages 2 --layers 4 --global-batch 6

# A rank that dies mid-run (SIGKILL) makes every rank stop within seconds, never a hang.
mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --steps 100000 --pipeline-model-parallel-size 2 \
  > die.out 2> die.err &
MPIPID=$!
sleep 4
victim=$(pgrep -P "$MPIPID" | head -1)
check "found a rank to kill" test -n "$victim"
start=$(date +%s)
kill -9 "$victim" 2>/dev/null
for _ in $(seq 1 200); do kill -0 "$MPIPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$MPIPID" 2>/dev/null && { kill -9 "$MPIPID"; echo "mpirun still running 20 s after a rank died"; }
wait "$MPIPID"
status=$?
check "job exits non-zero after a rank died ($status)" test "$status" -ne 0
check "within seconds ($(( $(date +%s) - start )) s)" test $(( $(date +%s) - start )) -le 15
check "no lattice process left" test -z "$(pgrep -f "train ${MODEL[*]} --steps 100000")"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
