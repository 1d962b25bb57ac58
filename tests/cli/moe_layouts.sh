#!/usr/bin/env bash
# Mixture-of-Experts trains the same model under every layout (docs/design.md §12): for each router,
# with dropout, expert dropout and the routers' randomness on, one rank and EP 2, EP 4,
# EP 2 × TP 2 + SP, EP 2 × PP 2, EP 2 × ZeRO-2 give the same per-step losses (1e-5 relative), the
# same dropped share and per-expert loads, and the same final weights (1e-5); a checkpoint saved
# under EP 2 resumes on one rank as if never stopped.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"

# Routing counters: identical fractions and loads per step, the same run histogram.
same_routing() {  # same_routing NAME REFERENCE
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
def read(name):
    steps = [json.loads(l) for l in open(name + ".jsonl") if '"event":"step"' in l]
    summary = [json.loads(l) for l in open(name + ".jsonl") if '"event":"summary"' in l][0]
    return steps, summary["moe_load"]
(a, ha), (b, hb) = read(sys.argv[2]), read(sys.argv[1])
assert len(a) == len(b) == 4
for x, y in zip(a, b):
    assert x["moe_load_min"] == y["moe_load_min"] and x["moe_load_max"] == y["moe_load_max"], (x, y)
    assert abs(x["moe_dropped_fraction"] - y["moe_dropped_fraction"]) <= 1e-6, (x, y)
    assert abs(x["moe_aux_loss"] - y["moe_aux_loss"]) <= 1e-5 * max(abs(x["moe_aux_loss"]), 1e-3), (x, y)
assert ha == hb, (ha, hb)
assert sum(sum(l["tokens_per_expert"]) for l in ha) > 0
print("%s: routing identical (loads %s)" % (sys.argv[1], [l["tokens_per_expert"] for l in hb]))
PYEOF
}

MODEL=("${MODEL[@]}" --num-experts 4 --expert-dropout 0.1)
for router in topk gshard switch expert-choice; do
  R=(--moe-router "$router")
  [ "$router" = gshard ] && R+=(--moe-groups 2)
  [ "$router" = switch ] && R+=(--moe-token-drop-policy position)
  run "one_$router" 1 "${R[@]}"
  run "ep2_$router" 2 "${R[@]}" --expert-model-parallel-size 2
  run "ep4_$router" 4 "${R[@]}" --expert-model-parallel-size 4
  run "ep2_tp2_sp_$router" 4 "${R[@]}" --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
  run "ep2_pp2_$router" 4 "${R[@]}" --expert-model-parallel-size 2 --pipeline-model-parallel-size 2
  run "ep2_zero2_$router" 2 "${R[@]}" --expert-model-parallel-size 2 --zero 2
  for layout in ep2 ep4 ep2_tp2_sp ep2_pp2 ep2_zero2; do
    check "${layout}_$router trains the one-rank model" compare "${layout}_$router" "one_$router"
    check "${layout}_$router routes as one rank" same_routing "${layout}_$router" "one_$router"
  done
done

# Recompute (the router's decisions and the all-to-alls run again identically), ZeRO-3 and ZeRO-1,
# no dropping, and bf16 under EP.
run ep2_full 2 --moe-router topk --expert-model-parallel-size 2 --recompute full
run ep2_selective_zero3 2 --moe-router topk --expert-model-parallel-size 2 --recompute selective --zero 3
run ep2_zero1_tp2 4 --moe-router topk --expert-model-parallel-size 2 --zero 1 --tensor-model-parallel-size 2
for name in ep2_full ep2_selective_zero3 ep2_zero1_tp2; do
  check "$name trains the one-rank model" compare "$name" one_topk
  check "$name routes as one rank" same_routing "$name" one_topk
done
# Every pipeline schedule: 4 layers, MoE every other layer (GShard's F = 2).
MODEL_SAVED=("${MODEL[@]}")
MODEL=("${MODEL[@]}" --layers 4 --moe-layer-freq 2 --moe-router gshard)
run one_l4 1
run ep2_pp2_gpipe 4 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 --schedule gpipe
run ep2_pp2_interleaved 4 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 --schedule interleaved \
  --virtual-stages 2
