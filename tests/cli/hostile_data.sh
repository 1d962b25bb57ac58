#!/usr/bin/env bash
# Hostile use, class "data must never be lost": --save at a directory that is not a checkpoint, a
# checkpoint holding a user's file, a run that blows up under --save-every, killed saves, and
# destinations that cannot be written. Every refusal comes before training, in one line, exit 1,
# with every file of the user's untouched.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
. "$HERE/lib/hostile.sh"

hostile_corpus
SMALL=(train --data data --layers 2 --hidden 32 --heads 4 --seq-len 32 --micro-batch 4 --threads 1)

# --save at the data directory (it used to delete train.bin and val.bin).
hostile "save into the data directory" 1 "cannot save to data: it holds .* is not a lattice checkpoint" -- \
  "${SMALL[@]}" --steps 2 --save data
check "train.bin and val.bin still there" test -s data/train.bin -a -s data/val.bin

# A checkpoint directory replaced only when it holds nothing but what its manifest lists.
"$LATTICE" "${SMALL[@]}" --steps 1 --save ck 2>/dev/null
check "a checkpoint lists its files" grep -q '"model.safetensors"' ck/lattice-checkpoint.json
# Another run's checkpoint is not replaced unasked: a mistyped --save would lose that run's training.
sum_before=$(cat ck/* | md5sum)
hostile "a new run into an earlier run's checkpoint" 1 \
  "--save ck holds the checkpoint of an earlier run \(step 1; L 2, h 32\): continue it with --resume ck, name a new directory, or pass --overwrite to replace it" -- \
  "${SMALL[@]}" --steps 2 --save ck
check "the earlier run's checkpoint is as it was" test "$(cat ck/* | md5sum)" = "$sum_before"
"$LATTICE" "${SMALL[@]}" --steps 2 --save ck --overwrite 2>/dev/null
check "a checkpoint replaces a checkpoint (--overwrite)" grep -q '"step": 2' ck/trainer.json
# A checkpoint of an earlier lattice (no manifest, no tokenizer: its three files only) may still be replaced.
"$LATTICE" "${SMALL[@]}" --steps 1 --save legacy 2>/dev/null &&
  rm -f legacy/lattice-checkpoint.json legacy/.lattice-save legacy/tokenizer.json legacy/config.json
"$LATTICE" "${SMALL[@]}" --steps 2 --save legacy --overwrite 2>/dev/null
check "a checkpoint written before manifests is replaced" grep -q '"step": 2' legacy/trainer.json
echo "my notes" > ck/notes.txt
PROTECT=ck hostile "save over a checkpoint holding the user's notes" 1 "holds notes.txt, which its checkpoint manifest does not list" -- \
  "${SMALL[@]}" --steps 3 --save ck
mkdir -p plain && echo "keep me" > plain/readme
PROTECT=plain hostile "save into a directory of other files" 1 "cannot save to plain: it holds readme" -- \
  "${SMALL[@]}" --steps 1 --save plain

# A run that blows up: the last checkpoint on disk is one whose weights gave a sane loss. The loss-spike
# guard (design.md §14) refuses the exploding but finite steps' checkpoints, one warning each, so the
# NaN finds the checkpoint of step 2 that the sane run promoted.
"$LATTICE" "${SMALL[@]}" --steps 2 --save boom 2>/dev/null
sum_before=$(md5sum boom/model.safetensors)
"$LATTICE" "${SMALL[@]}" --steps 30 --resume boom --override-schedule --lr 1e4 --warmup 0 --lr-schedule constant --clip-grad 0 \
  --save-every 1 --save boom --json > boom.jsonl 2> boom.err
check "lr 1e4 blows up under --save-every 1: exit 1" test $? -eq 1
check "the last line names the NaN and the checkpoint kept" grep -qE "loss is NaN at step [0-9]+: .*the checkpoint in boom holds step 2" <(tail -1 boom.err)
check "every other line is a refused promotion" test "$(head -n -1 boom.err | grep -vc 'was not promoted')" -eq 0
check "the checkpoint is the sane run's, byte for byte" test "$(md5sum boom/model.safetensors)" = "$sum_before"
check "the checkpoint's trainer.json says step 2" grep -q '"step": 2' boom/trainer.json
"$LATTICE" "${SMALL[@]}" --steps 4 --resume boom --override-schedule --lr 1e-3 --json > resumed.jsonl 2>/dev/null
check "resuming from it trains (finite losses)" python3 -c "
import json, math, sys
d = [json.loads(l) for l in open('resumed.jsonl') if '\"step\"' in l and '\"event\":\"step\"' in l]
sys.exit(0 if len(d) == 2 and all(math.isfinite(e['loss']) for e in d) else 1)"
"$LATTICE" "${SMALL[@]}" --steps 3 --lr 1e9 --warmup 0 --lr-schedule constant --save fresh 2>/dev/null
check "a run that blows up before its first save writes nothing" test ! -e fresh

# Killed saves: temporaries of processes that are gone are removed by the next save beside them;
# a directory that merely looks like one (no marker of ours) is left alone.
mkdir -p runs
for k in 1 2 3; do
  "$LATTICE" train --data data --layers 4 --hidden 256 --heads 4 --seq-len 64 --micro-batch 4 --threads 1 \
    --steps 1000 --save-every 1 --save runs/ck > /dev/null 2>&1 &
  victim=$!
  sleep $((k + 2))
  kill -9 $victim 2>/dev/null; wait $victim 2>/dev/null
done
echo "3 killed runs left $(ls -d runs/ck.tmp-* 2>/dev/null | wc -l) temporaries (each run also removes its predecessors')"
mkdir -p runs/ck.tmp-424242 runs/mine.tmp-31337
echo "$(hostname) 424242" > runs/ck.tmp-424242/.lattice-save
echo "data" > runs/mine.tmp-31337/file
"$LATTICE" "${SMALL[@]}" --steps 1 --save runs/other 2>/dev/null
check "the next save removed every dead temporary" test "$(ls -d runs/*.tmp-* runs/*.old-* 2>/dev/null | grep -v mine.tmp-31337 | wc -l)" -eq 0
check "a look-alike directory without our marker is kept" test -s runs/mine.tmp-31337/file
check "the killed runs' checkpoint is whole or absent" test ! -e runs/ck -o -s runs/ck/lattice-checkpoint.json

# Paths of bytes that are not UTF-8: the JSON stream and the run log carry them with U+FFFD (a JSON
# encoder's exception ended the run, "invalid UTF-8 byte at index 106").
"$LATTICE" "${SMALL[@]}" --steps 1 --save $'ck\xff' --report-dir $'rep\xff' --json > utf.jsonl 2> utf.err
check "non-UTF-8 --save and --report-dir under --json: exit 0 ($(tail -1 utf.err))" test $? -eq 0
check "... every JSON line parses, the path's byte replaced" python3 -c "
import json; r = [json.loads(l) for l in open('utf.jsonl', encoding='utf-8')]; assert any('ck\ufffd' in json.dumps(x, ensure_ascii=False) for x in r), r[0]"
check "... the checkpoint and the run log are there" test -s $'ck\xff/model.safetensors' -a -s $'rep\xff/run.jsonl'

# A checkpoint directory made immutable (chattr +i) after its first save, as an admin might freeze a
# run: the next save fails in one line naming the real cause (EPERM, not the errno of a later call),
# leaves no temporary copy behind, and the checkpoint stays as it was.
"$LATTICE" "${SMALL[@]}" --steps 1 --save frozen 2>/dev/null
if chattr +i frozen 2>/dev/null; then
  "$LATTICE" "${SMALL[@]}" --steps 2 --save frozen --overwrite > frozen.out 2> frozen.err
  status=$?
  chattr -i frozen
  check "an immutable checkpoint: exit 1 (got $status)" test "$status" -eq 1
  check "an immutable checkpoint: the line names the cause" \
    grep -qx 'lattice train: error: cannot replace frozen with frozen.tmp-[0-9]*: Operation not permitted' frozen.err
  check "an immutable checkpoint: no temporary left" test "$(ls -d frozen.tmp-* 2>/dev/null | wc -l)" -eq 0
  check "an immutable checkpoint: still step 1" grep -q '"step": 1' frozen/trainer.json
else
  echo "skipped: chattr +i is not available here"
fi

# Destinations that cannot be written fail at start, not after the training.
hostile "--save under a file" 1 "cannot write --save data/train.bin/ck" -- "${SMALL[@]}" --steps 2 --save data/train.bin/ck
hostile "--trace under a file" 1 "cannot write --trace data/val.bin/trace.json" -- "${SMALL[@]}" --steps 2 --trace data/val.bin/trace.json
hostile "--trace at a directory" 1 "cannot write --trace data: it is a directory" -- "${SMALL[@]}" --steps 2 --trace data
hostile "schedule --svg under a file" 1 "cannot write --svg data/train.bin/s.svg" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --svg data/train.bin/s.svg
"$LATTICE" "${SMALL[@]}" --steps 1 --save new/deeper/ck 2>/dev/null
check "missing parents of --save are created" test -s new/deeper/ck/model.safetensors

# prepare never clobbers a file that merely has its temporary's name, and a full disk or a kill while
# writing leaves the previous train.bin/val.bin pair as it was.
mkdir -p out && echo precious > out/train.bin.tmp
"$LATTICE" prepare --input corpus.txt --out out 2>/dev/null
check "prepare keeps the user's train.bin.tmp" test "$(cat out/train.bin.tmp)" = precious
if mkdir -p full && mount -t tmpfs -o size=2m tmpfs full 2>/dev/null; then
  cp -r data full/d
  python3 -c "print('y' * 1100000, end='')" > mid.txt
  before=$(md5sum full/d/train.bin full/d/val.bin)
  "$LATTICE" prepare --input mid.txt --out full/d > /dev/null 2> full.err
  check "prepare on a full disk fails in one line" test $? -eq 1 -a "$(wc -l < full.err)" -eq 1
  check "prepare on a full disk leaves the old pair" test "$before" = "$(md5sum full/d/train.bin full/d/val.bin)"
  "$LATTICE" prepare --input mid.txt --out full/q/r/s > /dev/null 2> full.err
  check "prepare to new folders on a full disk fails in one line" test $? -eq 1 -a "$(wc -l < full.err)" -eq 1
  check "... and leaves none of the folders it made" test ! -e full/q
  # A file system that cannot take one checkpoint: refused at start with both figures, nothing made.
  mkdir -p tiny && mount -t tmpfs -o size=200k tmpfs tiny
  hostile "--save where one checkpoint does not fit" 1 \
    "--save tiny/ck: its file system has [0-9]+\.[0-9]{2} KiB free, and this run needs [0-9]+\.[0-9]{2} [KM]iB \(a save is written beside the one it replaces\)" -- \
    "${SMALL[@]}" --steps 1 --save tiny/ck
  check "... and leaves nothing there" test -z "$(ls -A tiny)"
  umount tiny
  # Room for one checkpoint, not two: a run that saves twice into a new directory writes the second
  # beside the first. Refused at start (it failed at its second save, after the training before it).
  mount -t tmpfs -o size=600k tmpfs tiny
  hostile "--save where the second save does not fit" 1 \
    "--save tiny/ck: its file system has [56][0-9]{2}\.[0-9]{2} KiB free, and this run needs [0-9]+\.[0-9]{2} [KM]iB \(the second save is written beside the first\)" -- \
    "${SMALL[@]}" --steps 4 --save-every 2 --save tiny/ck
  umount tiny
  # A mount point as --save: a save renames its directory whole, which the mount refuses (EBUSY).
  mount -t tmpfs -o size=10m tmpfs tiny
  hostile "--save at a mount point" 1 "cannot save to tiny: it is a mount point, and a save replaces its directory whole" -- \
    "${SMALL[@]}" --steps 1 --save tiny
  umount tiny
  mount -t tmpfs -o size=10m,nr_inodes=6 tmpfs tiny
  hostile "--save where the files do not fit" 1 "--save tiny/ck: its file system has room for [0-9] more files" -- \
    "${SMALL[@]}" --steps 1 --save tiny/ck
  umount tiny
  # A save killed mid-write left its temporary (a dead process's, with this host's marker) taking the
  # room of the next: it counts as free, as the save would remove it first. 600 KiB, 400 of them held.
  mount -t tmpfs -o size=600k tmpfs tiny
  dead=999999; while kill -0 "$dead" 2>/dev/null; do dead=$((dead - 1)); done
  mkdir tiny/ck.tmp-$dead && printf '%s %s\n' "$(hostname)" "$dead" > tiny/ck.tmp-$dead/.lattice-save &&
    head -c 400000 /dev/zero > tiny/ck.tmp-$dead/model.safetensors
  "$LATTICE" "${SMALL[@]}" --steps 1 --save tiny/ck > /dev/null 2> tiny.err
  check "a killed save's temporary does not refuse the run ($(tail -1 tiny.err))" test $? -eq 0
  check "... it was removed, and the run saved" test "$(ls -A tiny)" = ck
  umount tiny
  dd if=/dev/zero of=full/filler bs=64k 2>/dev/null  # fills the disk
  "$LATTICE" groups --world 64 --json > full/g.json 2> full.err
  check "stdout to a full disk is an error" test $? -eq 1 && grep -q "cannot write standard output" full.err
  umount full
else
  echo "skipped: the full-disk cases need a tmpfs mount (root)"
fi

# A train.bin of fewer sequences than one global batch trains (small corpora do so on purpose), and
# says so: every batch repeats them (eval refuses such a file; train was silent).
printf 'In the beginning God' > few.txt && "$LATTICE" prepare --input few.txt --out few > /dev/null 2>&1
"$LATTICE" train --data few --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 16 --global-batch 64 \
  --threads 1 --steps 1 > /dev/null 2> few.err
check "train on fewer sequences than a batch: exit 0, the note" \
  bash -c "[ $? -eq 0 ] && grep -q 'few/train.bin holds 1 sequence(s) of 16 tokens, fewer than one global batch of 64: each batch repeats them' few.err"

# A resume on another train.bin (same tokenizer) trains on, and says so: the checkpoint records its
# file's size and edges. On its own file, no note.
"$LATTICE" "${SMALL[@]}" --steps 2 --save ck_order > /dev/null 2>&1
"$LATTICE" "${SMALL[@]}" --steps 3 --resume ck_order --save ck_order > same_data.out 2>&1
check "a resume on the run's own train.bin: exit 0, no note of other data" \
  bash -c "[ $? -eq 0 ] && ! grep -q 'is not the train.bin' same_data.out"
head -c 20000 corpus.txt > other.txt && "$LATTICE" prepare --input other.txt --out other_data > /dev/null 2>&1
"$LATTICE" "${SMALL[@]/#data/other_data}" --steps 4 --resume ck_order --save ck_order_other > other_data.out 2>&1
check "a resume on another train.bin: exit 0, the note naming the step its batches start at" \
  bash -c "[ $? -eq 0 ] && grep -q 'note: other_data/train.bin is not the train.bin checkpoint ck_order was trained on (its size or first and last 64 KiB differ: [0-9]*-[0-9a-f]* then, [0-9]*-[0-9a-f]* now): from step 4 the batches' other_data.out"

# A file of a checkpoint that cannot be looked up or read is named by the user's path with the reason:
# never by the pin's /proc/self/fd path (core/pinned_path.hpp), and never as changed or damaged.
"$LATTICE" "${SMALL[@]}" --steps 1 --save loop 2>/dev/null
rm loop/model.safetensors && ln -s model.safetensors loop/model.safetensors
hostile "eval, its model file a loop of links" 1 \
  "^lattice eval: error: checkpoint file loop/model.safetensors: Too many levels of symbolic links$" -- \
  eval --checkpoint loop --data data/val.bin --threads 1
cp -r loop loop_old && rm loop_old/lattice-checkpoint.json  # before manifests (trainer.json without a version)
python3 -c "import json; j = json.load(open('loop_old/trainer.json')); j.pop('lattice_version'); json.dump(j, open('loop_old/trainer.json', 'w'))"
hostile "resume of a checkpoint without a manifest, its model file a loop" 1 \
  "^lattice train: error: cannot read checkpoint file loop_old/model.safetensors: Too many levels of symbolic links$" -- \
  "${SMALL[@]}" --steps 3 --resume loop_old --save loop_fork
"$LATTICE" "${SMALL[@]}" --steps 1 --save locked 2>/dev/null
chmod 000 locked/optimizer.safetensors
# As a user without root's override of permissions: in a new user namespace the process keeps its user
# id, but no capability over files outside it, so mode 000 denies even their owner.
if unshare -U true 2>/dev/null; then
  unshare -U "$LATTICE" "${SMALL[@]}" --steps 3 --resume locked --save locked_fork > /dev/null 2> locked.err
  check "resume of a file it may not read: exit 1, the reason named, not \"damaged\" ($(head -c 200 locked.err))" \
    grep -qx "lattice train: error: cannot read checkpoint file locked/optimizer.safetensors: Permission denied" locked.err
else
  echo "skipped: unshare -U is not available here"
fi
chmod 644 locked/optimizer.safetensors

# eval and sample of a checkpoint a run replaces at every step: a reader between two versions read the
# manifest of one and a file of the next, and named a good checkpoint "changed or damaged" (about one
# eval in twelve, found by a hostile pass). They pin it (core/pinned_path.hpp); none of 20 may fail.
"$LATTICE" "${SMALL[@]}" --steps 2 --save live > /dev/null 2>&1
timeout 300 "$LATTICE" train --data data --threads 1 --resume live --save live --steps 10000000 --save-every 1 \
  > /dev/null 2>&1 & saver=$!
sleep 2
read_fails=0
for i in $(seq 16); do
  "$LATTICE" eval --checkpoint live --data data/val.bin --threads 1 --batches 1 > /dev/null 2>> live.err || read_fails=$((read_fails + 1))
done
for i in $(seq 4); do
  "$LATTICE" sample --checkpoint live --tokens 2 --threads 1 --prompt x > /dev/null 2>> live.err || read_fails=$((read_fails + 1))
done
check "20 reads of a checkpoint replaced at every step: none failed ($(head -c 300 live.err))" test "$read_fails" -eq 0
# A resume from it (a run forked from a live one). A rank pins the checkpoint as it begins to read
# (core/pinned_path.hpp): saves swapped in while it reads (a file system paused for 0.5 s between its
# trainer.json and its weights, LATTICE_TEST_PAUSE_RESUME_READ) do not reach it, so it reads one save
# whole, without reading again. Two ranks that pinned different saves (one paused before its read)
# read again, say so, and train. Before, it failed "replaced" at random (a save every 7.7 ms overtook
# twenty reads of a whole trainer's construction), or went on from one save's step with the next
# save's weights without a word.
saving() {  # the saver is still replacing live (its directory's inode changes within 5 s)
  local first k; first=$(stat -c %i live 2>/dev/null)
  for k in $(seq 100); do [ "$(stat -c %i live 2>/dev/null)" != "$first" ] && return 0; sleep 0.05; done
  return 1
}
check "the saver still replaces live" saving
# until_a_step NAME CMD...: runs CMD (stdout to NAME.jsonl, stderr to NAME.err) until its first step
# record, then ends it with SIGTERM (60 s at most; a background job of a script ignores SIGINT): a fork
# trains on for as long as the live run goes.
until_a_step() {
  local name=$1 k; shift
  "$@" > "$name.jsonl" 2> "$name.err" & local pid=$!
  for k in $(seq 600); do grep -q '"event":"step"' "$name.jsonl" 2>/dev/null && break; sleep 0.1; done
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}
# trained NAME: the run's NAME.jsonl holds a step and its NAME.err no error; read_once NAME: and it did
# not read the checkpoint again; read_again NAME: and it did, and said so.
trained() { grep -q '"event":"step"' "$1.jsonl" && ! grep -q error "$1.err"; }
read_once() { ! grep -q 'reading it again' "$1.err" && trained "$1"; }
read_again() { grep -q 'reading it again' "$1.err" && trained "$1"; }
until_a_step fork_one env LATTICE_TEST_PAUSE_RESUME_READ=0:0.5:during "$LATTICE" train --data data --threads 1 \
  --resume live --save fork_one --steps 1000000 --json
check "a resume whose read spans saves: it reads the save it pinned, not again, and trains ($(head -c 300 fork_one.err))" \
  read_once fork_one
# The command's own reads before the trainer's (the settings, the precision and the model it takes, each
# summing the files) are of the pinned save too. Paused 0.2 s between the manifest and the sums of every
# read (a slow file system), an unpinned read met the next save's files at each of its 20 attempts and
# gave up ("replaced"), as a resume under strace's delayed reads did.
until_a_step fork_sums env LATTICE_TEST_PAUSE_SUMS=0.2 "$LATTICE" train --data data --threads 1 \
  --resume live --save fork_sums --steps 1000000 --json
check "a resume whose first sums span saves: one read, and it trains ($(head -c 300 fork_sums.err))" \
  read_once fork_sums
check "the saver still replaces live (before eval's sums)" saving
LATTICE_TEST_PAUSE_SUMS=0.2 "$LATTICE" eval --checkpoint live --data data/val.bin --threads 1 --batches 1 \
  > /dev/null 2> eval_sums.err
eval_status=$?
check "eval whose sums span saves: exit 0 (got $eval_status), nothing said ($(head -c 300 eval_sums.err))" \
  bash -c "test $eval_status -eq 0 && test ! -s eval_sums.err"
check "the saver still replaces live (before two ranks read)" saving
until_a_step fork_two env LATTICE_TEST_PAUSE_RESUME_READ=1:0.5:before OMPI_ALLOW_RUN_AS_ROOT=1 \
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive mpirun --oversubscribe -np 2 "$LATTICE" \
  train --data data --threads 1 --resume live --save fork_two --steps 1000000 --json
check "two ranks that read different saves: read again, said, and they train" read_again fork_two
kill "$saver" 2> /dev/null; wait "$saver" 2> /dev/null

hostile_summary
echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
