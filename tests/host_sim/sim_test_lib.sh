# Sourced by tests/host_sim's small tests of the simulation itself (misaligned_load.sh,
# launch_limits.sh, schedule_race.sh): a scratch folder, a test program compiled as
# scripts/cuda-host-common.sh compiles src/cuda, and the two outcomes they check.
#   sim_compile SRC BIN        SRC's launches rewritten, compiled and linked with the sanitizer flags
#   expect_runs WHAT BIN ARGS...              ok when BIN exits 0, else FAIL (status=1)
#   expect_stops WHAT PATTERN BIN ARGS...     ok when BIN fails with a line matching PATTERN (grep -E)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$root/scripts/cuda-host-common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

sim_compile() {
  local src=$1 bin=$2
  cuda_host_rewrite_launches "$src"
  "${CXX:-g++}" -std=c++17 -O2 -g "${CUDA_HOST_SANITIZE[@]}" -I"$root/tests/host_sim/include" -Wall -Wextra -Werror \
    -x c++ -o "$bin" "$src"
}

expect_runs() {
  local what=$1 out
  shift
  out=$(mktemp -p "$work")
  if "$@" >"$out" 2>&1; then
    echo "ok: $what runs ($(head -n 1 "$out"))"
  else
    echo "FAIL: $what did not run: $(tail -n 3 "$out")"
    status=1
  fi
}

expect_stops() {
  local what=$1 pattern=$2 out
  shift 2
  out=$(mktemp -p "$work")
  if "$@" >"$out" 2>&1; then
    echo "FAIL: $what ran to the end: $(head -n 3 "$out")"
    status=1
  elif grep -Eq "$pattern" "$out"; then
    echo "ok: $what stopped: $(grep -E -m1 "$pattern" "$out")"
  else
    echo "FAIL: $what stopped without a line matching '$pattern': $(tail -n 3 "$out")"
    status=1
  fi
}
