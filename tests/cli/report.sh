#!/usr/bin/env bash
# The run report: train --report-dir writes the same records as --json and a report.html drawn as
# the run goes; lattice report draws the same page from the directory or the JSON Lines file; the
# start record carries the planner's prediction; a pipeline run's trace becomes its timeline; plan
# --html draws a plan and a search; bad input is one line.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
. "$(dirname "$0")/lib/hostile.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
hostile_corpus
MODEL=(--layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --threads 1)

"$LATTICE" train --data data "${MODEL[@]}" --steps 6 --eval-every 3 --save ck --json --report-dir rep > stdout.jsonl 2> train.err
check "train --json --report-dir: exit 0" test $? -eq 0
check "run.jsonl holds exactly the records --json printed" cmp -s stdout.jsonl rep/run.jsonl
check "the first record is the start record, then 6 steps, 2 evaluations and the summary" "$PY" -c "
import json, sys
e = [json.loads(l)['event'] for l in open('rep/run.jsonl')]
sys.exit(0 if e[0] == 'start' and e.count('step') == 6 and e.count('eval') == 2 and e[-1] == 'summary' else 1)"
check "report.html is a whole page with every section" "$PY" -c "
import sys
s = open('rep/report.html').read()
ids = ['overview', 'curves', 'memory', 'activations', 'communication', 'timeline']
sys.exit(0 if s.rstrip().endswith('</html>') and all('<section id=\"%s\">' % i in s for i in ids) and 'finished: 6 steps' in s else 1)"

# The prediction in the start record is the planner's, for the same run.
"$LATTICE" plan "${MODEL[@]}" --vocab 256 --activation-dtype fp32 --params-dtype fp32 --data data --save --json > plan.json
check "the start record's prediction = lattice plan's memory_by_stage (stage 0, the writer)" "$PY" -c "
import json, sys
start = json.loads(open('rep/run.jsonl').readline())
plan = json.load(open('plan.json'))['memory_by_stage'][0]
writer = [p for p in start['predicted_memory'] if p['stage'] == 0 and p['writer']][0]['bytes']
keys = ['activations', 'model_states', 'workspaces', 'data']
print([(k, writer[k], plan[k]) for k in keys])
sys.exit(0 if all(writer[k] == plan[k] for k in keys) and writer['checkpoint_io'] > 0 else 1)"
check "the measured activations and model states equal the prediction the report shows" "$PY" -c "
import json, sys
d = [json.loads(l) for l in open('rep/run.jsonl')]
pred = [p for p in d[0]['predicted_memory'] if p['writer']][0]['bytes']
meas = d[-1]['memory']['ranks'][0]['category_peak_bytes']
sys.exit(0 if all(meas[k] == pred[k] for k in ['activations', 'model_states']) else 1)"

"$LATTICE" report rep --html again.html 2> report.err
check "lattice report RUN_DIR: exit 0, one line naming the file" test $? -eq 0 -a "$(wc -l < report.err)" -eq 1
check "... the same page the run drew" cmp -s again.html rep/report.html
"$LATTICE" report stdout.jsonl --html from_jsonl.html 2> /dev/null
check "lattice report RUN.jsonl draws the same page" cmp -s from_jsonl.html rep/report.html

# A resumed run continues the directory's log, even one whose last line a kill cut short: the report
# covers every step, once.
"$PY" -c "
s = open('rep/run.jsonl').read()
open('rep/run.jsonl', 'w').write(s[:-40])"
"$LATTICE" train --data data "${MODEL[@]}" --steps 9 --eval-every 3 --resume ck --report-dir rep 2> resume.err
check "resume into the same --report-dir: exit 0" test $? -eq 0
check "run.jsonl holds steps 1-9 across the two runs" "$PY" -c "
import json, sys
steps = [json.loads(l)['step'] for l in open('rep/run.jsonl') if '\"event\":\"step\"' in l]
sys.exit(0 if steps == list(range(1, 10)) else 1)"
check "... and the report says 9 steps" grep -q "finished: 9 steps" rep/report.html
"$LATTICE" train --data data "${MODEL[@]}" --steps 9 --eval-every 3 --resume ck --report-dir rep 2> resume2.err
check "resumed twice from the same checkpoint: the steps are 1-9 once, and lattice report reads the log" "$PY" -c "
import json, subprocess, sys
steps = [json.loads(l)['step'] for l in open('rep/run.jsonl') if '\"event\":\"step\"' in l]
sys.exit(0 if steps == list(range(1, 10)) + [7, 8, 9] else 1)"
"$LATTICE" report rep --html twice.html 2> /dev/null
check "... and the page draws steps 1-9, each once" "$PY" -c "
import json, re, sys
s = open('twice.html').read()
series = json.loads(re.search(r'data-series=\"([^\"]*)\"', s).group(1).replace('&quot;', '\"'))
sys.exit(0 if [p[0] for p in series[0][2]] == list(range(1, 10)) else 1)"

