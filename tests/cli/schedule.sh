#!/usr/bin/env bash
# lattice schedule: simulated bubble beside the formula, peak in-flight per stage (eq. 5), one-line
# JSON, the timeline SVG; bad schedules exit 1, bad flags exit 2, each with one stderr line.
set -uo pipefail
LATTICE=$1; SCRATCH=$2
mkdir -p "$SCRATCH"
. "$(dirname "$0")/lib/subcommand.sh"

sched() { "$LATTICE" schedule --pipeline-model-parallel-size "$@"; }

got=$(sched 4 --micro-batches 8 --schedule 1f1b --json)
want='{"event":"schedule","schedule":"1f1b","p":4,"micro_batches":8,"virtual_stages":1,'
want+='"bubble":0.2727272727272727,"bubble_formula":0.2727272727272727,"total_time":33.0,"ideal_time":24.0,'
want+='"peak_in_flight":[4,3,2,1],"peak_in_flight_stages":[4.0,3.0,2.0,1.0],"first_stage_formula":4.0,'
want+='"forward_time":1.0,"backward_time":2.0,"p2p_latency":0.0}'
[ "$got" = "$want" ] || fail "1F1B p=4 n=8 JSON: $got"

got=$(sched 4 --micro-batches 8 --schedule gpipe --json)
echo "$got" | grep -q '"peak_in_flight":\[8,8,8,8\]' || fail "GPipe holds all 8 micro-batches: $got"
echo "$got" | grep -q '"bubble":0.2727272727272727,"bubble_formula":0.2727272727272727' || fail "GPipe bubble: $got"

# Interleaved m = 2: bubble 3/19, first stage 11 chunks = 4·(1 + 3/8) = 5.5 stages' worth (eq. 5).
got=$(sched 4 --micro-batches 8 --schedule interleaved --virtual-pipeline-model-parallel-size 2 --json)
echo "$got" | grep -q '"bubble":0.1578947368421052[0-9]*,"bubble_formula":0.1578947368421052' || fail "interleaved bubble: $got"
echo "$got" | grep -q '"peak_in_flight":\[11,9,7,5\],"peak_in_flight_stages":\[5.5,4.5,3.5,2.5\],"first_stage_formula":5.5' ||
  fail "interleaved peaks: $got"

got=$(sched 2 --micro-batches 2 --schedule 1f1b --p2p-latency 0.5 --json)
echo "$got" | grep -q '"total_time":10.0,' || fail "latency 0.5 on the critical path's two hops: 9 + 2·0.5: $got"

got=$(sched 2 --micro-batches 4 --schedule gpipe --json --actions)
echo "$got" | grep -q '"actions":\[\["F0 ->r1","F1 ->r1","F2 ->r1","F3 ->r1","B0 <-r1",' || fail "--actions in JSON: $got"

sched 4 --micro-batches 8 --schedule interleaved --virtual-stages 2 > "$SCRATCH/text" || fail "text output exits 0"
grep -q "^bubble: 15.79% simulated, 15.79% by (p-1)/(m\*n+p-1)" "$SCRATCH/text" || fail "text bubble line"
grep -q "^  rank 0: 11 chunks = 5.5 x L/p layers .*= 5.5)" "$SCRATCH/text" || fail "text first-stage peak"
grep -q "^  rank 3: F0.c0 <-r2 ->r0 | F1.c0 <-r2 ->r0" "$SCRATCH/text" || fail "small schedules list actions"
sched 8 --micro-batches 64 > "$SCRATCH/big" || fail "large 1F1B runs"
grep -q "^actions" "$SCRATCH/big" && fail "large schedules do not list actions unasked"

rm -f "$SCRATCH/t.svg"
sched 4 --micro-batches 8 --schedule interleaved --virtual-stages 2 --svg "$SCRATCH/t.svg" --json > /dev/null ||
  fail "--svg exits 0"
svg_complete "$SCRATCH/t.svg"
[ "$(grep -o "class='box'" "$SCRATCH/t.svg" | wc -l)" -eq 128 ] || fail "one box per action (4 ranks × 32)"

