#!/usr/bin/env bash
# Checkpoints in the background and the interval from the failure rate (issue 36): (1) --async-save
# writes the files a synchronous save writes, byte for byte, in every layout, counts its host copy
# under checkpoint_io, keeps the loss-spike guard's rule and resumes bit for bit; (2) kill -9 at
# random points of 20 runs saving every step in the background never leaves a corrupt or missing
# checkpoint, nor one of a step the run did not reach; (3) --save-every auto --mtbf picks Young/Daly's
# interval from the save cost it prints, and its flag errors.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

for i in $(seq 1 400); do echo "In the beginning $i the word was with the text, and the text was good."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
MODEL=(--data data --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 4 --threads 1)
same_files() {  # same_files A B: the checkpoint files of two directories byte for byte
  local f
  for f in $(ls "$2"); do cmp -s "$1/$f" "$2/$f" || { echo "$1/$f differs from $2/$f"; return 1; }; done
  test "$(ls "$1")" = "$(ls "$2")"
}
# As same_files, but trainer.json's "steps" and "decay_steps" may differ: where each run meant to stop
# (a kill run's 100000, a reference's --steps; the schedule is constant, so no value depends on them),
# and with them the manifest's sum of trainer.json.
same_but_length() {
  local f
  for f in $(ls "$2"); do
    [ "$f" = trainer.json ] || [ "$f" = lattice-checkpoint.json ] && continue
    cmp -s "$1/$f" "$2/$f" || { echo "$1/$f differs from $2/$f"; return 1; }
  done
  test "$(ls "$1")" = "$(ls "$2")" && "$PY" -c "
import json, sys
a, b = (json.load(open(d + '/trainer.json')) for d in sys.argv[1:])
for t in (a, b): del t['train']['steps'], t['train']['decay_steps']
m, n = (json.load(open(d + '/lattice-checkpoint.json')) for d in sys.argv[1:])
for t in (m, n): del t['sums']['trainer.json']
sys.exit(a != b or m != n)" "$1" "$2"
}
loads() { "$LATTICE" eval --checkpoint "$1" --data data/val.bin --batches 1 --micro-batch 4 > /dev/null 2> eval.err; }
events() { "$PY" -c "import json,sys; print([r['$2'] for r in map(json.loads, open(sys.argv[1])) if r.get('event') == '$3'])" "$1"; }

# 1. The same bytes as a synchronous save, the host copy counted, a bit-exact resume.
"$LATTICE" train "${MODEL[@]}" --steps 4 --save-every 1 --save ck_sync --json > sync.jsonl 2>/dev/null
"$LATTICE" train "${MODEL[@]}" --steps 4 --save-every 1 --save ck_async --async-save --json > async.jsonl 2>/dev/null
check "async: exit 0, the files of the synchronous save byte for byte" same_files ck_async ck_sync
check "async: training is unchanged" test "$(events async.jsonl loss step)" = "$(events sync.jsonl loss step)"
check "async: a save event for each save, written in the background" test "$(events async.jsonl mode save)" = \
  "['async', 'async', 'async', 'async']"
check "async: every save promoted once written" test "$(events async.jsonl step save_promoted)" = "[1, 2, 3, 4]"
check "async: the host copy is counted under checkpoint_io" "$PY" -c "
import json, os
r = [json.loads(l) for l in open('async.jsonl')][-1]['memory']['ranks'][0]['category_peak_bytes']['checkpoint_io']
files = sum(os.path.getsize('ck_async/' + f) for f in ('model.safetensors', 'optimizer.safetensors'))
assert r >= 0.95 * files, (r, files)"
check "async: no temporary directory left" test -z "$(ls -a | grep -e '\.tmp-' -e 'lattice-trash')"
"$LATTICE" train "${MODEL[@]}" --steps 4 --save-every 1 --save ck_text --async-save > /dev/null 2> text.err
check "async: a save that waits for the previous one says so" \
  grep -qE "save of step [0-9]+ waited .* s for the background save of step [0-9]+" text.err
# Resume from a checkpoint written in the background: the run continues bit for bit.
"$LATTICE" train "${MODEL[@]}" --dropout 0.1 --steps 6 --json > straight.jsonl 2>/dev/null
"$LATTICE" train "${MODEL[@]}" --dropout 0.1 --steps 3 --save-every 1 --save half --async-save > /dev/null 2>&1
check "async: the checkpoint holds step 3" test "$("$PY" -c "import json; print(json.load(open('half/trainer.json'))['step'])")" -eq 3
"$LATTICE" train "${MODEL[@]}" --dropout 0.1 --steps 6 --resume half --save half --async-save --json > resumed.jsonl 2>/dev/null
check "async: resume is bit-exact" test "$(events straight.jsonl loss step | "$PY" -c "import sys; print(eval(sys.stdin.read())[3:])")" = \
  "$(events resumed.jsonl loss step)"
