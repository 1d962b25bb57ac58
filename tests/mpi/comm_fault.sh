#!/usr/bin/env bash
# Faults under mpirun: a rank that throws, terminates or dies stops every rank within seconds with
# one line naming it; a bad layout is reported once by rank 0 and every rank exits non-zero.
# Usage: comm_fault.sh <mpiexec> <comm_test binary>
set -uo pipefail
MPIEXEC=$1; COMM_TEST=$2
SCRATCH=$(mktemp -d); trap 'rm -rf "$SCRATCH"' EXIT
fails=0

expect_stop() {  # expect_stop <text of our one stderr line> <comm_test args...>
  local text=$1; shift
  local start=$SECONDS
  timeout 60 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$COMM_TEST" "$@" > "$SCRATCH/out" 2> "$SCRATCH/err"
  local got=$? took=$((SECONDS - start))
  local ours; ours=$(grep -c "^lattice comm_test: " "$SCRATCH/err")
  if [ "$got" -eq 0 ] || [ "$got" -eq 124 ] || [ "$took" -gt 20 ] || [ "$ours" -ne 1 ] ||
     ! grep -q -- "$text" "$SCRATCH/err"; then
    echo "FAIL: comm_test $* -> exit $got after ${took}s, $ours lattice lines, stderr:"; cat "$SCRATCH/err"
    fails=$((fails + 1))
  fi
}

expect_stop "rank 2: error: injected failure" --throw-on-rank 2
expect_stop "rank 1: error: uncaught failure" --terminate-on-rank 1
expect_stop "rank 0: error: injected failure" --throw-on-rank 0
expect_stop "error: world size 4 is not divisible by t·p = 3" --tp 3 --pp 1
expect_stop "error: t·p = 8 needs at least 8 ranks but the world size is 4" --tp 4 --pp 2
expect_stop "error: --expert-model-parallel-size 4 does not divide the data-parallel size 2 (world 4 / t·p = 2)" \
  --tp 2 --pp 1 --ep 4

# A rank that dies without a word (no MPI_Finalize): mpirun stops the others.
start=$SECONDS
timeout 60 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$COMM_TEST" --die-on-rank 3 > /dev/null 2>&1
got=$?
if [ "$got" -eq 0 ] || [ "$got" -eq 124 ] || [ $((SECONDS - start)) -gt 20 ]; then
  echo "FAIL: --die-on-rank 3 -> exit $got after $((SECONDS - start))s"; fails=$((fails + 1))
fi

# A lone process (no mpirun) with a layout that needs more ranks: one line, exit 1.
"$COMM_TEST" --tp 2 --pp 1 > /dev/null 2> "$SCRATCH/err"
got=$?
if [ "$got" -ne 1 ] || [ "$(wc -l < "$SCRATCH/err")" -ne 1 ] || ! grep -q "mpirun -np N" "$SCRATCH/err"; then
  echo "FAIL: singleton --tp 2 -> exit $got, stderr:"; cat "$SCRATCH/err"; fails=$((fails + 1))
fi

# The same for a lone process asking for expert parallelism.
"$COMM_TEST" --tp 1 --pp 1 --ep 2 > /dev/null 2> "$SCRATCH/err"
got=$?
if [ "$got" -ne 1 ] || [ "$(wc -l < "$SCRATCH/err")" -ne 1 ] ||
   ! grep -q "expert-model-parallel-size 2 does not divide the data-parallel size 1.*mpirun -np N" "$SCRATCH/err"; then
  echo "FAIL: singleton --ep 2 -> exit $got, stderr:"; cat "$SCRATCH/err"; fails=$((fails + 1))
fi

test "$fails" -eq 0 && echo ok
