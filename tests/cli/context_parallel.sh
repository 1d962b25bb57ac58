#!/usr/bin/env bash
# Context parallelism (--context-parallel-size c, docs/design.md §5.1), both ways its ranks share
# attention: the ring (--cp-comm-type p2p, the default, on the fused kernel) and DeepSpeed-Ulysses'
# all-to-alls (a2a). Each trains the one-rank model: same seed, data and dropout (on), per-step losses
# within 1e-5 relative and final weights within 1e-5 (lib/compare.sh), at c = 2 and 4, with TP + SP,
# DP + ZeRO, full recompute and a pipeline (every schedule, and checkpoints across CP × PP and one rank);
# each rank keeps 1/c of a layer's bytes, as the formula says, and a pipeline stage what eq. 5 and the
# planner say; the all-to-alls and the ring move the bytes the formula says, the stages' messages S/c
# positions, and the ring's buffers are the planner's; Mixture-of-Experts under either (experts
# replicated, and EP folded over CP) trains the one-rank model and routes as one rank, and a CP × EP
# checkpoint loads on one rank; bad layouts are one line.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"

# s = 32 in 2c = 4 chunks of 8: rank 0 holds positions 0-7 and 24-31, rank 1 8-23.
run one 1
run cp2 2 --context-parallel-size 2 --cp-comm-type a2a
run cp2_full 2 --cp 2 --cp-comm-type a2a --recompute full
run one_fused 1 --attention fused
run cp2_fused 2 --cp 2 --cp-comm-type a2a --attention fused
run cp2_tp2_sp 4 --cp 2 --cp-comm-type a2a --tensor-model-parallel-size 2 --sequence-parallel
run cp2_dp2_zero1 4 --cp 2 --cp-comm-type a2a --zero 1
run cp4 4 --cp 4 --cp-comm-type a2a  # one head a rank: a/c = 1
for name in cp2 cp2_full cp2_tp2_sp cp2_dp2_zero1 cp4; do
  check "$name trains the one-rank model" compare "$name"
done
check "cp2_fused trains the one-rank fused model" compare cp2_fused one_fused
# The ring: c = 4 is 8 chunks of 4 positions, so every rank's blocks meet every other's.
run ring2 2 --cp 2 --attention fused
run ring4 4 --cp 4 --cp-comm-type p2p --attention fused
run ring2_full 2 --cp 2 --attention fused --recompute full
run ring2_tp2_sp 4 --cp 2 --attention fused --tensor-model-parallel-size 2 --sequence-parallel
run ring2_dp2_zero3 4 --cp 2 --attention fused --zero 3
for name in ring2 ring4 ring2_full ring2_tp2_sp ring2_dp2_zero3; do
  check "$name trains the one-rank fused model" compare "$name" one_fused
done

