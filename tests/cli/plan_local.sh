#!/usr/bin/env bash
# plan --hardware local: a saved MPI bench is read from LATTICE_BENCH_DIR, the text keeps its
# iteration line, the JSON's parts add up to the prediction, the layout's ranks and threads are
# planned as mpirun runs them, misuse is one line; bench/plan_vs_engine.sh runs end to end on the
# tiny shape (no timing is asserted: the machine is shared).
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
. "$(dirname "$0")/lib/hostile.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LATTICE_BENCH_DIR="$SCRATCH/bench"
MODEL=(--layers 4 --hidden 64 --heads 4 --seq-len 32 --vocab 256 --micro-batch 2 --global-batch 4 --activation-dtype fp32
       --params-dtype fp32)

mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$LATTICE" bench --save --budget 3 --max-bytes 64KiB > /dev/null 2> bench.err
check "mpirun -np 2 lattice bench --save: exit 0" test $? -eq 0
BENCH_FILE=$(ls bench/bench-*-np2.json 2> /dev/null | head -1)
check "the bench is saved where plan --hardware local looks" test -n "$BENCH_FILE"

"$LATTICE" plan --hardware local --gpus 2 --threads 1 --tensor-model-parallel-size 2 "${MODEL[@]}" > tp2.txt 2> tp2.err
check "plan --hardware local (TP 2 on 2 ranks): exit 0" test $? -eq 0
check "... says which bench it read and how the ranks share the cores" grep -q "2 rank(s) × 1 thread(s) on .* cores; MPI and rates from .*np2.json" tp2.err
check "... keeps the iteration line" grep -q -E "^  iteration +[0-9.]+ s" tp2.txt
check "... and TP communication reads the measured curves" grep -q "TP communication (measured)" tp2.txt
"$LATTICE" plan --hardware local --gpus 2 --threads 1 --pipeline-model-parallel-size 2 "${MODEL[@]}" --json > pp2.json 2> /dev/null
check "plan --hardware local --json (PP 2): the parts add up to the predicted step" "$PY" -c "
import json, sys
p = json.load(open('pp2.json'))
parts = sum(p['time_breakdown_s'].values())
print(parts, p['predicted_iteration_s'])
sys.exit(0 if abs(parts - p['predicted_iteration_s']) <= 1e-9 * p['predicted_iteration_s'] and p['time_breakdown_s']['bubble'] > 0 else 1)"
check "... and each rank gets the host's memory over its 2 ranks" "$PY" -c "
import json, sys
p = json.load(open('pp2.json'))
mem = [int(l.split()[1]) * 1024 for l in open('/proc/meminfo') if l.startswith('MemTotal')][0]
sys.exit(0 if abs(p['gpu_memory_bytes'] - mem / 2) <= 0.01 * mem else 1)"
"$LATTICE" plan --hardware local --gpus 1 --threads 2 "${MODEL[@]}" --json > one.json 2> /dev/null
"$LATTICE" plan --hardware local --gpus 1 --threads 2 "${MODEL[@]}" --activation-dtype bf16 --json > one_bf16.json 2> /dev/null
check "one rank needs no MPI bench, and bf16 GEMMs are timed apart from fp32" "$PY" -c "
import json, sys
a, b = json.load(open('one.json')), json.load(open('one_bf16.json'))
sys.exit(0 if a['predicted_iteration_s'] > 0 and a['time_breakdown_s']['gemm'] != b['time_breakdown_s']['gemm'] else 1)"

hostile "--hardware local for train" 1 "--hardware local is lattice plan's" -- \
  train --data nowhere --layers 2 --hidden 64 --heads 4 --pipeline-layers auto --hardware local
hostile "--hardware local with --paper" 1 "not --paper" -- plan --hardware local --paper
hostile "--hardware local for 100 ranks" 1 "1 to 64" -- plan --hardware local --gpus 100 --layers 2 --hidden 64 --heads 4
# A bench file whose MPI samples are absurd (a typo, a damaged file): refused, where the plan printed an
# iteration of 3e307 s and a DP share of inf%.
mkdir -p absurd_bench && "$PY" - "$BENCH_FILE" absurd_bench/"$(basename "$BENCH_FILE")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["mpi"]["groups"][0]["ops"]["all_reduce"]["blocking"] = [[1, 1e300], [2, 1e301]]
json.dump(d, open(sys.argv[2], "w"))
PY
LATTICE_BENCH_DIR=$PWD/absurd_bench hostile "--hardware local with an absurd MPI sample" 1 \
  "every sample must be \[bytes from 1 to 2\^40, seconds from 1e-9 to 3600\] \(got \[1, 1e\+?300\]\)" -- \
  plan --hardware local --gpus 2 --threads 1 "${MODEL[@]}"
# A bench its --budget cut short: the plan says so (a TP step's all-gather, timed at small sizes only,
# came out 100 times the full bench's), with the count and the command that measures more; a whole
# bench says nothing of it.
mkdir -p short_bench && "$PY" - "$BENCH_FILE" short_bench/"$(basename "$BENCH_FILE")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["mpi"]["skipped"] = 91
json.dump(d, open(sys.argv[2], "w"))
PY
LATTICE_BENCH_DIR=$PWD/short_bench "$LATTICE" plan --hardware local --gpus 2 --threads 1 --tensor-model-parallel-size 2 \
  "${MODEL[@]}" > short.txt 2> short.err
check "a bench that left cells out: the plan still runs" test $? -eq 0
check "... and says how many, and how to measure them" \
  grep -q "warning: the MPI bench .* left 91 cells unmeasured .*mpirun -np 2 lattice bench --save --budget 60" short.err
if [ "$("$PY" -c "import json; print(json.load(open('$BENCH_FILE'))['mpi']['skipped'])")" = 0 ]; then
  check "a bench that measured every cell: no such warning" sh -c "! grep -q 'cells unmeasured' tp2.err"
else
  check "this run's own short bench is said to be short too" grep -q "cells unmeasured" tp2.err
fi
hostile_summary

# The benchmark script end to end on the tiny model: every column printed.
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SHAPE=tiny ROUNDS=1 STEPS=2 ROWS="one tp2 pp2_1f1b" BENCH_BUDGET=3 bash "$ROOT/bench/plan_vs_engine.sh" "$LATTICE" \
  > table.md 2> script.err
check "bench/plan_vs_engine.sh (tiny, 3 rows): exit 0" test $? -eq 0
check "... a row each, with predicted, measured and every part" test "$(grep -c -E '^\| (one|tp2|pp2_1f1b) \| [12] \| [0-9.]+ \| [0-9.]+ \(' table.md)" -eq 3
check "... and the measured split of each (from the trace)" test "$(grep -E '^\| (one|tp2|pp2_1f1b) ' table.md | grep -c -v '/ –')" -eq 3

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
