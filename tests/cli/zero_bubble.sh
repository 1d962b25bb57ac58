#!/usr/bin/env bash
# --schedule zb-h1 (docs/design.md §6): the backward split into input (B) and weight (W) passes, W
# deferred into 1F1B's bubbles. It accumulates the same per-micro-batch contributions in the same order
# as 1F1B, so in fp32 it writes byte-identical weights — with TP + SP, DP + ZeRO 1-3, recompute, fused
# attention, 8-bit activations, MoE and uneven stages — and it trains the one-rank model (1e-5).
# Rank 0 holds 1F1B's activation peak; the trace shows the split passes.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
MODEL=("${MODEL[@]}" --layers 4)

same_weights() {  # same_weights A B: byte-identical model.safetensors
  cmp -s "ck_$1/model.safetensors" "ck_$2/model.safetensors"
}

run one 1
pair() {  # pair NAME NP FLAGS...: the layout under 1F1B and under ZB-H1; ZB-H1 byte-identical to 1F1B
  local name=$1 np=$2; shift 2
  run "${name}_1f1b" "$np" --schedule 1f1b "$@"
  run "${name}_zb" "$np" --schedule zb-h1 "$@"
  check "$name: zb-h1 writes 1F1B's weights byte for byte" same_weights "${name}_1f1b" "${name}_zb"
}
P2=(--pipeline-model-parallel-size 2)
pair pp2 2 "${P2[@]}"
pair pp4 4 --pipeline-model-parallel-size 4
pair tp2_pp2_sp 4 --tensor-model-parallel-size 2 "${P2[@]}" --sequence-parallel
pair pp2_dp2_zero1 4 "${P2[@]}" --zero 1
pair pp2_dp2_zero2 4 "${P2[@]}" --zero 2
pair pp2_dp2_zero3 4 "${P2[@]}" --zero 3
pair pp2_selective 2 "${P2[@]}" --recompute selective
pair pp2_full_one_layer 2 "${P2[@]}" --recompute full --recompute-layers 1
pair pp2_fused 2 "${P2[@]}" --attention fused
pair pp2_uneven 2 "${P2[@]}" --pipeline-layers 3,1
pair pp2_moe 2 "${P2[@]}" --num-experts 4 --moe-router-topk 2
for name in pp2 pp4 tp2_pp2_sp pp2_dp2_zero1 pp2_dp2_zero2 pp2_dp2_zero3 pp2_selective pp2_full_one_layer pp2_fused \
  pp2_uneven; do
  check "${name}_zb trains the one-rank model" compare "${name}_zb"
done
# 16-bit paths: bf16 activations (and 8-bit kept tensors), and bf16 weights with ZeRO-2.
pair pp2_bf16 2 "${P2[@]}" --activation-dtype bf16
pair pp2_fp8 2 "${P2[@]}" --activation-dtype bf16 --activation-compression fp8
pair pp2_dp2_bf16_params 4 "${P2[@]}" --params-dtype bf16 --zero 2

# Memory: rank 0 runs each W right after its B, so it holds 1F1B's peak; stage r defers W by r, so
# it holds 1F1B's micro-batches plus r micro-batches' weight-pass operands, M_W = d·N·(4h + 12h/t)
# bytes a layer (analysis::layer_weight_pending_bytes) plus the bias sums and LayerNorm partials
# (one thread here): exactly, since W's operands are the only tensors added.
check "stage r holds 1F1B's peak plus r micro-batches' M_W (pp4, one layer a stage)" "$PY" -c "
import json, sys
peak = lambda f, r: [x for x in [json.loads(l) for l in open(f)][-1]['memory']['ranks'] if x['pp_rank'] == r][0]
d, N, h = 4, 2 * 32, 64
m_w = d * N * (4 * h + 12 * h) + 4 * (2 * h + 7 * h) + 2 * 1 * 2 * h * 4
for r in range(4):
    a, b = peak('pp4_1f1b.jsonl', r)['activation_peak_bytes'], peak('pp4_zb.jsonl', r)['activation_peak_bytes']
    want = a + r * m_w
    print(r, a, b, want, b / want)
    if not (0.97 * want <= b <= 1.03 * want): sys.exit('rank %d holds %d under zb-h1; 1F1B %d + %d x M_W = %d' % (r, b, a, r, want))
"

