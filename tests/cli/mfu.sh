#!/usr/bin/env bash
# The MFU against a stated peak (docs/mfu.md): the start, step and summary records carry peak_flops
# and peak_source, the human lines name them, --peak-flops is a given peak (silly values refused),
# and where the theoretical peak is unknown (a fake cpuinfo with no clock: LATTICE_CPUINFO) a saved
# `lattice bench` stands in, labelled as measured, else the MFU is n/a.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
export LATTICE_BENCH_DIR=$SCRATCH/bench  # never the user's saved bench
unset LATTICE_CPUINFO LATTICE_CPU_SYSFS

# ok FILE EXPR: EXPR (Python) over start = the start record, steps = the step records, summary.
ok() {
  python3 - "$@" <<'EOF'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
start = [r for r in records if r.get("event") == "start"][0]
steps = [r for r in records if r.get("event") == "step"]
summary = [r for r in records if r.get("event") == "summary"][0]
sys.exit(0 if eval(sys.argv[2]) else 1)
EOF
}

for i in $(seq 1 300); do echo "In the beginning $i the word was with the text, and the text was good."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
SMALL=(--data data --layers 1 --hidden 32 --heads 4 --seq-len 32 --micro-batch 4 --threads 1 --steps 3)

# This machine's peak: every record carries it; on x86 it is the theoretical one (cores × clock).
"$LATTICE" train "${SMALL[@]}" --json > run.jsonl 2> run.err
check "train --json exits 0" test $? -eq 0
check "steps carry peak_flops > 0 and a peak_source" ok run.jsonl \
  "len(steps) == 3 and all(s['peak_flops'] > 0 and s['peak_source'] and s['mfu'] > 0 for s in steps)"
check "summary carries them" ok run.jsonl "summary['peak_flops'] > 0 and summary['peak_source'] and summary['mfu'] > 0"
check "start record carries them" ok run.jsonl "start['peak_flops'] == summary['peak_flops'] and start['peak_source'] == summary['peak_source']"
check "one rank: the total is the rank's peak" ok run.jsonl "summary['peak_flops_total'] == summary['peak_flops']"
if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  check "x86: the theoretical peak, cores × clock × FLOP/cycle" ok run.jsonl \
    "' core' in summary['peak_source'] and ' GHz (' in summary['peak_source'] and 'FLOP/cycle' in summary['peak_source']"
fi

# The human lines: the peak and its source at start and in the summary, a short form on each step.
"$LATTICE" train "${SMALL[@]}" > human.out 2> human.err
check "start line names the peak and its source" grep -q "^lattice train: MFU peak: .*a rank, " human.err
check "step line: MFU of the peak" test "$(grep -c '^step .*MFU .*% of [0-9.]*[kMGTPE]\?' human.err)" -eq 3
check "summary: MFU of the peak, with its source" grep -q "^done: .*MFU [0-9.]*% of .* a rank, " human.err

# Given: the source says so, and the MFU scales with it.
"$LATTICE" train "${SMALL[@]}" --peak-flops 1e12 --json > given.jsonl 2>/dev/null
check "given peak" ok given.jsonl "summary['peak_flops'] == 1e12 and summary['peak_source'] == 'given (--peak-flops)'"
check "given peak on each step" ok given.jsonl "all(s['peak_source'] == 'given (--peak-flops)' for s in steps)"
"$LATTICE" train "${SMALL[@]}" --peak-flops 1e12 > given.out 2> given.err
check "given: step line tag" grep -q "MFU .*% of 1T given" given.err
expect_error "--peak-flops 1e-300 refused" "--peak-flops" train "${SMALL[@]}" --peak-flops 1e-300
expect_error "--peak-flops 1e30 refused" "--peak-flops" train "${SMALL[@]}" --peak-flops 1e30
expect_error "--peak-flops -1 refused" "--peak-flops" train "${SMALL[@]}" --peak-flops -1
expect_error "--peak-flops nan refused" "--peak-flops" train "${SMALL[@]}" --peak-flops nan

