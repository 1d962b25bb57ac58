#!/usr/bin/env bash
# Context parallelism (--context-parallel-size c, --cp-comm-type a2a: DeepSpeed-Ulysses, docs/design.md
# §5.1) trains the one-rank model: same seed, data and dropout (on), per-step losses within 1e-5
# relative and final weights within 1e-5 (lib/compare.sh), alone and with TP + SP, DP + ZeRO,
# fused attention and full recompute; each rank keeps 1/c of a layer's bytes, as the formula says;
# the all-to-alls move the bytes the formula says; bad layouts are one line.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"

# s = 32 in 2c = 4 chunks of 8: rank 0 holds positions 0-7 and 24-31, rank 1 8-23.
run one 1
run cp2 2 --context-parallel-size 2
run cp2_full 2 --cp 2 --recompute full
run one_fused 1 --attention fused
run cp2_fused 2 --cp 2 --cp-comm-type a2a --attention fused
run cp2_tp2_sp 4 --cp 2 --tensor-model-parallel-size 2 --sequence-parallel
run cp2_dp2_zero1 4 --cp 2 --zero 1
for name in cp2 cp2_full cp2_tp2_sp cp2_dp2_zero1; do
  check "$name trains the one-rank model" compare "$name"
done
check "cp2_fused trains the one-rank fused model" compare cp2_fused one_fused

check "every CP rank keeps half a layer's bytes of one rank (measured), and the formula says so" "$PY" -c "
import json, sys
last = lambda f: [json.loads(l) for l in open(f)][-1]
one = last('one.jsonl')['memory']['ranks'][0]
for f, ref, c in [('cp2.jsonl', one, 2), ('cp2_dp2_zero1.jsonl', one, 2),
                  ('cp2_fused.jsonl', last('one_fused.jsonl')['memory']['ranks'][0], 2),
                  ('cp2_tp2_sp.jsonl', one, 4)]:
    for r in last(f)['memory']['ranks']:
        for m, fo, m1, fo1 in zip(r['activation_bytes_per_layer'], r['activation_bytes_per_layer_formula'],
                                  ref['activation_bytes_per_layer'], ref['activation_bytes_per_layer_formula']):
            print(f, r['rank'], m, fo, m1, fo1)
            # Exactly 1/c of one rank's bytes, measured and formula alike (c·t under TP + SP: every
            # tensor of the row is split over the CP and the TP rank).
            if m * c != m1 or fo * c != fo1: sys.exit('%s rank %d: %d, %d against one rank %d, %d' % (f, r['rank'], m, fo, m1, fo1))
            # The formula leaves out only the LayerNorm statistics, 16 bytes a row of the rank's positions.
            if m - fo != 16 * 32 * 2 // c: sys.exit('%s rank %d: measured %d, formula %d' % (f, r['rank'], m, fo))
        o, of = r['activation_bytes_outside_layers'], r['activation_bytes_outside_layers_formula']
        if not (of <= o <= 1.02 * of): sys.exit('%s rank %d outside the layers: %d vs %d' % (f, r['rank'], o, of))
"
check "the CP all-to-alls move the formula's bytes; gradients reduce over DP x CP as the formula says" "$PY" -c "
import json, sys
# Beyond the gradients' formula the DP-with-CP group carries the loss's fp32 pair (8 bytes a rank) and,
# under ZeRO, the norm's sums of squares over the shard group: at most 16 bytes per other rank.
for f, n in [('cp2.jsonl', 2), ('cp2_full.jsonl', 2), ('cp2_fused.jsonl', 2), ('cp2_tp2_sp.jsonl', 2),
             ('cp2_dp2_zero1.jsonl', 4)]:
    for r in [json.loads(l) for l in open(f)][-1]['comm']['ranks']:
        print(f, r['rank'], r['cp'], r['cp_formula'], r['dp'], r['dp_formula'])
        if not (r['cp'] > 0 and abs(r['cp'] - r['cp_formula']) <= 1): sys.exit('%s: cp %s' % (f, r))
        if not (0 <= r['dp'] - r['dp_formula'] <= 16 * (n - 1)): sys.exit('%s: dp %s' % (f, r))
"

# Bad layouts: one line from rank 0, every rank exits non-zero.
bad_layout "s not divisible by 2c" "is not divisible by 4" 2 --cp 2 --seq-len 30
bad_layout "s not divisible by 2c·t under SP" "divisible by 2c·t = 8" 4 --cp 2 --tensor-model-parallel-size 2 \
  --sequence-parallel --seq-len 36
bad_layout "heads per TP rank not divisible by c" "are not divisible by 2" 4 --cp 2 --tensor-model-parallel-size 2 \
  --heads 2
bad_layout "p2p not built" "p2p (the ring of K/V blocks) is not built yet" 2 --cp 2 --cp-comm-type p2p
bad_layout "world not divisible by t·c·p" "world size 3 is not divisible by t·c·p = 2" 3 --cp 2
bad_layout "CP with a pipeline" "not built with pipeline parallelism yet" 4 --cp 2 --pipeline-model-parallel-size 2
"$LATTICE" train "${MODEL[@]}" --cp 2 > bad.out 2> bad.err
status=$?
check "one process asked for CP: exit 1 ($status)" test "$status" -eq 1
check "one process asked for CP: one line naming mpirun" test "$(wc -l < bad.err)" -eq 1 -a "$(grep -c mpirun bad.err)" -eq 1
"$LATTICE" train "${MODEL[@]}" --cp-comm-type ring > bad.out 2> bad.err
status=$?
check "--cp-comm-type ring: exit 1 ($status), one line" test "$status" -eq 1 -a "$(wc -l < bad.err)" -eq 1
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 > plan.out 2> plan.err
status=$?
check "the planner models CP 2: exit 0 ($status), its layout names c and its all-to-alls" \
  test "$status" -eq 0 -a "$(grep -c 'c=2' plan.out)" -ge 1 -a "$(grep -c 'CP all-to-all' plan.out)" -eq 1
# The planner refuses what the trainer refuses, in the trainer's words (core/config.hpp).
for bad in "--seq-len 30:is not divisible by 4" "--heads 2 --hidden 64 --tensor-model-parallel-size 2 --gpus 4:are not divisible by 2" \
           "--pipeline-model-parallel-size 2 --gpus 4:not built with pipeline parallelism yet"; do
  flags=${bad%%:*} words=${bad#*:}
  # shellcheck disable=SC2086
  "$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 $flags > bad.out 2> bad.err
  status=$?
  check "plan --cp 2 $flags: exit 1 ($status), one line naming '$words'" \
    test "$status" -eq 1 -a "$(wc -l < bad.err)" -eq 1 -a "$(grep -c "$words" bad.err)" -eq 1
done
"$LATTICE" bench --layer-costs --seconds 0.01 --cp 2 > bad.out 2> bad.err
status=$?
check "bench --layer-costs (one process) does not take CP: exit 1 ($status), one line" \
  test "$status" -eq 1 -a "$(wc -l < bad.err)" -eq 1 -a "$(grep -c 'only lattice train and lattice plan' bad.err)" -eq 1

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