# CP × PP (world 4 in the order tp, cp, dp, pp: CP pairs {0,1} on stage 0, {2,3} on stage 1). Every
# schedule under Ulysses: 1F1B, ZB-H1 (the split backward), interleaved and PipeDream-2BW on 4 layers (2BW's
# reference is the one-rank 2BW run, docs/design.md §6.3), GPipe through the checkpoints below; and the
# ring under 1F1B (its K/V traffic runs on the CP group, the stages' messages on the PP group).
P2=(--cp 2 --cp-comm-type a2a --pipeline-model-parallel-size 2)
run cp2_pp2 4 "${P2[@]}"
run cp2_pp2_ring 4 --cp 2 --cp-comm-type p2p --attention fused --pipeline-model-parallel-size 2
run cp2_pp2_zb 4 "${P2[@]}" --schedule zb-h1
run one_l4 1 --layers 4
run cp2_pp2_interleaved 4 "${P2[@]}" --layers 4 --schedule interleaved --virtual-stages 2
run one_l4_2bw 1 --layers 4 --schedule pipedream-2bw
run cp2_pp2_2bw 4 "${P2[@]}" --layers 4 --schedule pipedream-2bw
run cp2_pp2_ring_full 4 --cp 2 --attention fused --pipeline-model-parallel-size 2 --layers 4 --recompute full
check "cp2_pp2 (1F1B) trains the one-rank model" compare cp2_pp2
check "cp2_pp2_zb (ZB-H1) trains the one-rank model" compare cp2_pp2_zb
check "cp2_pp2_ring (p2p, 1F1B) trains the one-rank fused model" compare cp2_pp2_ring one_fused
check "cp2_pp2_interleaved trains the one-rank 4-layer model" compare cp2_pp2_interleaved one_l4
check "cp2_pp2_2bw trains the one-rank 2BW model" compare cp2_pp2_2bw one_l4_2bw
run one_l4_fused 1 --layers 4 --attention fused
check "cp2_pp2_ring_full (full recompute) trains the one-rank fused 4-layer model" compare cp2_pp2_ring_full one_l4_fused
# Checkpoints are the one-rank layout whatever wrote them: 2 steps on one rank, then 2 resumed under
# CP 2 × PP 2 with GPipe; and back, 2 steps under CP 2 × PP 2 (1F1B), then 2 resumed on one rank. Each
# pair is the 4-step one-rank run.
train_on() {  # train_on NP FLAGS...: the small model on NP ranks (one process for 1)
  local np=$1; shift
  if [ "$np" -eq 1 ]; then "$LATTICE" train "${MODEL[@]}" "$@"
  else timeout 300 mpirun --oversubscribe -np "$np" "$LATTICE" train "${MODEL[@]}" "$@"; fi
}
resumed() {  # resumed NAME NP1 FLAGS1... -- NP2 FLAGS2...: 2 steps, then 2 resumed; both halves' steps in NAME.jsonl
  local name=$1 np1=$2 first=(); shift 2
  while [ "$1" != "--" ]; do first+=("$1"); shift; done
  local np2=$2; shift 2
  train_on "$np1" "${first[@]}" --steps 2 --save "ck_${name}_half" > "${name}_half.jsonl" 2> "${name}_half.err"
  check "$name: first half exit 0" test $? -eq 0
  train_on "$np2" "$@" --resume "ck_${name}_half" --save "ck_$name" > "${name}_tail.jsonl" 2> "${name}_tail.err"
  check "$name: resumed half exit 0" test $? -eq 0
  cat "${name}_half.jsonl" "${name}_tail.jsonl" | grep '"event":"step"' > "$name.jsonl"
  grep '"event":"summary"' "${name}_tail.jsonl" >> "$name.jsonl"
}
resumed one_to_cp2_pp2_gpipe 1 -- 4 "${P2[@]}" --schedule gpipe
resumed cp2_pp2_to_one 4 "${P2[@]}" -- 1
check "one rank → CP 2 × PP 2 (GPipe) resume continues the one-rank run" compare one_to_cp2_pp2_gpipe
check "CP 2 × PP 2 → one rank resume continues the one-rank run" compare cp2_pp2_to_one

# The text comm report names the ring as the ring (it said "all-to-all (Ulysses: ...)" beside the ring's bytes).
no_json=(); for a in "${MODEL[@]}"; do [ "$a" = --json ] || no_json+=("$a"); done
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${no_json[@]}" --steps 1 --cp 2 --attention fused --comm-report \
  > /dev/null 2> ring_report.err
check "--comm-report on the ring: a 'cp ring' line, no all-to-all" \
  bash -c "grep -q 'rank 0: cp ring ' ring_report.err && ! grep -q 'cp all-to-all' ring_report.err"
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${no_json[@]}" --steps 1 --cp 2 --cp-comm-type a2a --comm-report \
  > /dev/null 2> a2a_report.err
check "--comm-report on Ulysses: a 'cp all-to-all' line" grep -q 'rank 0: cp all-to-all .*(Ulysses' a2a_report.err

check "every CP rank keeps half a layer's bytes of one rank (measured), and the formula says so" "$PY" -c "
import json, sys
last = lambda f: [json.loads(l) for l in open(f)][-1]
one = last('one.jsonl')['memory']['ranks'][0]
fused = last('one_fused.jsonl')['memory']['ranks'][0]
for f, ref, c in [('cp2.jsonl', one, 2), ('cp2_dp2_zero1.jsonl', one, 2), ('cp2_pp2.jsonl', one, 2),
                  ('cp2_fused.jsonl', fused, 2), ('cp2_tp2_sp.jsonl', one, 4), ('cp4.jsonl', one, 4), ('ring2.jsonl', fused, 2),
                  ('ring4.jsonl', fused, 4), ('ring2_tp2_sp.jsonl', fused, 4), ('ring2_dp2_zero3.jsonl', fused, 2)]:
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
        if 'pp2' in f:
            # A stage keeps a few of the buffers outside the layers, so 2% of so little is no bound: the
            # formula leaves out exactly the first stage's token ids (4 bytes a position) and the last
            # stage's final LayerNorm statistics (8 bytes a position), of b·S/c positions.
            on_first, on_last = r['pp_rank'] == 0, r['pp_rank'] == 1
            if o - of != (4 * on_first + 8 * on_last) * 2 * 32 // c: sys.exit('%s rank %d outside the layers: %d vs %d' % (f, r['rank'], o, of))
        elif not (of <= o <= 1.02 * of): sys.exit('%s rank %d outside the layers: %d vs %d' % (f, r['rank'], o, of))
