#!/usr/bin/env bash
# Fuzzes one of lattice's file parsers with libFuzzer (ASan + UBSan) for a bounded time.
#
#   tests/fuzz/run.sh TARGET [FUZZ_TREE]      TARGET: safetensors token_file llmc trainer_json toml_config
#
# 1. builds the clang tree (tests/fuzz/CMakeLists.txt) into FUZZ_TREE (default build/fuzz-build);
# 2. replays tests/fuzz/regressions/TARGET/ (inputs that once crashed): each must now pass;
# 3. fuzzes for FUZZ_SECONDS (default 30) from tests/fuzz/seeds/TARGET/ plus the inputs earlier
#    runs kept in FUZZ_TREE/corpus/TARGET/, in FUZZ_WORKERS processes side by side (default: the
#    CPUs this process may use), which share that corpus (libFuzzer rereads it every second). The
#    suite sets FUZZ_SUITE_CPU_SECONDS instead: that many CPU-seconds a target, split over the
#    workers, 10 s each at least (on the project's 2-vCPU machines two workers run about 1.2 times one's executions a
#    second, so 10 s of two execute about half of what 20 s of one did: the suite's time, not its
#    depth, is what this buys; a long run by hand is where the depth comes from).
# Fails on any crash, sanitizer report, leak, timeout (>10 s on one input), allocation above
# 512 MiB, or exception other than lattice::InputError; the input is saved under
# FUZZ_TREE/artifacts/TARGET/ and the failure says how to replay it. Exits 77 (CTest: skipped)
# when clang, lld or libFuzzer is missing. Environment: FUZZ_SECONDS, FUZZ_WORKERS, FUZZ_JOBS (build,
# default 2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TARGET=${1:?usage: run.sh TARGET [FUZZ_TREE]}
TREE=${2:-$HERE/../../build/fuzz-build}
WORKERS=${FUZZ_WORKERS:-$(nproc 2>/dev/null || echo 1)}
[[ $WORKERS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: FUZZ_WORKERS=$WORKERS is not a positive count" >&2; exit 2; }
if [ -n "${FUZZ_SECONDS:-}" ]; then
  SECONDS_BUDGET=$FUZZ_SECONDS
elif [ -n "${FUZZ_SUITE_CPU_SECONDS:-}" ]; then  # the suite's (tests/fuzz/fuzz.cmake)
  [[ $FUZZ_SUITE_CPU_SECONDS =~ ^[1-9][0-9]*$ ]] ||
    { echo "run.sh: FUZZ_SUITE_CPU_SECONDS=$FUZZ_SUITE_CPU_SECONDS is not a positive count" >&2; exit 2; }
  # At least 10 s a worker unless chosen: loading the corpus takes a worker's first seconds.
  [ -z "${FUZZ_WORKERS:-}" ] && [ "$WORKERS" -gt $((FUZZ_SUITE_CPU_SECONDS / 10)) ] && WORKERS=$((FUZZ_SUITE_CPU_SECONDS / 10))
  [ "$WORKERS" -ge 1 ] || WORKERS=1
  SECONDS_BUDGET=$(( (FUZZ_SUITE_CPU_SECONDS + WORKERS - 1) / WORKERS ))
else
  SECONDS_BUDGET=30
fi
[[ $SECONDS_BUDGET =~ ^[1-9][0-9]*$ ]] ||
  { echo "run.sh: the fuzzing time '$SECONDS_BUDGET' is not a positive count of seconds" >&2; exit 2; }
case "$TARGET" in
  safetensors|token_file|llmc|trainer_json|toml_config) ;;
  *) echo "run.sh: unknown target '$TARGET'" >&2; exit 2 ;;
esac
case "$TARGET" in  # longest input: a little over the largest seed
  safetensors) MAX_LEN=16384 ;;
  token_file|llmc) MAX_LEN=8192 ;;
  *) MAX_LEN=4096 ;;
esac

skip() { echo "fuzz.$TARGET: SKIPPED: $*" >&2; exit 77; }
command -v clang++ >/dev/null || skip "clang++ not found (Debian: apt-get install clang libclang-rt-14-dev lld)"
command -v ld.lld >/dev/null || skip "ld.lld not found (Debian: apt-get install lld)"
mkdir -p "$TREE"
TREE=$(cd "$TREE" && pwd)
if [ ! -x "$TREE/probe" ]; then
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$TREE/probe.cpp"
  clang++ -fsanitize=fuzzer,address,undefined -fuse-ld=lld "$TREE/probe.cpp" -o "$TREE/probe" 2>"$TREE/probe.log" ||
    skip "clang cannot link a libFuzzer target (Debian: apt-get install libclang-rt-14-dev): $(head -c 300 "$TREE/probe.log")"