# Every layout: the ranks stream to rank 0 as before; its thread writes.
for layout in "--tensor-model-parallel-size 2" "--pipeline-model-parallel-size 2 --schedule pipedream-2bw" "--zero 3"; do
  name=$(echo "$layout" | tr -dc 'a-z0-9')
  for mode in sync async; do
    flag=(); [ $mode = async ] && flag=(--async-save)
    mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --layers 2 --micro-batch 2 --global-batch 4 $layout \
      --steps 3 --save-every 1 --save "ck_${name}_$mode" "${flag[@]}" --json > "${name}_$mode.jsonl" 2>/dev/null
  done
  check "async, $layout: the synchronous save's files" same_files "ck_${name}_async" "ck_${name}_sync"
done
# A disk that fills under two ranks: the rank that reports it aborts the job (MPI_Abort: no destructor
# runs), so the failed save's temporary directory must be gone before the error is reported. The file
# system has room for the run's two checkpoints at start (2.2 MB, two would not: refused at start);
# it is filled once the first save is in place.
if mkdir -p small && mount -t tmpfs -o size=2200k tmpfs small 2>/dev/null; then
  mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --layers 2 --hidden 64 --heads 4 --micro-batch 2 \
    --global-batch 4 --steps 20 --save small/ck --save-every 5 --async-save > /dev/null 2> small.err
  check "async, two ranks, no room for the second save: refused at start" \
    grep -q "this run needs .* (the second save is written beside the first)" small.err
  umount small && mount -t tmpfs -o size=4000k tmpfs small
  timeout 120 mpirun --oversubscribe -np 2 "$LATTICE" train "${MODEL[@]}" --layers 2 --hidden 64 --heads 4 \
    --micro-batch 2 --global-batch 4 --steps 300 --save small/ck --save-every 5 --async-save > /dev/null 2> small.err &
  job=$!
  for _ in $(seq 1 600); do [ -f small/ck/lattice-checkpoint.json ] && break; sleep 0.1; done
  dd if=/dev/zero of=small/filler bs=64k 2>/dev/null  # fills the disk
  wait "$job"
  status=$?
  check "async, two ranks, a full disk: the job fails (exit $status)" test "$status" -ne 0
  check "async, two ranks, a full disk: says so" grep -q "No space left on device" small.err
  check "async, two ranks, a full disk: no temporary directory left ($(ls small | tr '\n' ' '))" \
    test -z "$(ls -a small | grep -e '\.tmp-' -e 'lattice-trash')"
  umount small
else
  echo "skipped: the full-disk case needs a tmpfs mount (root)"
fi
# The loss-spike guard still decides: exploded weights are not promoted, the good checkpoint stays.
"$LATTICE" train "${MODEL[@]}" --steps 4 --lr 1e-3 --save guard > /dev/null 2>&1
cp -r guard guard.before
"$LATTICE" train "${MODEL[@]}" --steps 7 --lr 1e6 --override-schedule --resume guard --save guard --save-every 1 --async-save > /dev/null 2> spike.err
status=$?
check "async, exploded saves refused: exit 1 (got $status)" test "$status" -eq 1
check "async, exploded saves refused: warnings, then one error" grep -q "warning: the checkpoint of step" spike.err
check "async, exploded saves refused: the checkpoint of step 4 kept byte for byte" same_files guard guard.before

