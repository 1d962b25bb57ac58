#!/usr/bin/env bash
# --offload-optimizer DIR and --offload-params DIR (issue 15): AdamW's moments (and ZeRO-3's fp32
# weight shards) on disk, read ahead and written back a unit at a time. The same update as in memory (losses, weights and optimizer states byte for byte, one
# rank and DP 2 with ZeRO-1); no moment resident between steps (model_state_bytes.optimizer 0) and
# the staging bounded; checkpoints save and resume through it; a killed run leaves nothing in DIR;
# bad input fails cleanly.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/layouts.sh"
MODEL=("${MODEL[@]}" --layers 2 --hidden 64)

same_files() {  # same_files DIR_A DIR_B: model and optimizer files equal byte for byte
  cmp -s "$1/model.safetensors" "$2/model.safetensors" && cmp -s "$1/optimizer.safetensors" "$2/optimizer.safetensors"
}
same_losses() {  # same_losses A B: every step's loss equal
  "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
a, b = l('$1'), l('$2')
print(a, b)
sys.exit(0 if a and a == b else 1)"
}

run one 1
run one_off 1 --offload-optimizer off_one
check "one rank: offloaded moments train the same model (losses, weights, moments equal)" same_losses one.jsonl one_off.jsonl
check "one rank: the checkpoints are byte for byte the same" same_files ck_one ck_one_off
check "the offload directory is empty after the run (its files are unlinked when made)" \
  test -d off_one -a -z "$(ls -A off_one)"
check "no moment resident between steps; the staging is three units of two moments" "$PY" -c "
import json, sys
r = [json.loads(l) for l in open('one_off.jsonl')][-1]['memory']['ranks'][0]
base = [json.loads(l) for l in open('one.jsonl')][-1]['memory']['ranks'][0]
m, io = r['model_state_bytes'], r['category_peak_bytes']['offload_io']
psi = m['params'] // 4
print(m, r['model_state_bytes_formula'], 'offload_io', io, 'psi', psi)
ok = m['optimizer'] == 0 and r['model_state_bytes_formula']['optimizer'] == 0 and base['model_state_bytes']['optimizer'] == 8 * psi
sys.exit(0 if ok and io == 3 * 2 * 4 * min(psi, 1 << 20) else 1)"

run dp2_zero1 2 --zero 1
run dp2_zero1_off 2 --zero 1 --offload-optimizer off_dp
check "DP 2, ZeRO-1: offloaded shards train the same model" same_losses dp2_zero1.jsonl dp2_zero1_off.jsonl
check "DP 2, ZeRO-1: the checkpoints are byte for byte the same" same_files ck_dp2_zero1 ck_dp2_zero1_off

run dp2_zero3_bf16 2 --zero 3 --params-dtype bf16
run dp2_zero3_bf16_off 2 --zero 3 --params-dtype bf16 --offload-optimizer off_z3
check "DP 2, ZeRO-3, bf16 weights: offloaded shards train the same model" same_losses dp2_zero3_bf16.jsonl dp2_zero3_bf16_off.jsonl
run pp2_off 2 --pipeline-model-parallel-size 2 --offload-optimizer off_pp
run pp2 2 --pipeline-model-parallel-size 2
check "PP 2: each stage's offloaded moments train the same model" same_losses pp2.jsonl pp2_off.jsonl

# --offload-params: ZeRO-3's fp32 weight shards join the moments on disk; each bucket's piece is read
# right before its gather. Same model, same checkpoints, nothing of either resident between steps.
run dp2_zero3 2 --zero 3
run dp2_zero3_offp 2 --zero 3 --offload-params off_p
check "DP 2, ZeRO-3: offloaded weight shards and moments train the same model" same_losses dp2_zero3.jsonl dp2_zero3_offp.jsonl
check "DP 2, ZeRO-3: the checkpoints are byte for byte the same" same_files ck_dp2_zero3 ck_dp2_zero3_offp
check "--offload-params: neither the weights' shard nor the moments are resident" "$PY" -c "
import json, sys
for r in [json.loads(l) for l in open('dp2_zero3_offp.jsonl')][-1]['memory']['ranks']:
    m, f = r['model_state_bytes'], r['model_state_bytes_formula']
    print(r['rank'], m, f, r['category_peak_bytes']['offload_io'])
    if m['params'] or m['optimizer'] or f['params'] or f['optimizer'] or not m['grads']: sys.exit(1)"
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --steps 2 --zero 3 --offload-params off_p2 \
  --save ck_p_half > p_half.jsonl 2> p_half.err