fi

# Build (serialised: the fuzz.* tests share one tree).
exec 9>"$TREE/.lock"
flock 9
if [ ! -f "$TREE/CMakeCache.txt" ]; then
  # ccache where installed: a new tree (a clean clone's, as CI's) otherwise compiles the parsers under
  # ASan from nothing in the first fuzz test, 85-110 s of the serial suite on 2 cores; from a warm
  # cache it takes 1 s. What is built and fuzzed is unchanged.
  LAUNCHER=()
  command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CXX=clang++ cmake -S "$HERE" -B "$TREE" -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_COMPILER=clang++ "${LAUNCHER[@]}" \
    >"$TREE/configure.log" 2>&1 ||
    { cat "$TREE/configure.log" >&2; exit 1; }
fi
start=$(date +%s)
cmake --build "$TREE" --target "fuzz_$TARGET" -j"${FUZZ_JOBS:-2}" >"$TREE/build-$TARGET.log" 2>&1 ||
  { tail -50 "$TREE/build-$TARGET.log" >&2; echo "fuzz.$TARGET: the clang build failed" >&2; exit 1; }
flock -u 9
echo "fuzz.$TARGET: built in $(( $(date +%s) - start )) s"
BIN=$TREE/fuzz_$TARGET

# The targets write each input to a file: in memory where possible, removed even after a crash.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then TMPDIR=/dev/shm/lattice-fuzz-$TARGET-$$; else TMPDIR=$TREE/tmp-$$; fi
export TMPDIR
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
LIMITS=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512)

# 2. Regressions: every saved input runs once.
REG=$HERE/regressions/$TARGET
if compgen -G "$REG/*" >/dev/null; then
  if ! "$BIN" "${LIMITS[@]}" "$REG"/* >"$TREE/regressions-$TARGET.log" 2>&1; then
    tail -60 "$TREE/regressions-$TARGET.log" >&2
    echo "fuzz.$TARGET: FAILED: a regression input crashes again (log: $TREE/regressions-$TARGET.log)" >&2
    exit 1
  fi
  echo "fuzz.$TARGET: $(ls "$REG" | wc -l) regression inputs pass"
fi

# 3. Fuzz.
CORPUS=$TREE/corpus/$TARGET
ARTIFACTS=$TREE/artifacts/$TARGET
mkdir -p "$CORPUS" "$ARTIFACTS"
EXTRA=()
[ -f "$HERE/dicts/$TARGET.dict" ] && EXTRA+=(-dict="$HERE/dicts/$TARGET.dict")
# parse_flags prints one line per rejected config (and --help its text): keep the log readable.
[ "$TARGET" = toml_config ] && EXTRA+=(-close_fd_mask=3)
LOG=$TREE/fuzz-$TARGET.log  # the workers' logs: fuzz-TARGET.log, fuzz-TARGET-2.log, ...
logs=() pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$TMPDIR"' EXIT
for ((w = 1; w <= WORKERS; w++)); do
  log=$LOG
  [ "$w" -gt 1 ] && log=${LOG%.log}-$w.log
  logs+=("$log")
  "$BIN" "${LIMITS[@]}" -max_total_time="$SECONDS_BUDGET" -max_len="$MAX_LEN" -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS/" "${EXTRA[@]}" "$CORPUS" "$HERE/seeds/$TARGET" >"$log" 2>&1 &
  pids+=($!)
done
status=0 runs=0 failed_log=""
for w in "${!pids[@]}"; do
  rc=0
  wait "${pids[$w]}" || rc=$?
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "${logs[$w]}" | tail -1)
  runs=$((runs + ${n:-0}))
  if [ "$rc" -ne 0 ] && [ -z "$failed_log" ]; then status=$rc failed_log=${logs[$w]}; fi
done
pids=()
if [ "$status" -ne 0 ]; then
  grep -v -E '^(#[0-9]+|INFO:|MERGE|\s*$)' "$failed_log" | tail -60 >&2
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$failed_log" | tail -1)
  echo "fuzz.$TARGET: FAILED after $runs executions (log: $failed_log)" >&2
  if [ -n "$artifact" ]; then
    echo "fuzz.$TARGET: the input: $artifact — replay it with: $BIN $artifact" >&2
    echo "fuzz.$TARGET: once fixed, keep it: cp $artifact $REG/" >&2
  fi
  exit 1
fi
echo "fuzz.$TARGET: passed: $runs executions in $SECONDS_BUDGET s on $WORKERS worker(s), corpus $(ls "$CORPUS" | wc -l) inputs (+ $(ls "$HERE/seeds/$TARGET" | wc -l) seeds)"