for name in ep2_pp2_gpipe ep2_pp2_interleaved; do
  check "$name trains the one-rank model" compare "$name" one_l4
  check "$name routes as one rank" same_routing "$name" one_l4
done
MODEL=("${MODEL_SAVED[@]}")

run one_nodrop 1 --moe-router switch --moe-no-drop
run ep2_nodrop 2 --moe-router switch --moe-no-drop --expert-model-parallel-size 2
check "no dropping: EP 2 trains the one-rank model" compare ep2_nodrop one_nodrop
check "no dropping drops nothing" "$PY" -c "
import json; assert all(json.loads(l)['moe_dropped_fraction'] == 0 for l in open('ep2_nodrop.jsonl') if '\"event\":\"step\"' in l)"
run one_bf16 1 --moe-router gshard --activation-dtype bf16
run ep2_bf16 2 --moe-router gshard --activation-dtype bf16 --expert-model-parallel-size 2
# bf16 GEMM inputs: Adam turns bf16-rounded gradient noise into weight steps of its own size, and a
# routing decision is discrete, so a near-tie may flip after a few updates: the losses to 1e-4 (as for
# the dense layouts' bf16 check) and the first step's routing identical.
losses_within() {  # losses_within A B BOUND
  "$PY" -c "
import json, sys
def losses(n): return [json.loads(l)['loss'] for l in open(n + '.jsonl') if '\"event\":\"step\"' in l]
a, b = losses('$1'), losses('$2')
assert len(a) == len(b) == 4 and max(abs(x - y) / x for x, y in zip(a, b)) < $3, (a, b)"
}
check "bf16 activations: EP 2 trains the one-rank model (losses to 1e-4)" losses_within one_bf16 ep2_bf16 1e-4
check "bf16 activations: EP 2's first step routes as one rank" "$PY" -c "
import json
def first(n): return [json.loads(l) for l in open(n + '.jsonl') if '\"event\":\"step\"' in l][0]
a, b = first('one_bf16'), first('ep2_bf16')
assert all(a[k] == b[k] for k in ('moe_load_min', 'moe_load_max', 'moe_dropped_fraction')), (a, b)"
# 16-bit weights accumulate each rank's micro-batches in bf16 before the fp32 reduction, so any DP
# layout rounds differently from one rank: the same run to bf16's precision (1e-3 of the loss).
run one_bf16w 1 --moe-router gshard --params-dtype bf16
run ep2_bf16w 2 --moe-router gshard --params-dtype bf16 --expert-model-parallel-size 2
check "bf16 weights: EP 2 within bf16 rounding of one rank" losses_within one_bf16w ep2_bf16w 1e-3

# A checkpoint holds every expert under its own name, whatever EP size wrote it...
check "expert tensors named h.{i}.mlp.experts.{j}" "$PY" -c "
import json, struct
raw = open('ck_ep4_switch/model.safetensors', 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]
keys = json.loads(raw[8:8 + n]).keys()
assert all('h.%d.mlp.experts.%d.c_fc.weight' % (l, e) in keys for l in range(2) for e in range(4)), sorted(keys)
assert 'h.0.mlp.router.weight' in keys and 'h.0.mlp.c_fc.weight' not in keys"
# ...and resumes under another: 2 steps on EP 2, then 2 more on one rank = 4 on one rank.
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --moe-router switch --moe-token-drop-policy position \
  --expert-model-parallel-size 2 --save ck_half --steps 2 > half.jsonl 2> half.err
check "EP 2 half run: exit 0" test $? -eq 0
"$LATTICE" train "${MODEL[@]}" --moe-router switch --moe-token-drop-policy position --resume ck_half \
  --save ck_resumed > resumed_tail.jsonl 2> resumed.err
check "resumed on one rank: exit 0" test $? -eq 0
cat half.jsonl resumed_tail.jsonl | grep '"event":"step"' > resumed.jsonl
grep '"event":"summary"' resumed_tail.jsonl >> resumed.jsonl
check "EP 2 → one rank resume continues the one-rank run" compare resumed one_switch

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
