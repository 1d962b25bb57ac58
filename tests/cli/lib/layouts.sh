# Shared by the layout tests (sourced): a corpus, the small model, run NAME NP FLAGS..., compare
# NAME [REFERENCE] (per-step losses to 1e-5 relative, final weights to 1e-5) and bad_layout.
# Needs LATTICE and the current directory set; exports the MPI/OpenMP settings for oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks oversubscribe the 2 cores: one thread each, and threads that sleep instead of spinning.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3

. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/compare.sh"

for i in $(seq 1 300); do echo "And it came to pass $i that the layouts agreed, every one of them."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
MODEL=(--data data --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 8 --steps 4
       --dropout 0.1 --threads 1 --json)

run() {  # run NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then
    "$LATTICE" train "${MODEL[@]}" --save "ck_$name" "$@" > "$name.jsonl" 2> "$name.err"
  else
    timeout 300 mpirun --oversubscribe -np "$np" "$LATTICE" train "${MODEL[@]}" --save "ck_$name" "$@" \
      > "$name.jsonl" 2> "$name.err"
  fi
  check "$name: exit 0" test $? -eq 0
}

bad_layout() {  # bad_layout NAME PATTERN NP FLAGS...: one line from rank 0, every rank exits non-zero
  local name=$1 pattern=$2 np=$3; shift 3
  timeout 60 mpirun --oversubscribe -np "$np" "$LATTICE" train "${MODEL[@]}" "$@" > bad.out 2> bad.err
  local status=$?
  check "$name: non-zero exit ($status)" test "$status" -ne 0 -a "$status" -ne 124
  check "$name: one error line" test "$(grep -c 'error' bad.err)" -eq 1
  check "$name: names the cause" grep -q -- "$pattern" bad.err
}
