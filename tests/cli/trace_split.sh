#!/usr/bin/env bash
# lattice schedule --from-trace FILE --split: a real step's time on each rank in the planner's parts
# (report/trace_split.hpp), from `lattice train --trace`. One rank: GEMMs, no comm; TP 2: TP comm and
# no pipeline; PP 2: point-to-point and bubble, no TP; DP 2: DP comm; selective and full
# recompute: recompute time. On every rank the parts add up to the step. Old traces are refused.
set -u
LATTICE=$1
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
. "$HERE/lib/hostile.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive  # ranks oversubscribe the 2 cores
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
start=$(date +%s)
checks=0
c() { checks=$((checks + 1)); check "$@"; }

hostile_corpus
MODEL=(--data data --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 8
       --steps 2 --threads 1)

traced() {  # traced NAME NP FLAGS...: train with --trace NAME.json, then its split as NAME.split.json
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then
    "$LATTICE" train "${MODEL[@]}" --trace "$name.json" "$@" > "$name.out" 2> "$name.err"
  else
    timeout 120 mpirun --oversubscribe -np "$np" "$LATTICE" train "${MODEL[@]}" --trace "$name.json" "$@" \
      > "$name.out" 2> "$name.err"
  fi
  c "$name: train exits 0" test $? -eq 0
  "$LATTICE" schedule --from-trace "$name.json" --split --json > "$name.split.json" 2> "$name.split.err"
  c "$name: --split exits 0" test $? -eq 0
}

# split NAME NP CONDITION: the split of NAME has NP ranks, each summing to its step, and CONDITION (a
# Python expression over r, one rank's parts) holds on every rank.
split() {
  local name=$1 np=$2 cond=$3
  "$PY" -c "
import json, sys
d = json.load(open('$name.split.json'))
parts = ['gemm_s', 'elementwise_s', 'recompute_s', 'tp_comm_s', 'ep_comm_s', 'cp_comm_s', 'pp_comm_s', 'bubble_s', 'dp_comm_s',
         'optimizer_s', 'other_s']
ok = d['event'] == 'trace_split' and d['step'] == 1 and [r['rank'] for r in d['ranks']] == list(range($np))
for r in d['ranks']:
    total = sum(r[p] for p in parts)
    ok = ok and r['step_s'] > 0 and abs(total - r['step_s']) <= 1e-9 * r['step_s'] and min(r[p] for p in parts) >= 0
    ok = ok and bool($cond)
if not ok: print(json.dumps(d))
sys.exit(0 if ok else 1)"
}

traced one 1
c "one rank: GEMMs and element-wise time, no comm, no bubble, parts sum to the step" split one 1 \
  "r['gemm_s'] > 0 and r['elementwise_s'] > 0 and r['optimizer_s'] > 0 and
   r['tp_comm_s'] == r['pp_comm_s'] == r['dp_comm_s'] == r['bubble_s'] == r['recompute_s'] == 0"
traced tp2 2 --tensor-model-parallel-size 2
c "TP 2: TP comm on both ranks, no pipeline" split tp2 2 \
  "r['tp_comm_s'] > 0 and r['gemm_s'] > 0 and r['pp_comm_s'] == r['bubble_s'] == r['dp_comm_s'] == 0"
traced pp2 2 --pipeline-model-parallel-size 2
c "PP 2: point-to-point copies and a bubble on both ranks, no TP comm" split pp2 2 \
  "r['pp_comm_s'] > 0 and r['bubble_s'] > 0 and r['tp_comm_s'] == 0 and r['gemm_s'] > 0"
c "PP 2: the embedding's gradient sum is DP comm (tied wte on both stages)" split pp2 2 "r['dp_comm_s'] > 0"
traced dp2 2
c "DP 2: the gradient reduction is DP comm, no TP or pipeline" split dp2 2 \
  "r['dp_comm_s'] > 0 and r['tp_comm_s'] == r['pp_comm_s'] == r['bubble_s'] == 0"
traced selective 1 --recompute selective
c "selective recompute: recompute time" split selective 1 "r['recompute_s'] > 0"
traced full 1 --recompute full
c "full recompute: recompute time, more of the step than selective's" split full 1 "r['recompute_s'] > 0"
"$PY" -c "
import json, sys
f = json.load(open('full.split.json'))['ranks'][0]; s = json.load(open('selective.split.json'))['ranks'][0]
sys.exit(0 if f['recompute_s'] / f['step_s'] > s['recompute_s'] / s['step_s'] else 1)"
c "full recompute re-runs more of the step than selective" test $? -eq 0

