#!/usr/bin/env bash
# `lattice bench` under mpirun: every rank measures, rank 0 alone prints; the MPI collectives of every
# group shape a layout of that many ranks forms, blocking and in the engine's own calls; --save puts
# the result where `lattice plan --hardware local` reads it. No timing assertions: only the shape.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export LATTICE_BENCH_DIR=$SCRATCH/bench
MPIRUN=(timeout 120 mpirun --oversubscribe)
HOST=$(hostname | sed 's/[^A-Za-z0-9._-]/_/g')
QUICK=(bench --seconds 0.05 --budget 3 --max-bytes 64KiB)

# check_groups FILE RANKS "SIZE,STRIDE ...": the saved file's shape.
check_groups() {
  python3 - "$@" <<'EOF'
import json, sys
path, ranks, want = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
d = json.load(open(path))
assert d["event"] == "bench" and d["schema"] == 2, "event/schema"
assert d["ranks"] == ranks and d["mpi"]["ranks"] == ranks, "ranks"
assert d["host"] and d["cores"] >= 1 and d["threads_per_rank"] >= 1, "host/cores/threads"
assert all(v > 0 for v in d["elementwise"].values()) and "adamw" in d["elementwise"], "elementwise"
for key in ("layernorm_fwd", "layernorm_bwd", "bias_gelu_fwd", "bias_gelu_bwd", "bias_dropout_add_fwd",
            "softmax_fwd", "softmax_bwd", "to_bf16"):
    assert key in d["elementwise"], key
got = ["%d,%d" % (g["size"], g["stride"]) for g in d["mpi"]["groups"]]
assert got == want, "groups %s, wanted %s" % (got, want)
for g in d["mpi"]["groups"]:
    ops = g["ops"]
    assert sorted(ops) == ["all_gather", "all_reduce", "all_to_all", "p2p", "reduce_scatter"], sorted(ops)
    for op, forms in ops.items():
        assert sorted(forms) == ["blocking", "engine_async"], (op, sorted(forms))
        for form, rows in forms.items():
            sizes = [r[0] for r in rows]
            assert len(rows) >= 2, (op, form, "rows")
            assert sizes == sorted(set(sizes)), (op, form, "sizes ascend")
            assert sizes[0] <= 16 * g["size"] and sizes[-1] <= 65536 + 16 * g["size"], (op, form, sizes)
            assert all(r[1] > 0 for r in rows), (op, form, "seconds positive")
EOF
}

# Two ranks: one line on stdout (rank 0's), the file at the documented path.
"${MPIRUN[@]}" -np 2 "$LATTICE" "${QUICK[@]}" --json --save > np2.out 2> np2.err
check "np 2: exit 0" test $? -eq 0
check "np 2: one line on stdout (rank 0 alone prints)" test "$(wc -l < np2.out)" -eq 1
SAVED=$LATTICE_BENCH_DIR/bench-$HOST-np2.json
check "np 2: saved at \$LATTICE_BENCH_DIR/bench-<host>-np2.json" test -f "$SAVED"
check "np 2: stderr names the saved file" grep -qF "$SAVED" np2.err
check "np 2: the saved file is the printed line" cmp -s np2.out "$SAVED"
check "np 2: group (2,1), five ops in both forms, sizes ascending, seconds positive" check_groups "$SAVED" 2 "2,1"
SHAPE=(--layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --micro-batch 4 --global-batch 4 --activation-dtype fp32 --json)
"$LATTICE" plan --hardware "$SAVED" "${SHAPE[@]}" > plan2.json 2> plan2.err
check "a schema-2 file is a --hardware FILE" python3 -c "
import json, sys
sys.exit(0 if json.load(open('plan2.json'))['predicted_iteration_s'] > 0 else 1)"

