#!/usr/bin/env bash
# Hostile use, class "ranks that disagree or stop": ranks started with different configurations
# stop at once with one line (no malloc abort, no hang); a rank that stops responding (SIGSTOP)
# makes every rank stop within --comm-timeout, with a line naming the rank, operation and group.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
. "$HERE/lib/hostile.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN=(timeout 120 mpirun --oversubscribe)

hostile_corpus
A=(train --data data --hidden 64 --heads 4 --seq-len 32 --micro-batch 4 --threads 1)

disagree() {  # disagree NAME PATTERN FLAGS-RANK0 -- FLAGS-RANK1
  local name=$1 pattern=$2; shift 2
  local r0=() r1=()
  while [ "$1" != "--" ]; do r0+=("$1"); shift; done; shift
  r1=("$@")
  local t0=$SECONDS
  "${MPIRUN[@]}" -np 1 "$LATTICE" "${A[@]}" "${r0[@]}" : -np 1 "$LATTICE" "${A[@]}" "${r1[@]}" > out.txt 2> err.txt
  local status=$?
  check "$name: non-zero exit, not a timeout (got $status)" test "$status" -ne 0 -a "$status" -ne 124
  check "$name: within 60 s" test $((SECONDS - t0)) -lt 60
  check "$name: exactly one line from lattice" test "$(grep -c '^lattice' err.txt)" -eq 1
  check "$name: names the difference" grep -qE -- "$pattern" err.txt
  check "$name: no abort or signal text" test "$(grep -ciE 'malloc|double free|Signal:|core dumped|bad_alloc|terminate called' err.txt)" -eq 0
}
disagree "different --layers" "different configurations: 'layers=3' here, 'layers=2' on rank 0" --layers 2 --steps 5 -- --layers 3 --steps 5
disagree "different --steps" "different configurations: 'steps=7' here, 'steps=5' on rank 0" --layers 2 --steps 5 -- --layers 2 --steps 7
# A bad value on rank 1 alone, found before MPI starts: rank 0 had nothing to report, so rank 1 says
# it (the job ended with mpirun's text alone).
disagree "a bad --lr on rank 1 only" "^lattice train: rank 1: error: --lr must be a finite number" --layers 2 --steps 5 -- \
  --layers 2 --steps 5 --lr -1
disagree "a bad --lr on both ranks" "^lattice train: error: --lr must be a finite number" --layers 2 --steps 5 --lr -1 -- \
  --layers 2 --steps 5 --lr -1

# A usage error (exit 2) and --help, the same on every rank: said once, as the refusals above (each
# rank wrote its own copy: 64 ranks, 64 lines).
for bad in "--layers abc" "--bogus" "--offload-params"; do
  # shellcheck disable=SC2086
  "${MPIRUN[@]}" -np 2 "$LATTICE" "${A[@]}" --steps 1 $bad > usage.out 2> usage.err
  status=$?
  check "$bad under mpirun -np 2: exit 2 (got $status), one line from lattice" test "$status" -eq 2 -a \
    "$(grep -c '^lattice' usage.err)" -eq 1 -a "$(grep -c '^lattice train: error: ' usage.err)" -eq 1
done
"${MPIRUN[@]}" -np 2 "$LATTICE" train --help > help.out 2> help.err
status=$?
check "train --help under mpirun -np 2: exit 0 (got $status), the help once" test "$status" -eq 0 -a \
  "$(grep -c '^Usage: lattice train' help.out)" -eq 1 -a "$(grep -c -- '--eval-every' help.out)" -eq 1

# Other token files under the same --data path (per-host copies that differ): the replicas trained on
# different datasets without a word. Compared by size and a hash of each file's ends.
mkdir -p other_host && (cd other_host && for i in $(seq 1 330); do echo "Another text entirely, number $i here."; done > c.txt &&
  "$LATTICE" prepare --input c.txt --out data > /dev/null 2>&1)