# Drawn as the run goes: after the first evaluation, before the end.
"$LATTICE" train --data data "${MODEL[@]}" --steps 1000000 --eval-every 2 --eval-batches 1 --report-dir live \
  > /dev/null 2> live.err &
LIVE=$!
for _ in $(seq 1 600); do [ -f live/report.html ] && break; sleep 0.1; done
kill -KILL $LIVE 2>/dev/null; wait $LIVE 2>/dev/null
check "a running run's report exists, whole, and says it is running" "$PY" -c "
import sys
s = open('live/report.html').read()
sys.exit(0 if s.rstrip().endswith('</html>') and 'running: step' in s and 'not yet' in s else 1)"
check "a killed run leaves no temporary report behind" test -z "$(ls live | grep -v -x -e run.jsonl -e report.html)"

# A pipeline run with its trace: the timeline and the point-to-point traffic.
mpirun --oversubscribe -np 2 "$LATTICE" train --data data "${MODEL[@]}" --steps 3 --global-batch 8 \
  --pipeline-model-parallel-size 2 --report-dir pp --trace pp/trace.json > /dev/null 2> pp.err
check "PP 2 with --report-dir and --trace: exit 0" test $? -eq 0
check "its report draws the timeline of both ranks and the sends" "$PY" -c "
import sys
s = open('pp/report.html').read()
sys.exit(0 if '1F1B' in s and s.count('>rank 0<') >= 1 and '>rank 1<' in s and '<td>send</td>' in s else 1)"
"$LATTICE" report pp --html pp_again.html 2> /dev/null
check "lattice report finds the directory's trace.json" cmp -s pp_again.html pp/report.html

# plan --html: a plan, and a search.
"$LATTICE" plan --layers 8 --hidden 256 --heads 8 --seq-len 128 --vocab 512 --micro-batch 2 --global-batch 16 \
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --gpus 8 --html plan.html > plan.txt
check "plan --html: exit 0 and the text plan still printed" test $? -eq 0 -a -s plan.txt
check "... one group per stage, the device's memory line, time by part" "$PY" -c "
import sys
s = open('plan.html').read()
sys.exit(0 if '>stage 0<' in s and '>stage 1<' in s and '>stage 2<' not in s and 'device memory' in s and 'PP p2p' in s else 1)"
"$LATTICE" plan --layers 8 --hidden 256 --heads 8 --seq-len 128 --vocab 512 --global-batch 16 \
  --gpus 8 --search --top 5 --html search.html > search.txt
check "plan --search --html: the five layouts in the table" test "$(grep -c '<td class="n">[1-5]</td><td>t=' search.html)" -eq 5

# Two runs into one directory: the second is refused while the first writes.
"$LATTICE" train --data data "${MODEL[@]}" --steps 1000000 --report-dir busy > /dev/null 2> busy.err &
BUSY=$!
for _ in $(seq 1 300); do [ -s busy/run.jsonl ] && break; sleep 0.1; done
"$LATTICE" train --data data "${MODEL[@]}" --steps 2 --report-dir busy > /dev/null 2> busy2.err
check "a second run into a directory another run writes: exit 1, one line" test $? -eq 1 -a "$(wc -l < busy2.err)" -eq 1
check "... naming the other run" grep -q "being written by another lattice run" busy2.err
kill -KILL $BUSY 2>/dev/null; wait $BUSY 2>/dev/null

# A full disk under the report (40 KiB: the log fits, a second page does not): a warning, and training goes on (only the log itself is essential).
mkdir -p small
if mount -t tmpfs -o size=40k tmpfs small 2>/dev/null; then
  "$LATTICE" train --data data "${MODEL[@]}" --steps 12 --report-dir small/rep > /dev/null 2> full.err
  check "a report that no longer fits: the run still ends with exit 0" test $? -eq 0
  check "... saying once that report.html was not redrawn" test "$(grep -c 'warning: report.html not redrawn' full.err)" -eq 1
  check "... and the log holds every step" test "$(grep -c '"event":"step"' small/rep/run.jsonl)" -eq 12
  umount small