# Uneven stages: even counts simulate exactly like no counts; with an output layer on the last stage,
# moving layers off it shortens the step; no step beats n micro-batches of its slowest stage.
total() { "$LATTICE" schedule --pipeline-model-parallel-size 4 --micro-batches 8 --json "$@" |
          python3 -c "import json, sys; print(json.load(sys.stdin)['total_time'])"; }
[ "$(total --pipeline-layers 3,3,3,3)" = "$(total)" ] || fail "even counts change the simulation"
even=$(total --head-time 0.5); uneven=$(total --head-time 0.5 --pipeline-layers 4,3,3,2)
python3 -c "import sys; e, u = $even, $uneven; sys.exit(0 if u < e and u >= 8 * (4 / 3) * 3 else 1)" ||
  fail "head time 0.5: 4,3,3,2 takes $uneven against even stages' $even"

expect() { expect_status schedule "$@"; }  # expect <status> <text in stderr> <args...>
P=--pipeline-model-parallel-size
expect 1 "micro-batches (6) to be a multiple of the pipeline-model-parallel size p = 4" \
  $P 4 --micro-batches 6 --schedule interleaved --virtual-stages 2
expect 1 "needs virtual stages m >= 2" $P 4 --micro-batches 8 --schedule interleaved
expect 1 "--forward-time must be a finite number of time units above 0 and at most 1e12" $P 2 --micro-batches 4 --forward-time 0
expect 1 "--trace-step must be between 0 and 2^31 - 1" $P 2 --micro-batches 4 --from-trace x.json --trace-step 2147483648
# pipedream-2bw holds every step's actions: the bound counts the steps (this ran out of memory).
expect 1 "virtual stages · steps must be at most 4194304 (got 400000000)" $P 4 --micro-batches 100000 \
  --schedule pipedream-2bw --steps 1000
expect 1 "virtual stages > 1 need the interleaved schedule" $P 4 --micro-batches 8 --virtual-stages 2
expect 1 "needs pipeline-model-parallel size p >= 2" $P 1 --micro-batches 4 --schedule interleaved --virtual-stages 2
expect 1 "--pipeline-model-parallel-size must be between 1 and" $P 0 --micro-batches 4
expect 1 "micro-batches must be between 1" $P 2 --micro-batches 0
expect 1 "unknown schedule 'zb'" $P 2 --micro-batches 4 --schedule zb
expect 1 "--backward-time must be a finite number of time units above 0 and at most 1e12" $P 2 --micro-batches 4 --backward-time 0
expect 1 "--svg draws at most" $P 8 --micro-batches 4000 --svg "$SCRATCH/huge.svg"
expect 1 "gives 2 stages; p·m = 4" $P 4 --micro-batches 8 --pipeline-layers 6,6
expect 1 "positive layer counts" $P 4 --micro-batches 8 --pipeline-layers 3,3,0,3
expect 1 "--head-time must be a finite" $P 4 --micro-batches 8 --head-time -1
expect 2 "--micro-batches" $P 4
expect 2 "--pipeline-model-parallel-size" --micro-batches 4
expect 2 "--micro-batches" $P 4 --micro-batches many
expect 2 "--no-such-flag" $P 4 --micro-batches 4 --no-such-flag
[ -e "$SCRATCH/huge.svg" ] && fail "a refused --svg writes nothing"

# The SVG's caption names each schedule's own formula (ZB-H1's value was labelled (p-1)/(n+p-1)).
"$LATTICE" schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule zb-h1 --svg "$SCRATCH/zb.svg" > /dev/null ||
  fail "zb-h1 --svg"
grep -q "% by (p−1)(F+B−W)/(n(F+B+W)+(p−1)(F+B−W))" "$SCRATCH/zb.svg" || fail "the ZB-H1 SVG names ZB-H1's formula"

"$LATTICE" schedule --help > /dev/null || fail "--help"
test "$fails" -eq 0 && echo ok