"
# Per stage, against eq. 5 (1F1B's first stage holds p = 2 micro-batches of its layer, GPipe's all 4) and
# against the planner's prediction for the same layout (lattice plan --json, memory_by_stage): the kept
# activations within 1%, the accounted peak (every category at one instant) within plan_memory's 5%.
for run in cp2_pp2:1f1b one_to_cp2_pp2_gpipe:gpipe; do
  "$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 8 \
    --activation-dtype fp32 --params-dtype fp32 --hardware cpu --gpus 4 "${P2[@]}" --schedule "${run#*:}" --json \
    > "${run%%:*}.plan.json" 2> "${run%%:*}.plan.err"
  check "plan ${P2[*]} --schedule ${run#*:}: exit 0" test $? -eq 0
  check "${run%%:*}: each stage keeps eq. 5's and the planner's activations" "$PY" - "${run%%:*}" "${run#*:}" <<'PYEOF'
import json, sys
run, schedule = sys.argv[1], sys.argv[2]
plan = json.load(open(run + '.plan.json'))['memory_by_stage']
for r in [json.loads(l) for l in open(run + '.jsonl')][-1]['memory']['ranks']:
    got, stage = r['activation_peak_bytes'], plan[r['pp_rank']]
    per = r['activation_bytes_per_layer_formula'][0]
    print(run, r['rank'], got, stage['activations'], r['accounted_peak_bytes'], stage['accounted_peak_bytes'])
    if r['pp_rank'] == 0:
        want = per * (2 if schedule == '1f1b' else 4)
        if not (want <= got <= 1.03 * want): sys.exit('%s rank %d: peak %d, eq. 5 says %d' % (run, r['rank'], got, want))
    if abs(got - stage['activations']) > 0.01 * stage['activations']: sys.exit('%s rank %d: activations %d, predicted %d' % (run, r['rank'], got, stage['activations']))
    a, pa = r['accounted_peak_bytes'], stage['accounted_peak_bytes']
    if abs(a - pa) > 0.05 * pa: sys.exit('%s rank %d: accounted peak %d, predicted %d' % (run, r['rank'], a, pa))
PYEOF
done
check "the stages' messages carry each rank's S/c positions: b·(S/c)·h fp32 a micro-batch" "$PY" -c "
import json, sys
# One activation (stage 0) or gradient (stage 1) sent a micro-batch: 4 micro-batches of b = 2 rows.
want = 4 * 2 * (32 // 2) * 64 * 4
for r in [json.loads(l) for l in open('cp2_pp2.jsonl')][-1]['comm']['ranks']:
    send = r['by_op']['pp']['send']
    print(r['rank'], send, want)
    if send['calls'] != 4 or send['sent_bytes'] != want: sys.exit('rank %d: %s, want %d bytes' % (r['rank'], send, want))
"
check "the CP all-to-alls move the formula's bytes; gradients reduce over DP x CP as the formula says" "$PY" -c "
import json, sys
# Beyond the gradients' formula the DP-with-CP group carries the loss's fp32 pair (8 bytes a rank) and,
# under ZeRO, the norm's sums of squares over the shard group: at most 16 bytes per other rank.
for f, n in [('cp2.jsonl', 2), ('cp2_full.jsonl', 2), ('cp2_fused.jsonl', 2), ('cp2_tp2_sp.jsonl', 2),
             ('cp2_dp2_zero1.jsonl', 4), ('cp4.jsonl', 4), ('cp2_pp2.jsonl', 2), ('ring2.jsonl', 2), ('ring4.jsonl', 4),
             ('ring2_full.jsonl', 2), ('ring2_tp2_sp.jsonl', 2), ('ring2_dp2_zero3.jsonl', 4),
             ('cp2_pp2_ring.jsonl', 2), ('cp2_pp2_zb.jsonl', 2), ('cp2_pp2_interleaved.jsonl', 2),
             ('cp2_pp2_2bw.jsonl', 2), ('cp2_pp2_ring_full.jsonl', 2)]:
    # Each stage's own layers and re-runs; PipeDream-2BW's last step drains (its previous batch's
    # last backwards and two updates, each with ZeRO's norm sums, none of these runs with ZeRO).
    for r in [json.loads(l) for l in open(f)][-1]['comm']['ranks']:
        print(f, r['rank'], r['cp'], r['cp_formula'], r['dp'], r['dp_formula'])
        if not (r['cp'] > 0 and abs(r['cp'] - r['cp_formula']) <= 1): sys.exit('%s: cp %s' % (f, r))
        if not (0 <= r['dp'] - r['dp_formula'] <= 16 * (n - 1)): sys.exit('%s: dp %s' % (f, r))
"

# Mixture-of-Experts (noisy top-k, capacity factor 1 so tokens drop, expert dropout and routing noise
# on): CP 2 with the experts replicated (Ulysses), and CP 2 × EP 2 on 2 ranks (the ring; EP folds over
# DP × CP, so the EP group is the CP group), train the one-rank model. Every CP rank routes the whole
# micro-batch's gathered logits, so capacity, drops, loads and the aux loss are one rank's.
MOE=(--num-experts 4 --expert-dropout 0.1)
run one_moe 1 "${MOE[@]}"
run one_moe_fused 1 "${MOE[@]}" --attention fused
run cp2_moe 2 "${MOE[@]}" --cp 2 --cp-comm-type a2a
run cp2_ep2_moe 2 "${MOE[@]}" --cp 2 --cp-comm-type p2p --attention fused --expert-model-parallel-size 2
check "cp2_moe trains the one-rank MoE model" compare cp2_moe one_moe
check "cp2_ep2_moe trains the one-rank MoE model" compare cp2_ep2_moe one_moe_fused
check "MoE under CP routes as one rank: aux loss, dropped share, loads; each CP rank routes its own positions" "$PY" -c "
import json, sys
read = lambda f: [json.loads(l) for l in open(f)]
steps = lambda r: [e for e in r if e.get('event') == 'step']
for f, ref in [('cp2_moe.jsonl', 'one_moe.jsonl'), ('cp2_ep2_moe.jsonl', 'one_moe_fused.jsonl')]:
    r, one = read(f), read(ref)
    for x, y in zip(steps(one), steps(r)):
        print(f, x['moe_aux_loss'], y['moe_aux_loss'], x['moe_dropped_fraction'], y['moe_dropped_fraction'])
        if not (x['moe_load_min'] == y['moe_load_min'] and x['moe_load_max'] == y['moe_load_max']): sys.exit('%s loads %s' % (f, y))
        if abs(x['moe_dropped_fraction'] - y['moe_dropped_fraction']) > 1e-6: sys.exit('%s dropped %s' % (f, y))
        if abs(x['moe_aux_loss'] - y['moe_aux_loss']) > 1e-5 * abs(x['moe_aux_loss']): sys.exit('%s aux %s' % (f, y))
    if one[-1]['moe_load'] != r[-1]['moe_load']: sys.exit('%s: run loads differ' % f)
    if not steps(one)[-1]['moe_dropped_fraction'] > 0: sys.exit('capacity 1 should drop some tokens')
    # The last micro-batch's assignments: the CP ranks' (their own positions) add up to one rank's.
    ranks = r[-1]['memory']['ranks']
    got = [sum(x) for x in zip(*[q['moe_assignments'] for q in ranks])]
    if got != one[-1]['memory']['ranks'][0]['moe_assignments']: sys.exit('%s assignments %s' % (f, got))
"
check "MoE under CP: each rank keeps the formula's bytes; the comm formulas hold" "$PY" -c "
import json, sys
for f in ['one_moe.jsonl', 'one_moe_fused.jsonl', 'cp2_moe.jsonl', 'cp2_ep2_moe.jsonl']:
    s = [json.loads(l) for l in open(f)][-1]
    c = 1 if f.startswith('one') else 2
    for r in s['memory']['ranks']:
        print(f, r['rank'], r['activation_bytes_per_layer'], r['activation_bytes_per_layer_formula'])
        # The formula leaves out only the LayerNorm statistics, 16 bytes a row of the rank's positions.
        for m, fo in zip(r['activation_bytes_per_layer'], r['activation_bytes_per_layer_formula']):
            if m - fo != 16 * 32 * 2 // c: sys.exit('%s rank %d: measured %d, formula %d' % (f, r['rank'], m, fo))
    if c == 1: continue
    for r in s['comm']['ranks']:
        print(f, {k: r[k] for k in ('cp', 'cp_formula', 'dp', 'dp_formula', 'expert_dp', 'expert_dp_formula', 'ep', 'ep_formula_balanced')})
        # Ulysses' all-to-alls or the ring's blocks, plus the router logits' all-gather, exactly.
        if abs(r['cp'] - r['cp_formula']) > 1: sys.exit('%s: cp %s' % (f, r))
        # Dense gradients over DP x CP; beyond them the loss's fp32 pair and the routing statistics
        # (3 + 2 layers x 4 experts floats, all-reduced): at most 16 + 8 x 11 bytes.
        if not (0 <= r['dp'] - r['dp_formula'] <= 16 + 8 * 11): sys.exit('%s: dp %s' % (f, r))
        # Expert gradients over N_d·c/e ranks: 2 with the experts replicated, 1 (none) under EP 2.
        if abs(r['expert_dp'] - r['expert_dp_formula']) > 1: sys.exit('%s: expert_dp %s' % (f, r))
        if ('ep2' in f) != (r['expert_dp'] == 0): sys.exit('%s: expert_dp %s' % (f, r))
        # EP 2: the rows leaving a rank lie between none and all of its A (twice the balanced half).
        if 'ep2' in f and not (0 < r['ep'] <= 2 * r['ep_formula_balanced']): sys.exit('%s: ep %s' % (f, r))
"
# The CP × EP checkpoint is written in the one-rank layout: one process evaluates it as the one-rank
# model's own checkpoint.
for name in one_moe_fused cp2_ep2_moe; do
  "$LATTICE" eval --checkpoint "ck_$name" --data data/val.bin --batches 2 --json > "eval_$name.json" 2> "eval_$name.err"
  check "eval ck_$name on one rank: exit 0" test $? -eq 0
done
check "the CP 2 x EP 2 checkpoint loads on one rank: eval loss as the one-rank model's (1e-5)" "$PY" -c "
import json, sys
a, b = [json.loads(open('eval_%s.json' % n).read().strip().splitlines()[-1])['loss'] for n in ('one_moe_fused', 'cp2_ep2_moe')]
print(a, b)
sys.exit(0 if abs(a - b) <= 1e-5 * abs(a) else 1)
"

# Bad layouts: one line from rank 0, every rank exits non-zero.
bad_layout "s not divisible by 2c" "is not divisible by 4" 2 --cp 2 --seq-len 30
bad_layout "s not divisible by 2c·t under SP" "divisible by 2c·t = 8" 4 --cp 2 --tensor-model-parallel-size 2 \
  --sequence-parallel --seq-len 36
bad_layout "heads per TP rank not divisible by c (Ulysses)" "are not divisible by 2" 4 --cp 2 --cp-comm-type a2a \
  --tensor-model-parallel-size 2 --heads 2
bad_layout "the ring without fused attention" "runs on the fused attention kernel: add --attention fused" 2 --cp 2
bad_layout "world not divisible by t·c·p" "world size 3 is not divisible by t·c·p = 2" 3 --cp 2 --attention fused
bad_layout "PipeDream-2BW with ZeRO-3 over the CP ranks" "zero 3 shards them over the data-parallel and context-parallel ranks" \
  4 --cp 2 --attention fused --pipeline-model-parallel-size 2 --schedule pipedream-2bw --zero 3
bad_layout "EP not dividing N_d·c" "does not divide the data-parallel × context-parallel size N_d·c = 2" 2 --cp 2 \
  --cp-comm-type a2a --num-experts 4 --expert-model-parallel-size 4
"$LATTICE" train "${MODEL[@]}" --cp 2 --attention fused > bad.out 2> bad.err
status=$?
check "one process asked for CP: exit 1 ($status)" test "$status" -eq 1
check "one process asked for CP: one line naming mpirun" test "$(wc -l < bad.err)" -eq 1 -a "$(grep -c mpirun bad.err)" -eq 1
"$LATTICE" train "${MODEL[@]}" --cp-comm-type ring > bad.out 2> bad.err
status=$?
check "--cp-comm-type ring: exit 1 ($status), one line" test "$status" -eq 1 -a "$(wc -l < bad.err)" -eq 1
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 --cp-comm-type a2a \
  > plan.out 2> plan.err
status=$?
check "the planner models CP 2 (Ulysses): exit 0 ($status), its layout names c and its all-to-alls" \
  test "$status" -eq 0 -a "$(grep -c 'c=2' plan.out)" -ge 1 -a "$(grep -c 'CP all-to-all' plan.out)" -eq 1
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 --attention fused \
  > plan.out 2> plan.err
status=$?
check "the planner models CP 2 (the ring): exit 0 ($status), its layout names c and the ring" \
  test "$status" -eq 0 -a "$(grep -c 'c=2' plan.out)" -ge 1 -a "$(grep -c 'CP ring (p2p' plan.out)" -eq 1
# The ring needs no heads a rank per CP rank (a/t < c): the planner asked oneDNN for the scratchpad of
# the unfused attention's GEMMs of a/(t·c) = 0 heads, which the ring never makes, and stopped in
# oneDNN's words.
"$LATTICE" plan --layers 2 --hidden 64 --heads 1 --seq-len 32 --vocab 256 --gpus 2 --cp 2 --attention fused \
  > plan.out 2> plan.err
status=$?
check "the planner models the ring with one head over CP 2: exit 0 ($status)" \
  test "$status" -eq 0 -a "$(grep -c 'CP ring (p2p' plan.out)" -eq 1 -a ! -s plan.err
# The ring's buffers (ten of a rank's K-sized tensors) are the planner's communication bytes.
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 --attention fused \
  --micro-batch 2 --global-batch 8 --json > plan_ring.json 2> plan.err
check "the ring's measured communication peak is the planner's, every rank" "$PY" -c "
import json, sys
plan = json.load(open('plan_ring.json'))['memory_by_stage'][0]['communication']
for r in [json.loads(l) for l in open('ring2.jsonl')][-1]['memory']['ranks']:
    got = r['category_peak_bytes']['communication']
    print(r['rank'], got, plan)
    if got != plan: sys.exit('rank %d: %d measured, %d planned' % (r['rank'], got, plan))
"
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 4 "${P2[@]}" > plan.out 2> plan.err
status=$?
check "the planner models CP 2 × PP 2: exit 0 ($status), its layout names c and p, all-to-alls and point-to-point" \
  test "$status" -eq 0 -a "$(grep -c 'c=2/a2a p=2' plan.out)" -ge 1 -a "$(grep -c 'CP all-to-all' plan.out)" -eq 1 \
  -a "$(grep -c 'PP point-to-point' plan.out)" -eq 1 -a "$(grep -c 'every byte, stage 1' plan.out)" -eq 1
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 --cp-comm-type a2a \
  --num-experts 4 --expert-model-parallel-size 2 > plan.out 2> plan.err
status=$?
check "the planner models an MoE model under CP 2 x EP 2 on 2 ranks: exit 0 ($status), experts over 1 expert-DP rank" \
  test "$status" -eq 0 -a "$(grep -c 'c=2/a2a .*ep=2' plan.out)" -eq 1 -a "$(grep -c 'over the 1 expert-DP ranks' plan.out)" -eq 1
# The planner refuses what the trainer refuses, in the trainer's words (core/config.hpp).
for bad in "--seq-len 30:is not divisible by 4" "--heads 2 --hidden 64 --tensor-model-parallel-size 2 --gpus 4:are not divisible by 2"; do
  flags=${bad%%:*} words=${bad#*:}
  # shellcheck disable=SC2086
  "$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --gpus 2 --cp 2 --cp-comm-type a2a $flags \
    > bad.out 2> bad.err
  status=$?
  check "plan --cp 2 $flags: exit 1 ($status), one line naming '$words'" \
    test "$status" -eq 1 -a "$(wc -l < bad.err)" -eq 1 -a "$(grep -c "$words" bad.err)" -eq 1
done
"$LATTICE" bench --layer-costs --seconds 0.01 --cp 2 > bad.out 2> bad.err
status=$?
check "bench --layer-costs (one process) does not take CP: exit 1 ($status), one line" \
  test "$status" -eq 1 -a "$(wc -l < bad.err)" -eq 1 -a "$(grep -c 'lattice bench takes no context parallelism' bad.err)" -eq 1

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