# A schema-1 file (what bench --json wrote before) still loads.
echo '{"event":"bench","threads":2,"gemm_fp32_flops":1e11,"gemm_bf16_flops":2e11,"memory_bandwidth":1e10,"runtime_rss_bytes":1}' > schema1.json
"$LATTICE" plan --hardware schema1.json "${SHAPE[@]}" > plan1.json 2> plan1.err
check "a schema-1 file still loads: exit 0" test $? -eq 0
# A schema-2 file whose MPI part is broken: one line naming the file.
python3 -c "
import json
d = json.load(open('$SAVED'))
d['mpi']['groups'][0]['ops']['all_reduce']['blocking'].reverse()
open('broken2.json', 'w').write(json.dumps(d))"
"$LATTICE" plan --hardware broken2.json "${SHAPE[@]}" > /dev/null 2> err.txt
check "a broken schema-2 file: exit 1 with one line naming it" test $? -eq 1 -a "$(wc -l < err.txt)" -eq 1
check "a broken schema-2 file: names the file and the problem" grep -q "broken2.json.*ascend" err.txt

# Four ranks: the groups of every layout of 4 (TP/EP (2,1), DP/PP (2,2), (4,1)); the text output.
"${MPIRUN[@]}" -np 4 "$LATTICE" "${QUICK[@]}" --save > np4.txt 2> np4.err
check "np 4: exit 0" test $? -eq 0
check "np 4: groups (2,1), (2,2), (4,1)" check_groups "$LATTICE_BENCH_DIR/bench-$HOST-np4.json" 4 "2,1 2,2 4,1"
check "np 4: rank 0 alone prints (one GEMM line)" test "$(grep -c '^GEMM fp32' np4.txt)" -eq 1
check "np 4: the MPI table is printed" grep -q "^group size 4, stride 1" np4.txt

# One process without mpirun: no MPI part, no MPI started.
"$LATTICE" bench --seconds 0.05 --json > one.json
check "one process: exit 0, schema 2, ranks 1, no \"mpi\"" python3 -c "
import json, sys
d = json.load(open('one.json'))
sys.exit(0 if d['schema'] == 2 and d['ranks'] == 1 and 'mpi' not in d and d['elementwise']['adamw'] > 0 else 1)"

# Bad flags: one line, exit 1 or 2 (alone and under mpirun, where rank 0 alone reports).
expect_error "--budget 0" "budget" bench --budget 0
expect_error "--budget 1e9" "budget" bench --budget 1e9
expect_error "--max-bytes -1" "max-bytes" bench --max-bytes -1
expect_error "--max-bytes 4B" "max-bytes" bench --max-bytes 4B
expect_error "--max-bytes 1PB" "max-bytes" bench --max-bytes 1000TB
expect_error "--max-bytes 12parsecs" "max-bytes" bench --max-bytes 12parsecs
"${MPIRUN[@]}" -np 2 "$LATTICE" bench --budget 0 > /dev/null 2> err.txt
status=$?
check "np 2 --budget 0: exit 1 (got $status)" test "$status" -eq 1
check "np 2 --budget 0: one line from rank 0" test "$(grep -c 'lattice bench: error' err.txt)" -eq 1
# Ranks given other flags: refused in one line before anything is timed (different --max-bytes freed a
# buffer twice, SIGABRT; --save on one rank left both spinning forever).
for differ in "--max-bytes 1MiB" "--save"; do
  # shellcheck disable=SC2086
  "${MPIRUN[@]}" -np 1 "$LATTICE" "${QUICK[@]}" : -np 1 "$LATTICE" "${QUICK[@]}" $differ > /dev/null 2> err.txt
  status=$?
  check "ranks apart by $differ: exit 1 (got $status)" test "$status" -eq 1
  check "ranks apart by $differ: one line naming the difference" test "$(grep -c 'lattice bench: error: rank 1: the ranks were started with different configurations' err.txt)" -eq 1
done
LATTICE_BENCH_DIR=/dev/null/x "$LATTICE" bench --seconds 0.05 --save > /dev/null 2> err.txt
check "--save to an unwritable directory: exit 1, one line" test $? -eq 1 -a "$(wc -l < err.txt)" -eq 1

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