# The trace still draws as a timeline (the new kinds are skipped there).
"$LATTICE" schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace pp2.json --json \
  > pp2.timeline 2> pp2.timeline.err
c "the PP 2 trace still reads as a timeline" grep -q '"peak_in_flight":\[2,1\]' pp2.timeline

# Text: a row per part, a column per rank, seconds and share of the step.
"$LATTICE" schedule --from-trace tp2.json --split > tp2.split.txt 2> tp2.split.err
c "text: exit 0" test $? -eq 0
c "text: the header names the step and the file" grep -q "^step 1 of tp2.json" tp2.split.txt
c "text: a column per rank" grep -qE "^part +rank 0 +rank 1$" tp2.split.txt
c "text: the step is 100% on both ranks" grep -qE "^step +[0-9.]+ 100\.0% +[0-9.]+ 100\.0%$" tp2.split.txt
rows="^(gemm|elementwise|recompute|tp_comm|ep_comm|cp_comm|pp_comm|bubble|dp_comm|optimizer|other) "
c "text: every part on its row" test "$(grep -cE "$rows" tp2.split.txt)" -eq 11
"$LATTICE" schedule --from-trace one.json --split --json --trace-step 0 > step0.json 2> step0.err
c "--trace-step 0 splits the first step" grep -q '"step":0,' step0.json

# Refused, one line each: exit 1 for bad input, 2 for usage.
"$PY" -c "
import json
d = json.load(open('one.json'))
d['traceEvents'] = [e for e in d['traceEvents'] if e.get('cat') in (None, 'forward', 'backward', 'optimizer')]
json.dump(d, open('old.json', 'w'))"
hostile "a trace written before step spans" 1 "old.json has no step spans \(written by an older lattice" -- \
  schedule --from-trace old.json --split
hostile "a step not in the trace" 1 "has no step 9 \(it holds steps 0 to 1\)" -- \
  schedule --from-trace one.json --split --trace-step 9
hostile "--split with a layout it would ignore" 1 "--micro-batches does not apply with --split" -- \
  schedule --from-trace one.json --split --micro-batches 4
hostile "--split with times it would ignore" 1 "--forward-time does not apply with --split" -- \
  schedule --from-trace one.json --split --forward-time 2
hostile "--split without a trace" 1 "--split needs --from-trace FILE" -- schedule --split
# The timeline read against the layout given (a bubble past 100%, a wrapped rank, rows of ranks that
# never ran were accepted): a trace of another layout, a negative span and a rank past p are refused.
# The trace records the layout it ran (otherData.layout): another layout is named beside it.
ran="pp2.json ran --schedule 1f1b, 2 pipeline ranks, 4 micro-batches, not"
hostile "a trace of 2 ranks read as 4" 1 "$ran --schedule 1f1b, 4 pipeline ranks, 4 micro-batches: a trace of another" -- \
  schedule --pipeline-model-parallel-size 4 --micro-batches 4 --from-trace pp2.json
hostile "a trace of 4 micro-batches read as 3" 1 "$ran --schedule 1f1b, 2 pipeline ranks, 3 micro-batches" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 3 --from-trace pp2.json
hostile "a 1F1B trace read as GPipe" 1 "$ran --schedule gpipe, 2 pipeline ranks, 4 micro-batches" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule gpipe --from-trace pp2.json
hostile "a 1F1B trace read as ZB-H1" 1 "$ran --schedule zb-h1," -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule zb-h1 --from-trace pp2.json
# A trace without the record (lattice before it) is held to the schedule's passes in their order.
"$PY" - pp2.json <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["otherData"]["layout"] == {"schedule": "1f1b", "world": 2, "pp": 2, "virtual_stages": 1, "micro_batches": 4}
del doc["otherData"]["layout"]
json.dump(doc, open("unrecorded.json", "w"))
last = max(e["args"]["step"] for e in doc["traceEvents"] if e.get("cat") == "backward")
cut = [e for e in doc["traceEvents"] if not (e.get("cat") == "backward" and e["tid"] == 1 and
                                               e["args"]["step"] == last and e["args"]["micro_batch"] == 2)]
doc["traceEvents"] = cut
json.dump(doc, open("nobackward.json", "w"))
PYEOF
"$LATTICE" schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace unrecorded.json --json \
  > unrecorded.timeline 2> unrecorded.err