timeout 300 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --zero 3 --offload-params off_p2 \
  --resume ck_p_half > p_resumed.jsonl 2> p_resumed.err
check "--offload-params: saved at step 2 and resumed, the uninterrupted run's losses" \
  continues dp2_zero3_offp.jsonl p_resumed.jsonl
expect_error "--offload-params without ZeRO-3" "zero 3" train "${MODEL[@]}" --offload-params off_bad
expect_error "--offload-params with bf16 weights" "fp32" train "${MODEL[@]}" --zero 3 --params-dtype bf16 --offload-params off_bad
expect_error "--offload-params and --offload-optimizer apart" "same directory" train "${MODEL[@]}" \
  --offload-optimizer off_a --offload-params off_b
# Refused by the flag's own callback: said once under mpirun, as every refusal is (each rank said it).
timeout 60 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --zero 3 --offload-params off_bad \
  --offload-optimizer off_other > /dev/null 2> apart_mpi.err
check "... under mpirun -np 2: one line" test "$(grep -c 'share one file' apart_mpi.err)" -eq 1

# Resume: two steps saved with offload, two more resumed with offload = the four-step run.
"$LATTICE" train "${MODEL[@]}" --steps 2 --offload-optimizer off_half --save ck_half > half.jsonl 2> half.err
"$LATTICE" train "${MODEL[@]}" --offload-optimizer off_half --resume ck_half > resumed.jsonl 2> resumed.err
check "a run saved and resumed with offloaded moments continues the uninterrupted run" \
  continues one_off.jsonl resumed.jsonl

# Killed mid-run: nothing is left in DIR; the last checkpoint resumes to the same losses.
"$LATTICE" train "${MODEL[@]}" --steps 400 --save-every 2 --offload-optimizer off_kill --save ck_kill \
  > killed.jsonl 2> killed.err &
pid=$!
for _ in $(seq 1 100); do [ -f ck_kill/trainer.json ] && break; sleep 0.1; done
sleep 0.5
kill -9 "$pid"; wait "$pid" 2> /dev/null
check "killed with SIGKILL: the offload directory holds nothing" test -z "$(ls -A off_kill)"
check "killed: a checkpoint was promoted before the kill" test -f ck_kill/trainer.json

expect_error "--offload-optimizer on a file" "offload-optimizer" train "${MODEL[@]}" --offload-optimizer corpus.txt
expect_error "--offload-optimizer with SM3" "adamw" train "${MODEL[@]}" --offload-optimizer off_sm3 --optimizer sm3
if mkdir -p full && mount -t tmpfs -o size=64k tmpfs full 2> /dev/null; then
  expect_error "--offload-optimizer on a full disk" "cannot reserve" train "${MODEL[@]}" --offload-optimizer full/a/off
  check "a refused offload directory is not left behind (nor the parent made for it)" test -z "$(ls -A full)"
  umount full
fi
# Inside an input, or inside a directory another output owns: refused before training, nothing made.
expect_error "--offload-optimizer inside --data" "is inside --data data, an input of this run" \
  train "${MODEL[@]}" --offload-optimizer data/off
check "nothing made inside --data" test ! -e data/off
expect_error "--offload-optimizer inside --save" "is inside --save ck_owned, which holds that output alone" \
  train "${MODEL[@]}" --save ck_owned --offload-optimizer ck_owned/off
check "nothing made inside --save" test ! -e ck_owned/off

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
