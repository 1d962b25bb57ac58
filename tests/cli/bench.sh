#!/usr/bin/env bash
# `lattice bench` measures this machine; `lattice plan --hardware FILE.json` plans with what it measured.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
failures=0
check() {
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
"$LATTICE" bench --seconds 0.2 --json > cpu.json
check "bench exits 0" test $? -eq 0
check "bench reports positive rates" python3 -c "
import json, sys
d = json.load(open('cpu.json'))
sys.exit(0 if d['event'] == 'bench' and d['gemm_fp32_flops'] > 1e9 and d['gemm_bf16_flops'] > 1e9 and d['memory_bandwidth'] > 1e8 else 1)"
SHAPE=(--layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --micro-batch 4 --global-batch 4 --activation-dtype fp32 --json)
"$LATTICE" plan --hardware cpu.json "${SHAPE[@]}" > measured.json
"$LATTICE" plan --hardware cpu "${SHAPE[@]}" > preset.json
check "plan uses the measured rates" python3 -c "
import json, sys
a, b = json.load(open('measured.json')), json.load(open('preset.json'))
sys.exit(0 if a['predicted_iteration_s'] > 0 and a['predicted_iteration_s'] != b['predicted_iteration_s'] else 1)"
echo '{"event":"bench"}' > broken.json
"$LATTICE" plan --hardware broken.json "${SHAPE[@]}" > /dev/null 2> err.txt
check "a broken bench file: exit 1 with one line" test $? -eq 1 -a "$(wc -l < err.txt)" -eq 1
check "names the file" grep -q "broken.json" err.txt
# A rate no machine measures (it once planned a step of 6.5e306 s and an MFU of inf%).
echo '{"gemm_fp32_flops": 2e11, "gemm_bf16_flops": 4e11, "memory_bandwidth": 1e-300}' > absurd.json
"$LATTICE" plan --hardware absurd.json "${SHAPE[@]}" > /dev/null 2> err.txt
check "an absurd rate: exit 1 with one line naming the range" \
  bash -c "[ $? -eq 1 ] && [ \$(wc -l < err.txt) -eq 1 ] && grep -q 'measured rates must be numbers from 1e3 to 1e18' err.txt"
# Layer costs of a shape no bench times (a float hidden size converted silently, a made-up dtype kept).
for bad in '"hidden": 1e30|layer_costs.hidden must be a whole number' '"heads": -5|layer_costs.heads must be a whole number' \
           '"activation_dtype": "zz"|layer_costs.activation_dtype "zz" is not a value lattice bench writes'; do
  field=${bad%%|*} words=${bad#*|}
  python3 -c "
import json, sys
c = {'hidden': 64, 'heads': 4, 'seq_len': 32, 'micro_batch': 2, 'vocab': 256, 'activation_dtype': 'fp32',
     'recompute': 'none', 'attention': 'unfused', 'forward_s': 1e-3, 'backward_input_s': 1e-3,
     'backward_weight_s': 1e-3, 'head_s': 1e-3}
c.update(json.loads('{' + sys.argv[1] + '}'))
print(json.dumps({'gemm_fp32_flops': 2e11, 'gemm_bf16_flops': 4e11, 'memory_bandwidth': 2e10, 'layer_costs': c}))" "$field" > costs.json
  "$LATTICE" plan --hardware costs.json "${SHAPE[@]}" > /dev/null 2> err.txt
  check "layer costs with $field: exit 1 with one line naming it" \
    bash -c "[ $? -eq 1 ] && [ \$(wc -l < err.txt) -eq 1 ] && grep -qF -- '$words' err.txt"
done
"$LATTICE" bench --seconds 0 > /dev/null 2> err.txt
check "bad --seconds: exit 1" test $? -eq 1
# Flags a bench ignored (third hostile pass): model flags without --layer-costs, --layers and the
# optimizer's and pipeline's with it, the MPI bounds without mpirun, --save on another device.
bench_refuses() {  # NAME PATTERN FLAGS...
  local name=$1 pattern=$2; shift 2
  "$LATTICE" bench --seconds 0.01 --threads 1 "$@" > /dev/null 2> err.txt
  local status=$?
  check "$name: exit 1 (got $status), one line naming it" test "$status" -eq 1 -a "$(wc -l < err.txt)" -eq 1 -a \
    "$(grep -cF -- "$pattern" err.txt)" -eq 1
}
bench_refuses "--hidden without --layer-costs" "--hidden applies to --layer-costs only" --hidden 4096
bench_refuses "--layers with --layer-costs" "--layers does not apply to --layer-costs, which times one layer" \
  --layer-costs --layers 7 --hidden 32 --heads 2 --seq-len 16
bench_refuses "--zero with --layer-costs" "--zero does not apply to --layer-costs" --layer-costs --zero 1 --hidden 32 --heads 2 --seq-len 16
# Context parallelism: one line in either mode (the two lines sent the user from one to the other).
LAYER=(--layer-costs --hidden 32 --heads 2 --seq-len 16)
bench_refuses "--cp 2" "--context-parallel-size: lattice bench takes no context parallelism" --cp 2
bench_refuses "--cp 2 --layer-costs" "--context-parallel-size: lattice bench takes no context parallelism" "${LAYER[@]}" --cp 2
bench_refuses "--cp-comm-type" "--cp-comm-type: lattice bench takes no context parallelism" --cp-comm-type a2a
bench_refuses "--cp-comm-type --layer-costs" "--cp-comm-type: lattice bench takes no context parallelism" "${LAYER[@]}" \
  --cp-comm-type a2a
bench_refuses "--budget without mpirun" "--budget applies under mpirun only" --budget 3
bench_refuses "--save on cpu-guarded" "--save keeps the CPU's rates" --layer-costs --device cpu-guarded --hidden 32 --heads 2 \
  --seq-len 16 --save
# A shape past any machine (its logits alone 1 TiB: 4096 x 1024 positions x 65,536 x 4 bytes) is refused
# before anything is allocated; it grew towards the OOM killer (4.4 GB resident after 30 s) before.
bench_refuses "--layer-costs past the machine" "--layer-costs (weights and gradients of 3 layers, one micro-batch's activations, workspace, logits) needs at least" \
  --layer-costs --hidden 64 --heads 2 --seq-len 1024 --vocab 65536 --micro-batch 4096
echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