# 2. kill -9 at random points of 20 runs saving every step in the background: each checkpoint is
# absent (nothing saved yet) or complete (eval loads it, its sums check), of a step the run reached,
# and byte for byte the checkpoint a synchronous run writes at that step.
KILL=(--steps 100000 --lr-schedule constant --save-every 1 --async-save --json)
RANDOM=36
reached=()
for i in $(seq 1 20); do
  "$LATTICE" train "${MODEL[@]}" "${KILL[@]}" --save "kill_$i" > "kill_$i.jsonl" 2>/dev/null &
  pid=$!
  sleep "$(printf '0.%03d' $((RANDOM % 900 + 100)))"
  kill -9 $pid
  wait $pid 2>/dev/null
  last=$("$PY" -c "
import json, sys
steps = [0]
for line in open(sys.argv[1]):
    try: steps.append(json.loads(line).get('step', 0))
    except ValueError: pass
print(max(steps))" "kill_$i.jsonl")
  if [ -e "kill_$i" ]; then
    saved=$("$PY" -c "import json; print(json.load(open('kill_$i/trainer.json'))['step'])" 2>/dev/null || echo none)
    check "kill $i: the checkpoint loads" loads "kill_$i"
    check "kill $i: it holds a step the run reached ($saved of $last)" test "$saved" != none -a "$saved" -le "$last"
    reached+=("$saved:$i")
  else
    check "kill $i: no checkpoint, killed before the first save was promoted ($last steps)" test "$last" -le 2
  fi
done
check "kill: most runs had saved something" test "${#reached[@]}" -ge 10
# The references: one synchronous run resumed from step to step (resume is bit-exact).
prev=""
for pair in $(printf '%s\n' "${reached[@]}" | sort -t: -k1,1n); do
  s=${pair%%:*} i=${pair##*:}
  if [ ! -d "ref_$s" ]; then
    "$LATTICE" train "${MODEL[@]}" --steps "$s" --lr-schedule constant --save ref ${prev:+--resume ref} > /dev/null 2>&1
    cp -r ref "ref_$s" && prev=$s
  fi
  check "kill $i: step $s byte for byte as a synchronous save" same_but_length "kill_$i" "ref_$s"
done
left=$(ls -a | grep -c -e '\.tmp-' -e 'lattice-trash')
"$LATTICE" train "${MODEL[@]}" --steps 1 --save cleaner > /dev/null 2>&1
check "kill: the next save removes the $left temporaries the killed saves left" test -z "$(ls -a | grep -e '\.tmp-' -e 'lattice-trash')"

# 3. --save-every auto: Young/Daly's interval from the measured save cost and the MTBF.
"$LATTICE" train "${MODEL[@]}" --steps 1500 --save-every auto --mtbf 0.05 --save auto --json > auto.jsonl 2>/dev/null
check "auto: one save_interval event, the formula's interval from its printed inputs" "$PY" -c "
import json, math
e = [r for r in map(json.loads, open('auto.jsonl')) if r.get('event') == 'save_interval']
assert len(e) == 1, e
e = e[0]
want = math.sqrt(2 * e['save_cost_s'] * e['mtbf_s']) / e['step_s']
assert e['mtbf_s'] == 0.05 and abs(e['interval_s'] - math.sqrt(2 * e['save_cost_s'] * e['mtbf_s'])) < 1e-9, e
assert e['save_every'] == max(1, round(want)) and abs(e['save_every'] - want) <= 0.5 + 1e-9 or e['save_every'] == 1, (e, want)
saves = [r for r in map(json.loads, open('auto.jsonl')) if r.get('event') == 'save']
first = [r for r in saves if r['step'] == e['step']]
assert e['step'] == 2 and first and abs(first[0]['stall_s'] - e['save_cost_s']) <= 1e-6 * max(1, e['save_cost_s']), (e, first)
later = [r['step'] for r in saves[1:-1]]
assert later and later == [s for s in range(e['save_every'], 1500, e['save_every']) if s > 2], (later, e['save_every'])
print(e)"
"$LATTICE" train "${MODEL[@]}" --steps 4 --save-every auto --mtbf 90m --save auto_text --async-save > /dev/null 2> auto.err
check "auto: one line with the interval and its inputs" test "$(grep -c 'save-every auto: a save every' auto.err)" -eq 1
check "auto: the line names the formula, the save cost and the MTBF" \
  grep -qE "Young/Daly: sqrt\(2 x save cost [0-9.e-]+ s x MTBF 5400 s\) = [0-9.e-]+ s, over a step of" auto.err
expect_error "auto without --mtbf" "--save-every auto needs --mtbf DURATION .* and --save DIR" \
  train "${MODEL[@]}" --steps 4 --save-every auto --save x
expect_error "auto without --save" "--save-every auto needs --mtbf DURATION .* and --save DIR" \
  train "${MODEL[@]}" --steps 4 --save-every auto --mtbf 6h
expect_error "--mtbf without auto" "--mtbf applies to --save-every auto only" \
  train "${MODEL[@]}" --steps 4 --save-every 2 --mtbf 6h --save x
for bad in 0 -5 nan inf 1e12; do
  expect_error "--mtbf $bad" "--mtbf must be a finite number in (0, 315576000. seconds (got $bad)" \
    train "${MODEL[@]}" --steps 4 --save-every auto --mtbf "$bad" --save x
done
expect_error "--mtbf 5y" "--mtbf takes a duration: seconds, or a number with s, m, h or d" \
  train "${MODEL[@]}" --steps 4 --save-every auto --mtbf 5y --save x
expect_error "--save-every sometimes" "--save-every takes a whole number between 0 and 2^40, or auto" \
  train "${MODEL[@]}" --steps 4 --save-every sometimes --save x
expect_error "--async-save without --save" "--async-save needs --save DIR" train "${MODEL[@]}" --steps 4 --async-save
for d in 45s 90m 6h 1.5d 5400; do
  "$LATTICE" train "${MODEL[@]}" --steps 3 --save-every auto --mtbf $d --save "dur_$d" --json > dur.jsonl 2>/dev/null
  check "--mtbf $d in seconds" test "$(events dur.jsonl mtbf_s save_interval)" = \
    "[$("$PY" -c "print(float({'45s': 45, '90m': 5400, '6h': 21600, '1.5d': 129600, '5400': 5400}['$d']))")]"
done
printf 'save-every = "auto"\nmtbf = "90m"\nsave = "cfg"\nasync-save = true\n' > auto.toml
"$LATTICE" train "${MODEL[@]}" --config auto.toml --steps 3 --dump-config > dumped.toml
check "a --config file takes auto and a duration; --dump-config writes them back" \
  grep -qx 'save-every = "auto"' dumped.toml
check "--dump-config reads back as the same run" diff <("$LATTICE" train --config dumped.toml --dump-config) dumped.toml

echo "$failures failure(s)"
exit $((failures > 0))