# No clock anywhere (no cpufreq, no GHz in the model name, no "cpu MHz"): no theoretical peak.
printf 'processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 fma avx512f\n\n' > cpuinfo
mkdir -p nosys
LATTICE_CPUINFO=$PWD/cpuinfo LATTICE_CPU_SYSFS=$PWD/nosys "$LATTICE" train "${SMALL[@]}" --json > na.jsonl 2>/dev/null
check "no peak: MFU null, the source says why" ok na.jsonl \
  "summary['mfu'] is None and summary['peak_flops'] is None and 'no peak' in summary['peak_source'] and 'no clock' in summary['peak_source'] and all(s['mfu'] is None for s in steps)"
LATTICE_CPUINFO=$PWD/cpuinfo LATTICE_CPU_SYSFS=$PWD/nosys "$LATTICE" train "${SMALL[@]}" > na.out 2> na.err
check "no peak: step line says n/a" test "$(grep -c '^step .*MFU n/a' na.err)" -eq 3
check "no peak: the summary says how to get one" grep -q "^done: .*MFU n/a (no peak: pass --peak-flops or run lattice bench)" na.err

# ... then a saved `lattice bench` stands in, labelled as measured.
"$LATTICE" bench --seconds 0.05 --threads 1 --save > bench.out 2> bench.err
check "bench --save exits 0" test $? -eq 0
check "bench prints the theoretical peaks" test "$(grep -c '^theoretical peak \(fp32\|bf16\)' bench.out)" -eq 2
LATTICE_CPUINFO=$PWD/cpuinfo LATTICE_CPU_SYSFS=$PWD/nosys "$LATTICE" train "${SMALL[@]}" --json > measured.jsonl 2>/dev/null
check "unknown clock: the bench's GEMM rate, labelled" ok measured.jsonl \
  "summary['peak_flops'] > 0 and summary['peak_source'].startswith('measured by lattice bench (GEMM fp32 rate') and summary['mfu'] > 0"

# A clock too low (here a fake cpuinfo of 0.01 GHz, one thread): the clock the saved bench's FMA loop ran
# at replaces it (AVX-512 machines: every one this project builds for), so the fp32 peak is one core ×
# that clock × 64 FLOP/cycle, named so; an MFU is never rated against a clock the cores outran.
printf 'processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Some CPU\ncpu MHz\t\t: 10.000\nflags\t\t: fpu avx2 fma avx512f\n\n' > slowclock
check "bench prints the clock its FMA loop ran at" grep -qE '^FMA fp32 [0-9.]+ GFLOP/s: the cores ran at about [0-9.]+ GHz' bench.out
LATTICE_CPUINFO=$PWD/slowclock LATTICE_CPU_SYSFS=$PWD/nosys "$LATTICE" train "${SMALL[@]}" --json > slow.jsonl 2>/dev/null
ghz=$(python3 -c "import json,glob; print(json.load(open(glob.glob('$LATTICE_BENCH_DIR/bench-*-np1.json')[0]))['fma_clock_ghz'])")
check "a clock below the one the cores ran at: the bench's ($ghz GHz), named" ok slow.jsonl \
  "('the clock lattice bench\'s FMA loop ran at' in summary['peak_source'] and 'above the 0.01 GHz' in summary['peak_source']
    and abs(summary['peak_flops'] - 64e9 * $ghz) <= 1 + 1e-9 * 64e9 * $ghz and 0 < summary['mfu'] < 100)"
# A bench without the FMA loop (saved before it, or no AVX-512): a theoretical peak below the bench's
# GEMM rate gives way to that rate, labelled.
python3 - "$LATTICE_BENCH_DIR" <<'PY'
import glob, json, sys
path = glob.glob(sys.argv[1] + "/bench-*-np1.json")[0]
j = json.load(open(path))
del j["fma_fp32_flops"], j["fma_clock_ghz"]
open(path, "w").write(json.dumps(j) + "\n")
PY
LATTICE_CPUINFO=$PWD/slowclock LATTICE_CPU_SYSFS=$PWD/nosys "$LATTICE" train "${SMALL[@]}" --json > slow_gemm.jsonl 2>/dev/null
check "no FMA clock: a theoretical peak below the measured GEMM rate gives way to it, labelled" ok slow_gemm.jsonl \
  "'above the theoretical' in summary['peak_source'] and summary['peak_flops'] > 0.01e9 * 64 and 0 < summary['mfu'] < 100"

echo "$failures failure(s)"
test "$failures" -eq 0