else
  echo "skipped: a 40 KiB tmpfs could not be mounted here"
fi

# Bad input: one line each, nothing of the user's touched.
mkdir -p mine && echo "my notes" > mine/notes.txt && echo "not a dir" > afile
printf '{"event":"step","step":1}\nthis is not json\n' > broken.jsonl
PROTECT="mine afile broken.jsonl stdout.jsonl rep/run.jsonl"
hostile "--html is the input" 1 "is an input of this command" -- report stdout.jsonl --html stdout.jsonl
hostile "no --html" 2 "html" -- report rep
hostile "a line that is not JSON" 1 "line 2 is not JSON" -- report broken.jsonl --html b.html
# Two runs' logs joined: the second start was taken for a resume and the first run's steps dropped
# without a word (third hostile pass); and a log appended to itself.
cat rep/run.jsonl stdout.jsonl > joined.jsonl
hostile "two runs' logs joined" 1 "joined.jsonl line [0-9]+: a second run starts here, not resumed from the first" -- \
  report joined.jsonl --html j.html
cat stdout.jsonl stdout.jsonl > twice.jsonl
hostile "a log appended to itself" 1 "twice.jsonl line [0-9]+: a second run starts here" -- report twice.jsonl --html j.html
hostile "a directory without run.jsonl" 1 "holds no run.jsonl" -- report mine --html m.html
hostile "a missing run" 1 "does not exist" -- report nowhere --html n.html
hostile "a missing --trace" 1 "--trace nowhere.json is not a readable file" -- report rep --html t.html --trace nowhere.json
head -c 2000 pp/trace.json > cut_trace.json  # a trace cut short: its header says lattice, its body does not parse
hostile "a --trace cut short" 1 "--trace cut_trace.json cannot be drawn: .*parse error" -- \
  report pp --html cut.html --trace cut_trace.json
check "... and no page written" test ! -e cut.html
hostile "--report-dir holds a user's files" 1 "holds files and no run.jsonl" -- \
  train --data data "${MODEL[@]}" --steps 2 --report-dir mine
hostile "--report-dir is a file" 1 "is not a directory" -- train --data data "${MODEL[@]}" --steps 2 --report-dir afile
mkdir -p notes && echo "my notes, not a log" > notes/run.jsonl
PROTECT="$PROTECT notes"
hostile "--report-dir holds someone else's run.jsonl" 1 "not a lattice run log" -- \
  train --data data "${MODEL[@]}" --steps 2 --report-dir notes
hostile "--report-dir is the --save directory" 1 "overlap" -- train --data data "${MODEL[@]}" --steps 2 --save same --report-dir same
hostile "--report-dir inside the --save directory" 1 "overlap" -- \
  train --data data "${MODEL[@]}" --steps 2 --save outer --report-dir outer/rep
hostile "--html names a directory" 1 "must name a file" -- report rep --html mine/
hostile "--html with --paper" 1 "--html draws a plan" -- plan --paper --html p.html
hostile "--html where nothing can be written" 1 "--html" -- plan --layers 2 --hidden 64 --heads 4 --html /proc/version/x.html
# Another run's report directory holds no output of other commands: its report.html and trace are
# that run's (plan --html and report --html replaced its page; schedule --svg --overwrite its trace).
cp -r rep other
PROTECT=other
hostile "plan --html over another run's report" 1 "cannot write --html other/report.html: it is inside report directory .*other" -- \
  plan --layers 2 --hidden 64 --heads 4 --html other/report.html
hostile "report --html into another run's directory" 1 "it is inside report directory .*other" -- \
  report rep --html other/report.html
hostile "schedule --svg --overwrite over a run's file" 1 "cannot write --svg other/run.svg: it is inside report directory" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --svg other/run.svg --overwrite
PROTECT=
mkdir -p fifo_run && mkfifo fifo_run/run.jsonl
hostile "report of a directory whose run.jsonl is a FIFO" 1 "fifo_run's run.jsonl is not a regular file" -- \
  report fifo_run --html fifo.html
"$LATTICE" report rep --html rep/report.html > /dev/null 2>&1
check "lattice report of a directory still draws its own report.html" test $? -eq 0
check "no report written by the refused commands" test ! -e j.html -a ! -e b.html -a ! -e m.html -a ! -e n.html -a ! -e t.html -a ! -e p.html
hostile_summary

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
