#!/usr/bin/env bash
# Table 4 analogue (paper: per-layer forward/backward time of the 22B model under each recompute mode),
# single process: one transformer layer of h=1024, a=16, s=512, b=2, dropout 0.1, timed by
# bench/bench_layer.cpp (forward; backward including its recomputation) under --recompute none,
# selective and full, fp32 and bf16 activations; and the activation bytes each layer keeps, measured by
# lattice's tracking allocator (`lattice train --json` summary, memory.ranks[0].activation_bytes_per_layer,
# L=2) beside docs/design.md §4's formula.
#
# The machine is shared and a layer's time moves by ±5% between runs, so the six layer benchmarks run
# ROUNDS times one after another; each figure is the median over rounds, and each overhead the median
# of the per-round ratios to that round's no-recompute run.
#
# Usage: bench/table4.sh [build-dir]      (default: build, else build-bench)
# Env:   THREADS (default 2), MIN_TIME (seconds per benchmark, default 1), ROUNDS (default 5),
#        KEEP=1 keeps the scratch dir.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-}"
if [[ -z "$BUILD" ]]; then
  for c in "$ROOT/build" "$ROOT/build-bench"; do [[ -x "$c/bench/bench_layer" ]] && BUILD="$c" && break; done
fi
[[ -x "$BUILD/bench/bench_layer" && -x "$BUILD/lattice" ]] ||
  { echo "table4.sh: need <build>/bench/bench_layer and <build>/lattice (build first or pass the build dir)" >&2; exit 2; }
THREADS="${THREADS:-2}"
MIN_TIME="${MIN_TIME:-1}"
ROUNDS="${ROUNDS:-5}"
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-table4.XXXXXX")"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT
H=1024 A=16 S=512 B=2 L=2 DROPOUT=0.1
echo "table4.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2

# 1. Layer timings, ROUNDS rounds of all six.
for r in $(seq 1 "$ROUNDS"); do
  echo "+ OMP_NUM_THREADS=$THREADS $BUILD/bench/bench_layer --benchmark_filter='BM_Layer/h:$H/' --benchmark_min_time=$MIN_TIME  # round $r" >&2
  OMP_NUM_THREADS="$THREADS" "$BUILD/bench/bench_layer" --benchmark_filter="BM_Layer/h:$H/" \
    --benchmark_min_time="$MIN_TIME" --benchmark_format=json --benchmark_out="$SCRATCH/layer_$r.json" \
    --benchmark_out_format=json >/dev/null
done

# 2. Measured activation bytes per layer from the trainer (one step of an L=2 model, byte vocabulary).
random_token_file "$SCRATCH/data" 20000 256 4
for dt in fp32 bf16; do
  for mode in none selective full; do
    cmd=("$BUILD/lattice" train --data "$SCRATCH/data" --layers $L --hidden $H --heads $A --seq-len $S
         --micro-batch $B --vocab 256 --dropout $DROPOUT --recompute $mode --activation-dtype $dt --steps 1
         --threads "$THREADS" --json)
    echo "+ ${cmd[*]}" >&2
    "${cmd[@]}" | grep '"summary"' >"$SCRATCH/mem_${dt}_${mode}.json"
  done
done
echo "table4.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" $H $A $S $B "$ROUNDS" <<'EOF'
import json, os, statistics, sys
scratch, h, a, s, b, rounds = sys.argv[1], *map(int, sys.argv[2:7])
per_round = []  # per round: {(bf16, mode): benchmark}
for r in range(1, rounds + 1):
    got = {}
    for bm in json.load(open(os.path.join(scratch, f"layer_{r}.json")))["benchmarks"]:
        if bm.get("run_type", "iteration") != "iteration":
            continue
        args = dict(kv.split(":") for kv in bm["name"].split("/")[1:] if ":" in kv)
        got[(int(args["bf16"]), int(args["mode"]))] = bm
    per_round.append(got)
med = statistics.median
runs = {}
for key in per_round[0]:
    rs = [g[key] for g in per_round]
    base = [g[(key[0], 0)] for g in per_round]
    runs[key] = {"fwd_ms": med(x["fwd_ms"] for x in rs), "bwd_ms": med(x["bwd_ms"] for x in rs),
                 "FLOP/s": med(x["FLOP/s"] for x in rs), "kept_bytes": rs[0]["kept_bytes"],
                 "bwd_ovh": med(x["bwd_ms"] / y["bwd_ms"] - 1 for x, y in zip(rs, base)),
                 "tot_ovh": med((x["fwd_ms"] + x["bwd_ms"]) / (y["fwd_ms"] + y["bwd_ms"]) - 1 for x, y in zip(rs, base))}
modes = ["none", "selective", "full"]
print(f"Table 4 analogue: one layer, h={h} a={a} s={s} b={b}, dropout 0.1, "
      f"model FLOPs {72 * b * s * h * h * (1 + s / (6 * h)) / 1e9:.1f} G per fwd+bwd; medians of {rounds} rounds "
      f"(overheads: median of the per-round ratios)")
print(f"{'dtype':<6}{'recompute':<11}{'fwd ms':>9}{'bwd ms':>9}{'total ms':>10}{'bwd ovh':>9}{'total ovh':>10}"
      f"{'GFLOP/s':>9}{'kept/layer (trainer)':>22}{'formula':>12}{'ratio':>7}")
for bf16 in (0, 1):
    dt = "bf16" if bf16 else "fp32"
    for m, name in enumerate(modes):
        r = runs[(bf16, m)]
        mem = json.load(open(os.path.join(scratch, f"mem_{dt}_{name}.json")))["memory"]["ranks"][0]
        kept, formula = mem["activation_bytes_per_layer"][0], mem["activation_bytes_per_layer_formula"][0]
        tot = r["fwd_ms"] + r["bwd_ms"]
        print(f"{dt:<6}{name:<11}{r['fwd_ms']:>9.1f}{r['bwd_ms']:>9.1f}{tot:>10.1f}"
              f"{100 * r['bwd_ovh']:>8.1f}%{100 * r['tot_ovh']:>9.1f}%"
              f"{r['FLOP/s'] / 1e9:>9.1f}{kept / 2**20:>18.2f} MiB{formula / 2**20:>8.2f} MiB"
              f"{kept / formula if formula else 0:>7.3f}")
        if r["kept_bytes"] != kept:
            print(f"  note: bench_layer measured {r['kept_bytes'] / 2**20:.2f} MiB kept for this layer")
print("paper (22B model, per layer, fwd/bwd ms): none 7.7/11.9; selective 7.7/13.2 (bwd +11%, total +7%); "
      "full 7.7/19.5 (bwd +64%, total +39%)")
EOF
