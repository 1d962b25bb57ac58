# check and expect_error for the CLI test scripts (sourced; needs LATTICE).
failures=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
expect_error() {  # expect_error NAME PATTERN ARGS...: exit 1 or 2, one stderr line naming the cause
  local name=$1 pattern=$2; shift 2
  "$LATTICE" "$@" > err.out 2> err.txt
  local status=$?
  check "$name: exit 1 or 2 (got $status)" test "$status" -eq 1 -o "$status" -eq 2
  check "$name: one stderr line" test "$(wc -l < err.txt)" -eq 1
  check "$name: names the cause" grep -q -- "$pattern" err.txt
}
