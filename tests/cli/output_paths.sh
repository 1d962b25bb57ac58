#!/usr/bin/env bash
# The one rule for output paths (docs/design.md §14.1): every output flag writes a new path, a file
# or directory of its own kind that lattice wrote, or a file allowed by --overwrite; never an input
# of the command nor a file of another kind. Also: --save locked for the run's life (and not after a
# kill -9), a new run refused over an earlier run's report, readers refusing a FIFO at once (a
# checkpoint's listed files too), --save DIR/ saving DIR, and a
# closed stdout that neither kills the run nor loses its checkpoint.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
. "$HERE/lib/hostile.sh"

hostile_corpus
TINY=(train --data data --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --threads 1 --steps 2)
"$LATTICE" "${TINY[@]}" --save ck --report-dir rep --trace rep/trace.json 2>/dev/null
check "a first run writes its checkpoint, report and trace" test -s ck/model.safetensors -a -s rep/run.jsonl -a -s rep/trace.json
cp ck/model.safetensors model.safetensors
echo "keep me" > notes.txt
PROTECT="corpus.txt ck rep model.safetensors notes.txt"
cksum_ck=$(cat ck/* | md5sum)

# Files overwritten: each output flag over an input or a file of another kind, refused untouched.
hostile "report --html over the corpus" 1 "cannot write --html corpus.txt: it exists and is not an HTML page lattice wrote" -- \
  report rep --html corpus.txt
hostile "report --html over a token file" 1 "cannot write --html data/train.bin" -- report rep --html data/train.bin
hostile "report --html over a model.safetensors" 1 "not an HTML page lattice wrote" -- report rep --html model.safetensors
hostile "report --html over its own run log" 1 "is an input of this command" -- report rep --html rep/run.jsonl
hostile "plan --html over the corpus" 1 "cannot write --html corpus.txt" -- plan --layers 2 --hidden 64 --heads 2 --html corpus.txt
hostile "groups --svg over the corpus" 1 "cannot write --svg corpus.txt" -- groups --world 4 --svg corpus.txt
hostile "schedule --svg over notes" 1 "cannot write --svg notes.txt" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --svg notes.txt
hostile "schedule --svg over its --from-trace" 1 "is an input of this command" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 2 --from-trace rep/trace.json --svg rep/trace.json --overwrite
mkdir -p figs && echo "mine" > figs/figure1.svg
PROTECT="$PROTECT figs" hostile "plan --paper --svg over a user's figure1.svg" 1 "cannot write --svg figs/figure1.svg" -- plan --paper --svg figs
hostile "train --trace over the token file" 1 "cannot write --trace data/train.bin: it is inside an input of this command \\(--data data\\)" -- "${TINY[@]}" --trace data/train.bin --overwrite
hostile "train --trace over the corpus" 1 "cannot write --trace corpus.txt: it exists and is not a trace" -- "${TINY[@]}" --trace corpus.txt
hostile "train --trace over run.jsonl" 1 "cannot write --trace rep/run.jsonl" -- \
  "${TINY[@]}" --steps 4 --resume ck --save ck --report-dir rep --trace rep/run.jsonl --overwrite
hostile "train --trace into the --save directory" 1 "cannot write --trace ck/trace.json: it is inside --save ck" -- \
  "${TINY[@]}" --save ck --trace ck/trace.json
hostile "train --trace into the --resume directory" 1 "cannot write --trace ck/t.json: it is inside an input" -- \
  "${TINY[@]}" --steps 4 --resume ck --save ck2 --trace ck/t.json
hostile "train --save over the --init file's directory" 1 "cannot write --save ck: it holds an input" -- \
  "${TINY[@]}" --init ck/model.safetensors --save ck
hostile "train --save into the data" 1 "cannot save to data: it holds .* is not a lattice checkpoint" -- "${TINY[@]}" --save data
mkdir -p ckcopy && cp -r ck/. ckcopy/
PROTECT="$PROTECT ckcopy" hostile "prepare --out into a checkpoint (its tokenizer.model)" 1 \
  "cannot write --out ckcopy: it is a checkpoint directory" -- prepare --input corpus.txt --out ckcopy --overwrite
hostile "prepare --out into a report directory" 1 "it is a report directory" -- prepare --input corpus.txt --out rep
mkdir -p foreign && echo "not tokens" > foreign/train.bin
PROTECT="$PROTECT foreign" hostile "prepare --out over a train.bin lattice did not write" 1 \
  "its train.bin is not one lattice prepare wrote" -- prepare --input corpus.txt --out foreign
hostile "prepare --input inside --out" 1 "it would replace an input of this command" -- prepare --input data/val.bin --out data
hostile "a new run over an earlier run's report" 1 "--report-dir rep holds an earlier run's report" -- "${TINY[@]}" --report-dir rep
check "the checkpoint the refusals ran beside is unchanged" test "$(cat ck/* | md5sum)" = "$cksum_ck"

# Own kind: lattice's own files are replaced; --overwrite allows a file of another kind.
"$LATTICE" report rep --html page.html 2>/dev/null && "$LATTICE" report rep --html page.html 2>/dev/null
check "report --html replaces a page lattice wrote" grep -q 'name="generator" content="lattice"' page.html
"$LATTICE" report rep --html rep/report.html 2>/dev/null
check "report --html may redraw the report directory's own page" test $? -eq 0
"$LATTICE" groups --world 4 --svg g.svg > /dev/null && "$LATTICE" groups --world 8 --svg g.svg > /dev/null
check "groups --svg replaces an SVG lattice wrote" grep -q "generator: lattice" g.svg
"$LATTICE" schedule --pipeline-model-parallel-size 2 --micro-batches 4 --svg g.svg > /dev/null 2>&1
check "schedule --svg replaces an SVG lattice wrote" test $? -eq 0
"$LATTICE" plan --paper --svg figs2 > /dev/null 2>&1 && "$LATTICE" plan --paper --svg figs2 > /dev/null 2>&1
check "plan --paper --svg replaces its own figures" test $? -eq 0 -a -s figs2/figure7.svg
cp notes.txt scratch.txt
"$LATTICE" groups --world 4 --svg scratch.txt --overwrite > /dev/null
check "--overwrite replaces a file of another kind" grep -q "generator: lattice" scratch.txt
"$LATTICE" "${TINY[@]}" --steps 4 --resume ck --save ck --report-dir rep --trace rep/trace.json 2>/dev/null
check "--save may name the --resume directory; the trace replaces a trace" test $? -eq 0 && grep -q '"step": 4' ck/trainer.json
check "a resume appends to its report" test "$(grep -c '"event":"step"' rep/run.jsonl)" -eq 4
"$LATTICE" "${TINY[@]}" --report-dir rep --overwrite 2>/dev/null
check "--overwrite starts a report directory again" test "$(grep -c '"event":"step"' rep/run.jsonl)" -eq 2
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
check "prepare --out replaces its own prepared data" test $? -eq 0
mkdir -p withcorpus && cp corpus.txt withcorpus/
"$LATTICE" prepare --input withcorpus/corpus.txt --out withcorpus 2>/dev/null
check "prepare --out beside its corpus writes only its own files" test -s withcorpus/train.bin -a "$(md5sum < withcorpus/corpus.txt)" = "$(md5sum < corpus.txt)"

# Locks: a live run holds --save; one killed with -9 leaves nothing that refuses a relaunch.
BIG=(train --data data --layers 2 --hidden 128 --heads 2 --seq-len 64 --micro-batch 4 --threads 1 --steps 100000)
"$LATTICE" "${BIG[@]}" --save busy > /dev/null 2>&1 &
holder=$!
for _ in $(seq 1 100); do [ -e .busy.lattice-lock ] && break; sleep 0.2; done
hostile "a second run with the same --save" 1 "--save busy is being written by another lattice run" -- "${TINY[@]}" --save busy
kill -9 $holder; wait $holder 2>/dev/null
"$LATTICE" "${TINY[@]}" --save busy 2>/dev/null
check "a relaunch after kill -9 is not refused" test $? -eq 0 -a -s busy/model.safetensors
check "a run that ends removes its lock file" test ! -e .busy.lattice-lock
# A run refused after its output paths were checked leaves none of the directories it would have made.
"$LATTICE" "${TINY[@]}" --save new1/deep/ck --report-dir new2/deep --trace new3/deep/t.json --init no-such-checkpoint 2>/dev/null
check "a refused run leaves no empty directory of its outputs" test ! -e new1 -a ! -e new2 -a ! -e new3

# prepare --out is locked the same way: two prepares into one directory could mix one's train.bin
# with the other's tokenizer (second hostile pass).
for _ in $(seq 1 100); do cat corpus.txt; done > big_corpus.txt
"$LATTICE" prepare --input big_corpus.txt --out busy_data --tokenizer bpe --vocab-size 2000 > /dev/null 2>&1 &
holder=$!
for _ in $(seq 1 200); do [ -e .busy_data.lattice-lock ] && break; sleep 0.02; done
hostile "a second prepare into the same --out" 1 "--out busy_data is being written by another lattice run" -- \
  prepare --input corpus.txt --out busy_data
wait $holder
check "the first prepare's data is whole (its bpe tokenizer beside its tokens)" grep -q '"kind": "bpe"' busy_data/tokenizer.json

# Readers refuse what is not a regular file, at once (a FIFO used to block forever).
mkfifo pipe.json
timeout 10 "$LATTICE" plan --layers 2 --hidden 64 --heads 2 --hardware pipe.json > /dev/null 2> fifo.err
check "plan --hardware FIFO refused in one line" test $? -eq 1 -a "$(wc -l < fifo.err)" -eq 1 && grep -q "pipe.json is not a regular file" fifo.err
timeout 10 "$LATTICE" "${TINY[@]}" --pipeline-layers auto --hardware pipe.json > /dev/null 2> fifo.err
check "train --pipeline-layers auto --hardware FIFO refused in one line" test $? -eq 1 && grep -q "not a regular file" fifo.err
timeout 10 "$LATTICE" report pipe.json --html p.html > /dev/null 2> fifo.err
check "report of a FIFO refused" test $? -eq 1 && grep -q "not a regular file" fifo.err
timeout 10 "$LATTICE" "${TINY[@]}" --init pipe.json > /dev/null 2> fifo.err
check "--init FIFO refused" test $? -eq 1 && grep -q "not a regular file" fifo.err
mkdir -p fifodata && cp data/* fifodata/ && rm fifodata/val.bin && mkfifo fifodata/val.bin
timeout 10 "$LATTICE" eval --checkpoint ck --data fifodata/val.bin --batches 1 > /dev/null 2> fifo.err
check "eval --data FIFO refused" test $? -eq 1 && grep -q "not a regular file" fifo.err

# A closed stdout: reported once, the run goes on, the final save is written.
set -o pipefail
"$LATTICE" "${TINY[@]}" --steps 200 --json --save piped 2> piped.err | head -2 > /dev/null
status=$?
set +o pipefail
check "train --json | head -2 exits 0 (got $status)" test "$status" -eq 0
check "... says once that stdout closed" test "$(grep -c 'cannot write standard output' piped.err)" -eq 1
check "... as a note, not an error (it exits 0)" grep -q '^lattice train: note: cannot write standard output: its reader left' piped.err
check "... and still writes its checkpoint" grep -q '"step": 200' piped/trainer.json
"$LATTICE" groups --world 4096 --json 2> g.err | head -c 10 > /dev/null
check "groups --json into a closed pipe: no signal" test "${PIPESTATUS[0]}" -lt 128
# Symbolic links at an output path (second hostile pass): --save at a link to nothing trained to the
# end and then failed to rename; at a link to a checkpoint it put a new directory where the link was
# and locked the link's target. Both refused at start now; a link to nothing is refused for every output.
ln -s nowhere dangling
ln -s ck ck_link
ln -s loop loop
hostile "--save at a link to nothing" 1 "cannot save to dangling: it is a symbolic link \(to nowhere\)" -- "${TINY[@]}" --save dangling
hostile "--save at a link loop" 1 "cannot save to loop: it is a symbolic link" -- "${TINY[@]}" --save loop
hostile "--save at a link to a checkpoint" 1 "cannot save to ck_link: it is a symbolic link \(to ck\).*name the directory itself" -- \
  "${TINY[@]}" --save ck_link
check "the link is still a link" test -L ck_link
hostile "--resume of a link loop" 1 "checkpoint loop: Too many levels of symbolic links" -- "${TINY[@]}" --resume loop
hostile "--report-dir at a link to nothing" 1 "cannot write --report-dir dangling: it is a symbolic link to nowhere, which does not exist" -- \
  "${TINY[@]}" --report-dir dangling
hostile "prepare --out at a link to nothing" 1 "cannot write --out dangling: it is a symbolic link to nowhere" -- prepare --input corpus.txt --out dangling
hostile "groups --svg at a link to nothing" 1 "cannot write --svg dangling: it is a symbolic link to nowhere" -- groups --world 4 --svg dangling
check "nothing was created behind the links" test ! -e nowhere -a -L dangling -a -z "$(ls -d dangling.* 2>/dev/null)"
# A checkpoint file its manifest lists, turned into a FIFO or a link to a device: refused at once (the
# manifest's sums read it before anything checked its kind: a FIFO blocked eval, sample, --resume and
# --init forever, /dev/zero was read forever).
rm -rf ck_fifo ck_dev && cp -r ck ck_fifo && cp -r ck ck_dev
rm ck_fifo/model.safetensors ck_dev/model.safetensors && mkfifo ck_fifo/model.safetensors && ln -s /dev/zero ck_dev/model.safetensors
hostile "eval of a checkpoint whose model.safetensors is a FIFO" 1 "checkpoint file ck_fifo/model.safetensors is not a regular file \(it is a FIFO\)" -- \
  eval --checkpoint ck_fifo --data data/val.bin --batches 1 --threads 1
hostile "--resume of a checkpoint whose model.safetensors is a FIFO" 1 "ck_fifo/model.safetensors is not a regular file" -- \
  "${TINY[@]}" --steps 3 --resume ck_fifo
hostile "sample of a checkpoint whose model.safetensors links to /dev/zero" 1 "ck_dev/model.safetensors is not a regular file \(it is a device\)" -- \
  sample --checkpoint ck_dev --tokens 2 --threads 1
cksum_ck=$(cat ck/* | md5sum)
# Outputs inside a checkpoint: a save replaces it whole, and refuses one holding entries it did not
# write (plan --paper --svg ck wrote two figures there, and ck's next save was refused).
hostile "plan --svg into a checkpoint" 1 "cannot write --svg ck/figure1.svg: it is inside checkpoint .*/ck, which a save replaces whole" -- \
  plan --paper --svg ck
hostile "--save inside a checkpoint" 1 "cannot save to ck/inner: it is inside checkpoint .*/ck," -- "${TINY[@]}" --save ck/inner
hostile "--trace inside a checkpoint's subfolder" 1 "cannot write --trace ck/sub/t.json: it is inside checkpoint" -- \
  "${TINY[@]}" --trace ck/sub/t.json
check "... and the checkpoint holds nothing new" test "$(cat ck/* | md5sum)" = "$cksum_ck" -a ! -e ck/sub -a ! -e ck/inner
# --save DIR/ (and DIR/., DIR//) is DIR: the staging copy and the lock were made inside DIR, and the
# save refused after the whole run, leaving the checkpoint in DIR/.unsaved-PID.
rm -rf slash && "$LATTICE" "${TINY[@]}" --save slash/ > /dev/null 2> slash_save.err
check "--save slash/ saves" test $? -eq 0 -a -s slash/model.safetensors
check "... with nothing but the checkpoint inside" test -z "$(ls -A slash | grep -v -x -e model.safetensors -e optimizer.safetensors -e trainer.json -e config.json -e tokenizer.json -e lattice-checkpoint.json -e .lattice-save)"
"$LATTICE" "${TINY[@]}" --steps 3 --resume slash/. --save slash/. > /dev/null 2> slash_save.err
status=$?
check "--resume slash/. --save slash/. replaces it at step 3" test "$status" -eq 0 -a \
  "$(grep -c '"step": 3' slash/trainer.json)" -ge 1
check "... and leaves nothing beside or inside it" test -z "$(ls -A . | grep -e '^slash\.' -e '^\.slash')" -a -z "$(ls -A slash | grep -e unsaved -e tmp -e lock)"
# A --trace given to report is drawn or refused (a text file gave a page saying it could not be
# drawn, and "timeline from the trace" on stderr).
hostile "report --trace of a text file" 1 "--trace notes.txt cannot be drawn: trace notes.txt is not a lattice trace" -- report rep --html t.html --trace notes.txt
check "... and no page was written" test ! -e t.html
# --tokenizer-from a directory that holds no tokenizer (an empty one was read as the byte tokenizer's).
mkdir -p empty_tok
hostile "prepare --tokenizer-from an empty directory" 1 "--tokenizer-from empty_tok holds no tokenizer" -- \
  prepare --input corpus.txt --out tok_out --tokenizer-from empty_tok
# A file past `ulimit -f`: one line naming the file, not a process killed by SIGXFSZ mid-save.
(ulimit -f 40; "$LATTICE" "${TINY[@]}" --save fsize > /dev/null 2> fsize.err)
status=$?
check "a save past ulimit -f exits 1, not by a signal (got $status)" test "$status" -eq 1
check "... in one line naming the file" grep -q "error: cannot write fsize.tmp-.*File too large" fsize.err
check "... leaving no checkpoint and no temporary" test ! -e fsize -a -z "$(ls -d fsize.tmp-* 2>/dev/null)"

hostile_summary
exit $((failures > 0))
