#!/usr/bin/env bash
# --profile-ops (backend/op_profile.hpp): every kernel and GEMM call timed between two device
# synchronisations. The table and the summary's op_profile name the operations the model calls (the
# GEMMs, LayerNorm, the optimizer's update), their calls over the timed steps (steps 2..N: a layer's
# forward GEMMs run once a step per layer), and their time, which lies inside the steps' own time
# (each operation is timed within a step, on one thread), on the CPU and on the guarded device.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
for d in cpu cpu-guarded; do
  "$LATTICE" train "${MODEL[@]}" --profile-ops --device "$d" > "$d.jsonl" 2> "$d.err"
  check "$d: exit 0" test $? -eq 0
  check "$d: the summary has op_profile, inside the timed steps' time" "$PY" -c "
import json
recs = [json.loads(x) for x in open('$d.jsonl')]
s = [r for r in recs if r['event'] == 'summary'][0]
steps = [r for r in recs if r['event'] == 'step']
ops = {o['op']: o for o in s['op_profile']}
for name in ('linear_forward', 'layernorm_forward', 'adamw_update_segments', 'gemm'):  # AdamW's update of every tensor, with clipping's scale
    assert name in ops, (name, sorted(ops))
# 2 layers x 4 linears a layer, one forward each per micro-batch, 8 / 2 = 4 micro-batches a step, 3 timed steps
assert ops['linear_forward']['calls'] == 2 * 4 * 4 * 3, ops['linear_forward']
timed = sum(r['step_s'] for r in steps[1:])
total = sum(o['seconds'] for o in ops.values())
assert 0 < total <= timed, (total, timed)
"
done
"$LATTICE" train "${MODEL[@]}" > plain.jsonl 2> plain.err
check "without the flag: no op_profile" "$PY" -c "
import json
s = [json.loads(x) for x in open('plain.jsonl') if '\"event\":\"summary\"' in x][0]
assert 'op_profile' not in s
"
TEXT=()
for a in "${MODEL[@]}"; do [ "$a" = --json ] || TEXT+=("$a"); done
"$LATTICE" train "${TEXT[@]}" --profile-ops > /dev/null 2> text.err
check "text mode: the table" grep -q "where the time went, by operation" text.err
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