c "a trace without the layout record still reads as its own layout" grep -q '"peak_in_flight":\[2,1\]' unrecorded.timeline
hostile "an unrecorded 1F1B trace read as GPipe" 1 \
  "unrecorded.json: rank 0's pass 3 is the backward of micro-batch 0, chunk 0 where --schedule gpipe, 2 pipeline ranks, 4 micro-batches runs the forward of micro-batch 2, chunk 0: a trace of another layout" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule gpipe --from-trace unrecorded.json
hostile "an unrecorded trace of 2 ranks read as 4" 1 "has no forward or backward of step .* on rank 2 of the 4 of" -- \
  schedule --pipeline-model-parallel-size 4 --micro-batches 4 --from-trace unrecorded.json
hostile "an unrecorded trace missing a backward" 1 "nobackward.json: rank 1's pass 6 is the forward of micro-batch 3, chunk 0 where .* runs the backward of micro-batch 2, chunk 0: .*cut short" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace nobackward.json
# Passes that overlap on a rank are not one thread's (the bubble came out below 0); PipeDream-2BW's
# step is held to its kinds of step (forwards were all that was counted).
"$PY" - unrecorded.json <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
last = max(e["args"]["step"] for e in doc["traceEvents"] if e.get("cat") == "forward")
ps = sorted([e for e in doc["traceEvents"] if e.get("cat") in ("forward", "backward") and e["tid"] == 0
             and e["args"]["step"] == last], key=lambda e: e["ts"])
for i, e in enumerate(ps): e["ts"], e["dur"] = ps[0]["ts"] + i * 0.001, 1000.0
json.dump(doc, open("overlap.json", "w"))
PYEOF
hostile "passes that overlap on a rank" 1 "overlap.json: on rank 0 the forward of micro-batch 1, chunk 0 starts before the forward of micro-batch 0, chunk 0 ends" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace overlap.json
traced bw 2 --pipeline-model-parallel-size 2 --schedule pipedream-2bw
"$LATTICE" schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule pipedream-2bw --from-trace bw.json \
  --trace-step 0 --json > bw.first 2> bw.first.err
c "a PipeDream-2BW trace's first step (its backwards deferred) reads as its own" grep -q '"bubble":' bw.first
"$PY" -c "
import json
d = json.load(open('bw.json'))
d['traceEvents'] = [e for e in d['traceEvents'] if e.get('cat') != 'backward']
json.dump(d, open('bw_nobackward.json', 'w'))"
hostile "a PipeDream-2BW trace without its backwards" 1 "bw_nobackward.json: rank 0's pass 2 is the forward of micro-batch 1, chunk 0 where a steady step of --schedule pipedream-2bw" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule pipedream-2bw --from-trace bw_nobackward.json
"$PY" -c "
import json
d = json.load(open('pp2.json'))
[e for e in d['traceEvents'] if e.get('cat') == 'forward'][0]['args']['micro_batch'] = 2**64 - 1
json.dump(d, open('wrapped.json', 'w'))
d = json.load(open('pp2.json'))
d['traceEvents'] = [e for e in d['traceEvents'] if e.get('tid') != 1]
json.dump(d, open('onerank.json', 'w'))"
hostile "an args value past 2^63 (read as -1)" 1 "wrapped.json is not a lattice trace .*args.micro_batch is not an integer from -1" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace wrapped.json
hostile "--split of a trace missing a rank it records" 1 "onerank.json has no spans of rank 1 of the 2 it records: cut short" -- \
  schedule --from-trace onerank.json --split
# The file is read as a stream of events, not built as a document: 3 million events (30 MB; a
# document of them took over 600 MB, and aborted at its limit where it could not say so in one line)
# are read within 450 MB of address space, the binary and its libraries included (~300 MB).
"$PY" -c "open('objs.json', 'w').write('{\"traceEvents\":[' + '{\"ph\":\"M\"},' * 3000000 + '{\"ph\":\"M\"}]}')"
(ulimit -v 450000; "$LATTICE" schedule --from-trace objs.json --split > objs.out 2> objs.err)
c "a 30 MB trace read in 450 MB of address space: one line, no abort" grep -q "objs.json has no step spans" objs.err
rm -f objs.json
# One stage runs each micro-batch's forward and backward in turn whatever --schedule says.
"$LATTICE" train "${MODEL[@]}" --schedule gpipe --trace gpipe1.json > /dev/null 2>&1
"$LATTICE" schedule --pipeline-model-parallel-size 1 --micro-batches 4 --schedule gpipe --from-trace gpipe1.json \
  --json > gpipe1.timeline 2> gpipe1.err