# The per-stage prediction (lattice plan --schedule zb-h1, rank_memory) against the measured peaks,
# also under TP + SP, where each weight pass keeps whole-sequence operands (M_W may exceed M_B).
predicted_vs_measured() {  # predicted_vs_measured RUN NP PLAN-FLAGS...
  local run=$1 np=$2; shift 2
  "$LATTICE" plan --layers 4 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 8 \
    --activation-dtype fp32 --params-dtype fp32 --hardware cpu --gpus "$np" --schedule zb-h1 "$@" --json \
    > "$run.plan.json" 2> "$run.plan.err"
  "$PY" - "$run" <<'PYEOF'
import json, sys
run = sys.argv[1]
plan = json.load(open(run + '.plan.json'))['memory_by_stage']
for r in [json.loads(l) for l in open(run + '.jsonl')][-1]['memory']['ranks']:
    got, want = r['activation_peak_bytes'], plan[r['pp_rank']]['activations']
    print(run, r['rank'], r['pp_rank'], got, want, got / want)
    if not (0.97 * want <= got <= 1.03 * want): sys.exit('%s rank %d: measured %d, predicted %d' % (run, r['rank'], got, want))
PYEOF
}
check "pp4 zb-h1: every stage's activations as predicted (3%)" predicted_vs_measured pp4_zb 4 \
  --pipeline-model-parallel-size 4
check "TP 2 + SP + PP 2 zb-h1: every stage's activations as predicted (3%)" predicted_vs_measured tp2_pp2_sp_zb 4 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel

# The trace records the split passes; lattice schedule reads it back with ZB-H1's counts.
run pp4_trace 4 --pipeline-model-parallel-size 4 --schedule zb-h1 --trace trace.json
check "trace: every B and W of every micro-batch on every rank" "$PY" -c "
import json, sys, collections
ev = json.load(open('trace.json'))['traceEvents']
count = collections.Counter((e['tid'], e['cat']) for e in ev if e['ph'] == 'X')
ok = all(count[(r, 'backward_input')] == 16 and count[(r, 'backward_weight')] == 16 and count[(r, 'backward')] == 0
         for r in range(4))
sys.exit(0 if ok else dict(count))"
"$LATTICE" schedule --pipeline-model-parallel-size 4 --micro-batches 4 --schedule zb-h1 --from-trace trace.json \
  --svg real.svg --json > real.json 2> real.err
check "the real timeline: 1F1B's in-flight counts, every stage holding 4 until W" "$PY" -c "
import json, sys
d = json.load(open('real.json'))
sys.exit(0 if d['peak_in_flight'] == [4, 3, 2, 1] and d['peak_held'] == [4, 4, 4, 4] else d)"
check "the real timeline drawn with W boxes" grep -q "weight gradient (W)" real.svg

# The planner: the same schedule's bubble (the formula module's) below 1F1B's, the later stages'
# memory above 1F1B's by their deferred M_W, the first stage's within one input pass's excess (1%).
for sch in 1f1b zb-h1; do
  "$LATTICE" plan --layers 8 --hidden 256 --heads 8 --seq-len 128 --vocab 256 --micro-batch 1 --global-batch 8 \
    --pipeline-model-parallel-size 4 --hardware cpu --schedule "$sch" --json > "plan_$sch.json" 2> plan.err
done
check "plan --schedule zb-h1: less bubble, the same first stage, more on the last" "$PY" -c "
import json, sys
a, b = json.load(open('plan_1f1b.json')), json.load(open('plan_zb-h1.json'))
fa, fb = a['time_breakdown_s']['bubble'], b['time_breakdown_s']['bubble']
sa, sb = [s['activations'] for s in a['memory_by_stage']], [s['activations'] for s in b['memory_by_stage']]
print(fa, fb, sa, sb, b['layout']['schedule'])
sys.exit(0 if fb < fa and sa[0] <= sb[0] <= 1.01 * sa[0] and all(sb[r] > sa[r] for r in (1, 2, 3)) and b['layout']['schedule'] == 'zb-h1' else 1)"
expect_error "plan: zb-h1 with virtual stages" "virtual-stages 1" plan --layers 8 --hidden 256 --heads 8 \
  --pipeline-model-parallel-size 4 --virtual-stages 2 --schedule zb-h1
expect_error "plan: a schedule it does not model" "models gpipe, 1f1b" plan --layers 8 --hidden 256 --heads 8 \
  --pipeline-model-parallel-size 4 --schedule zb-v

# Bad input.
expect_error "zb-h1 with virtual stages" "interleaved schedule" schedule --pipeline-model-parallel-size 2 \
  --micro-batches 4 --schedule zb-h1 --virtual-stages 2
expect_error "a weight pass longer than the backward" "weight time" schedule --pipeline-model-parallel-size 2 \
  --micro-batches 4 --schedule zb-h1 --weight-time 3

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
