#!/usr/bin/env bash
# Adafactor and SM3 (issue 7): sharded under ZeRO like Adam, layout-invariant (ZeRO-3 with TP + SP,
# ZeRO-2 with PP train the one-rank model), their state bytes reported and far below Adam's,
# checkpoints from a pipeline run resume on one rank, bad input fails cleanly.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
MODEL=("${MODEL[@]}" --layers 4)
export SKIP_KEY_BIAS=1  # see compare in lib/layouts.sh: the key bias's gradient is rounding noise

for opt in adafactor sm3; do
  run "one_$opt" 1 --optimizer $opt
  run "zero3_tp2_dp2_sp_$opt" 4 --optimizer $opt --zero 3 --tensor-model-parallel-size 2 --sequence-parallel
  run "zero2_pp2_dp2_$opt" 4 --optimizer $opt --zero 2 --pipeline-model-parallel-size 2
  for name in "zero3_tp2_dp2_sp_$opt" "zero2_pp2_dp2_$opt"; do
    check "$name trains the one-rank $opt model" compare "$name" "one_$opt"
  done
  # Half a run on the pipeline, the rest on one rank: the one-rank losses of steps 3-4.
  timeout 300 mpirun --oversubscribe -np 4 "$LATTICE" train "${MODEL[@]}" --optimizer $opt --steps 2 \
    --pipeline-model-parallel-size 2 --zero 1 --save "ck_half_$opt" > "half_$opt.jsonl" 2>/dev/null
  "$LATTICE" train "${MODEL[@]}" --optimizer $opt --resume "ck_half_$opt" > "resumed_$opt.jsonl" 2>/dev/null
  check "$opt: a PP2 x ZeRO-1 checkpoint resumes on one rank" continues "one_$opt.jsonl" "resumed_$opt.jsonl" 1e-5
done
run one_adamw 1
run one_adafactor_bf16 1 --optimizer adafactor --params-dtype bf16
check "Adafactor with 16-bit weights: optimizer bytes = its states + the fp32 masters, as reported" "$PY" -c "
import json, sys
r = [json.loads(l) for l in open('one_adafactor_bf16.jsonl')][-1]['memory']['ranks'][0]
f = [json.loads(l) for l in open('one_adafactor.jsonl')][-1]['memory']['ranks'][0]
psi = f['model_state_bytes']['params'] / 4
print(r['model_state_bytes'], r['model_state_bytes_formula'])
sys.exit(0 if r['model_state_bytes'] == r['model_state_bytes_formula'] and
         r['model_state_bytes']['optimizer'] == f['model_state_bytes']['optimizer'] + 4 * psi else 1)"
check "optimizer state bytes: Adafactor < 1/10 of AdamW's, SM3 (with momentum) < 6/10; reported = measured" "$PY" -c "
import json, sys
state = lambda f: [json.loads(l) for l in open(f)][-1]['memory']['ranks'][0]
a, f, s = [state('one_%s.jsonl' % o) for o in ('adamw', 'adafactor', 'sm3')]
print('adamw', a['model_state_bytes']['optimizer'], 'adafactor', f['model_state_bytes']['optimizer'], 'sm3', s['model_state_bytes']['optimizer'])
ok = f['model_state_bytes']['optimizer'] < 0.1 * a['model_state_bytes']['optimizer']
ok = ok and s['model_state_bytes']['optimizer'] < 0.6 * a['model_state_bytes']['optimizer']
ok = ok and all(r['model_state_bytes']['optimizer'] == r['model_state_bytes_formula']['optimizer'] for r in (f, s))
sys.exit(0 if ok else 1)"

expect_error "unknown optimizer" "adamw, adafactor or sm3" train "${MODEL[@]}" --optimizer lion
expect_error "resume with another optimizer" "--optimizer adamw differs from checkpoint ck_half_sm3.s sm3: its states are sm3.s" train "${MODEL[@]}" --optimizer adamw --resume ck_half_sm3

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