c "a one-stage run under --schedule gpipe reads as its own trace" grep -q '"peak_in_flight":\[1\]' gpipe1.timeline
"$PY" -c "
import json
d = json.load(open('pp2.json'))
[e for e in d['traceEvents'] if e.get('cat') == 'forward'][-1]['args']['chunk'] = 2**31 - 1
json.dump(d, open('farchunk.json', 'w'))"
hostile "a pass of a chunk past the layout's" 1 "farchunk.json has a pass of micro-batch [0-9], chunk 2147483647 on rank [01], past --schedule 1f1b" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace farchunk.json
# TP 2 has two world ranks in one pipeline rank: the timeline draws pipeline rank 0 (world rank 0).
"$LATTICE" schedule --pipeline-model-parallel-size 1 --micro-batches 4 --from-trace tp2.json --json > tp2.timeline 2> tp2.timeline.err
c "a TP 2 trace draws as one pipeline rank" grep -q '"peak_in_flight":\[1\]' tp2.timeline
# A report drawing another run's trace: refused by hand, named on the page from the run's own directory.
"$LATTICE" train "${MODEL[@]}" --report-dir rundir --trace rundir/trace.json > rundir.out 2> rundir.err
c "a run with a report directory: exit 0" test $? -eq 0
"$PY" -m json.tool rundir/trace.json > reformatted.json
"$LATTICE" report rundir --html reformatted.html --trace reformatted.json > /dev/null 2> reformatted.err
c "report draws a trace re-indented by another tool (its first bytes are not the writer's)" grep -q "timeline from the trace" reformatted.err
"$LATTICE" report rundir/run.jsonl --html rundir/by_log.html > /dev/null 2> by_log.err
c "report of a run.jsonl may write into the run's own directory, as report of the directory may" test -s rundir/by_log.html
# The trace carries its start's id (the start record's): another run's, of the same layout and model,
# was drawn as this one's.
hostile "report with another run's trace of the same layout" 1 "--trace one.json cannot be drawn: trace one.json is of another run, or of this one before a resume \(start id [0-9a-f]{16}, not [0-9a-f]{16}\)" -- \
  report rundir --html other.html --trace one.json
hostile "report with another layout's trace" 1 "--trace pp2.json cannot be drawn: trace $ran --schedule 1f1b, 1 pipeline rank, 4 micro-batches" -- \
  report rundir --html page.html --trace pp2.json
"$PY" - pp2.json <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
work = [e for e in doc["traceEvents"] if e.get("cat") == "forward"]
neg = json.loads(json.dumps(doc)); [e for e in neg["traceEvents"] if e.get("cat") == "forward"][-1]["dur"] = -5
json.dump(neg, open("negdur.json", "w"))
far = json.loads(json.dumps(doc)); [e for e in far["traceEvents"] if e.get("cat") == "forward"][-1]["tid"] = 2 ** 40
json.dump(far, open("bigtid.json", "w"))
huge = json.loads(json.dumps(doc)); [e for e in huge["traceEvents"] if e.get("cat") == "forward"][0]["dur"] = 1e300
json.dump(huge, open("hugedur.json", "w"))
PYEOF
hostile "a span of negative length" 1 "negdur.json is not a lattice trace .*an event has a negative duration" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace negdur.json
hostile "a rank past 2^32" 1 "bigtid.json is not a lattice trace .*track \(tid, its rank\) is not an integer from 0 to 65535" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace bigtid.json
# One reader for both: a span of 1e300 µs is refused by the timeline as by the split.
hostile "a span of 1e300 us in the timeline" 1 "hugedur.json is not a lattice trace .*dur is not a time in microseconds" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace hugedur.json
hostile "a span of 1e300 us in the split" 1 "hugedur.json is not a lattice trace .*dur is not a time in microseconds" -- \
  schedule --from-trace hugedur.json --split
echo '{"traceEvents": [{"cat":"step","ph":"X","args":{"step":1},"tid":"zero","ts":1,"dur":5}]}' > foreign.json
hostile "a foreign JSON" 1 "foreign.json is not a lattice trace" -- schedule --from-trace foreign.json --split
hostile "--split with --svg" 1 "no --svg or --actions" -- schedule --from-trace one.json --split --svg x.svg
hostile "no pipeline flags without --split" 2 "--pipeline-model-parallel-size is required" -- \
  schedule --from-trace one.json --micro-batches 4
checks=$((checks + 4 * HOSTILE_TRIED))

c "under 90 s ($(( $(date +%s) - start )) s)" test $(( $(date +%s) - start )) -le 90
echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