"${MPIRUN[@]}" -np 1 "$LATTICE" "${A[@]}" --layers 1 --steps 2 : -np 1 -wdir "$PWD/other_host" "$LATTICE" "${A[@]}" --layers 1 \
  --steps 2 > other.out 2> other.err
status=$?
check "other token files under the same --data on rank 1: exit 1 (got $status), one line naming them" test "$status" -eq 1 -a \
  "$(grep -c "^lattice train: error: rank 1: the ranks were started with different configurations: 'token files = train.bin" other.err)" -eq 1
# eval and sample run as one process: under mpirun -np 2 each rank printed the whole result, the two
# samples interleaved byte by byte. Refused in one line.
"$LATTICE" "${A[@]}" --layers 1 --steps 1 --save ck_one > /dev/null 2>&1
for cmd in "sample --checkpoint ck_one --tokens 4 --threads 1" "eval --checkpoint ck_one --data data/val.bin --batches 1 --threads 1"; do
  # shellcheck disable=SC2086
  "${MPIRUN[@]}" -np 2 "$LATTICE" $cmd > one.out 2> one.err
  status=$?
  check "${cmd%% *} under mpirun -np 2: exit 1 (got $status), one line, nothing printed" test "$status" -eq 1 -a \
    "$(grep -c "^lattice ${cmd%% *}: error: lattice ${cmd%% *} runs as one process, and was started as 2 ranks" one.err)" -eq 1 -a ! -s one.out
done
# A stopped rank: every rank gone within the timeout (+ 30 s), one line naming rank, op and group,
# a {"event":"rank_lost"} line on the JSON stream, and exit 3 (a lost rank, not bad input's 1).
"${MPIRUN[@]}" -np 2 "$LATTICE" "${A[@]}" --layers 2 --steps 100000 --comm-timeout 5 --json > stop.out 2> stop.err &
launcher=$!
for _ in $(seq 1 100); do [ "$(pgrep -f -- "--comm-timeout 5" | wc -l)" -ge 2 ] && grep -q '"event":"step"' stop.out && break; sleep 0.2; done
victim=$(pgrep -f -- "lattice train --data data .*--comm-timeout 5" | tail -1)
kill -STOP "$victim"
t0=$SECONDS
while pgrep -f -- "lattice train --data data .*--comm-timeout 5" > /dev/null && [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.5; done
gone=$((SECONDS - t0))
wait $launcher
status=$?
echo "after SIGSTOP every rank was gone in ${gone} s; mpirun exited $status"
check "stopped rank: every rank gone within timeout + 30 s" test "$gone" -le 35
check "stopped rank: mpirun exits 3, a lost rank (got $status)" test "$status" -eq 3
check "stopped rank: the line names rank, operation and group" \
  grep -qE "lattice: rank [01]: no progress for [0-9]+ s in [a-z_]+ on the (dp|world|tp|pp) group" stop.err
check "stopped rank: a rank_lost event on the JSON stream" \
  grep -qE '^\{"event":"rank_lost","rank":[01],"reason":"stalled","op":"[a-z_]+","group":"[a-z]+"' stop.out
# A rank that never reaches MPI (stuck before it: a hung file system, a stopped process; here rank 1
# waits 60 s first): the others waited in MPI's start forever. Now each ends within --comm-timeout,
# exit 3 with one line, as for a stall later (so lattice launch restarts the job).
LATTICE_TEST_DELAY_MPI_INIT=1:60 timeout 40 "${MPIRUN[@]}" -x LATTICE_TEST_DELAY_MPI_INIT -np 2 "$LATTICE" "${A[@]}" \
  --steps 2 --comm-timeout 3 > start.out 2> start.err
status=$?
check "a rank that never starts MPI: the job ends with exit 3, not a hang (got $status)" test "$status" -eq 3
check "a rank that never starts MPI: rank 0 says so" \
  grep -q "^lattice: rank 0: MPI did not start within 3 s (--comm-timeout): a rank never reached it" start.err
check "--comm-timeout out of range is refused" \
  bash -c "! '$LATTICE' train --data data --steps 1 --comm-timeout -1 2>/dev/null"

echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
