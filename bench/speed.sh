#!/usr/bin/env bash
# The speed target, measured in one run: a training step of the GPT-2-small shape (12 layers, hidden 768,
# 12 heads, seq-len 256, micro-batch 4, vocab 8192, dropout 0) with 2 threads, lattice fp32 and bf16
# activations against the PyTorch peer (bench/pytorch_peer.py) on the same machine, same run: PyTorch fp32
# for lattice fp32, and PyTorch under torch.autocast("cpu", bfloat16) for lattice bf16 (each dtype against
# the other side's own path for it: comparing lattice bf16 with PyTorch fp32 would flatter lattice).
#
# The machine's 2 cores are shared, so single steps are noisy: the three runs are interleaved for ROUNDS
# rounds and the figures use the MEDIAN timed step of each (tokens/s = b·s / median step time); the mean
# and the fastest step are shown beside it.
#
# Usage: bench/speed.sh [path/to/lattice]     (default: build/lattice, else build-bench/lattice)
# Env:   ROUNDS (default 2), STEPS (lattice steps per round, the first is warm-up and not timed; default 5),
#        PEER_STEPS (timed PyTorch steps per round after one warm-up; default 3), THREADS (default 2),
#        KEEP=1 keeps the scratch directory.
# Prints a table of tokens/s, step time, MFU and the ratios to PyTorch, the GEMM candidates at the step's
# shapes and each dtype's limit (below); exits 0 whatever the figures.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-}"
if [[ -z "$LATTICE" ]]; then
  for c in "$ROOT/build/lattice" "$ROOT/build-bench/lattice"; do [[ -x "$c" ]] && LATTICE="$c" && break; done
fi
[[ -x "$LATTICE" ]] || { echo "speed.sh: no lattice binary (build first or pass its path)" >&2; exit 2; }
ROUNDS="${ROUNDS:-2}"
STEPS="${STEPS:-5}"
PEER_STEPS="${PEER_STEPS:-3}"
THREADS="${THREADS:-2}"
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3  # Debian's, which has python3-torch
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-speed.XXXXXX")"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT

# Token file: 300k random tokens below 8192 in llm.c's format (256 int32 header: magic, version, count).
random_token_file "$SCRATCH/data" 300000 8192 8192

# A peak is never below what the machine measured (docs/mfu.md): the runs read this bench, saved in the
# scratch directory, where the theoretical peak's clock (cpuinfo's current MHz, with no cpufreq) is below
# the one the cores run at and an MFU against it would pass 100%. Its bandwidth serves the limits below.
export LATTICE_BENCH_DIR="$SCRATCH/bench-dir"
"$LATTICE" bench --save --json --seconds 0.5 --threads "$THREADS" 2>/dev/null | tail -1 > "$SCRATCH/bench.json" || true

SHAPE=(--layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab 8192 --micro-batch 4 --dropout 0)
echo "speed.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
run_lattice() {  # $1 = activation dtype, $2 = round; JSON Lines into $SCRATCH/$1_$2.jsonl
  echo "+ $LATTICE train --data $SCRATCH/data ${SHAPE[*]} --activation-dtype $1 --steps $STEPS --threads $THREADS --lr-schedule constant --warmup 0 --json" >&2
  "$LATTICE" train --data "$SCRATCH/data" "${SHAPE[@]}" --activation-dtype "$1" --steps "$STEPS" \
    --threads "$THREADS" --lr-schedule constant --warmup 0 --json >"$SCRATCH/$1_$2.jsonl"
}
for r in $(seq 1 "$ROUNDS"); do
  run_lattice fp32 "$r"
  run_lattice bf16 "$r"
  echo "+ $PY $ROOT/bench/pytorch_peer.py --steps $PEER_STEPS --warmup 1 --threads $THREADS" >&2
  "$PY" "$ROOT/bench/pytorch_peer.py" --steps "$PEER_STEPS" --warmup 1 --threads "$THREADS" | tail -1 \
    >"$SCRATCH/peer_$r.json"
  echo "+ $PY $ROOT/bench/pytorch_peer.py --steps $PEER_STEPS --warmup 1 --threads $THREADS --autocast bf16" >&2
  "$PY" "$ROOT/bench/pytorch_peer.py" --steps "$PEER_STEPS" --warmup 1 --threads "$THREADS" --autocast bf16 | tail -1 \
    >"$SCRATCH/peer_bf16_$r.json"
done
echo "speed.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" "$ROUNDS" <<'EOF'
import json, os, statistics, sys

scratch, rounds = sys.argv[1], int(sys.argv[2])
B, s, L, h, v = 4, 256, 12, 768, 8192
flops = 72 * B * s * L * h * h * (1 + s / (6 * h) + v / (12 * h * L))  # model FLOPs of one step (docs/design.md §7)
tokens = B * s


def lattice_steps(dt):
    steps, peaks = [], []
    for r in range(1, rounds + 1):
        events = [json.loads(line) for line in open(os.path.join(scratch, f"{dt}_{r}.jsonl")) if line.strip()]
        steps += [e["step_s"] for e in events if e["event"] == "step"][1:]  # step 1 warms up
        peaks += [e.get("peak_flops_total") or float("nan") for e in events if e["event"] == "step"]
    return steps, peaks[-1]  # the machine's peak for the dtype, as the run stated it (docs/mfu.md)


fp32, bf16 = lattice_steps("fp32"), lattice_steps("bf16")
def peer(name, peak):
    return (sum((json.load(open(os.path.join(scratch, f"{name}_{r}.json")))["step_times"]
                 for r in range(1, rounds + 1)), []), peak)


runs = {"lattice fp32": fp32, "lattice bf16": bf16, "pytorch fp32": peer("peer", fp32[1]),
        "pytorch bf16": peer("peer_bf16", bf16[1])}
against = {"lattice fp32": "pytorch fp32", "lattice bf16": "pytorch bf16", "pytorch fp32": "pytorch fp32",
           "pytorch bf16": "pytorch bf16"}
med = {k: statistics.median(t) for k, (t, _) in runs.items()}
mean = {k: statistics.mean(t) for k, (t, _) in runs.items()}
p = "pytorch fp32"
print(f"GPT-2-small shape (L=12 h=768 a=12 s=256 b=4 v=8192), {flops / 1e9:.0f} GFLOP/step, 2 threads, "
      f"{rounds} interleaved rounds")
print(f"{'run':<14}{'steps':>6}{'median s':>10}{'tokens/s':>10}{'MFU':>8}{'vs PyTorch, same dtype':>24}"
      f"{'mean s':>9}{'vs PyTorch':>12}{'best s':>9}")
for k, (t, peak) in runs.items():
    q = against[k]
    print(f"{k:<14}{len(t):>6}{med[k]:>10.3f}{tokens / med[k]:>10.1f}{100 * flops / med[k] / peak:>7.1f}%"
          f"{med[q] / med[k]:>23.2f}x{mean[k]:>9.3f}{mean[q] / mean[k]:>11.2f}x{min(t):>9.3f}")
print(f"MFU = model FLOPs / median step time / peak, peak {fp32[1] / 1e9:.0f} GFLOP/s fp32 and {bf16[1] / 1e9:.0f} GFLOP/s "
      "bf16 (the runs' peak_flops_total: docs/mfu.md;")
print("each PyTorch peer is rated on its dtype's peak). Lattice's step 1 and PyTorch's first step are warm-up.")
for dt in ("fp32", "bf16"):
    events = [json.loads(line) for line in open(os.path.join(scratch, f"{dt}_1.jsonl")) if line.strip()]
    print(f"{dt} peak: " + next((e.get("peak_source") or "none" for e in events if e["event"] == "start"), "not stated"))
for name, want in (("lattice fp32", 3.0), ("lattice bf16", 1.6)):  # the targets, medians, each against its own dtype
    q = against[name]
    print(f"target {name} >= {want}x {q}: {'met' if med[q] / med[name] >= want else 'NOT met'} "
          f"({med[q] / med[name]:.2f}x)")
EOF
# The GEMM rates at the model's exact shapes in the same run (bench/bench_gemm_candidates.cpp, needs libblis-dev).
GC="$(dirname "$LATTICE")/bench/bench_gemm_candidates"
if [[ -x "$GC" ]]; then
  echo "GEMM candidates at the step's shapes ($GC --summary --threads $THREADS):"
  "$GC" --summary --threads "$THREADS" | tee "$SCRATCH/candidates.txt" || true
fi
# Each dtype's limit (the issue's definition, docs/performance.md): the step's GEMMs at the best rate
# measured at its shapes (the candidates above: oneDNN bf16, the best fp32 candidate per shape), plus the
# element-wise bytes at the measured bandwidth (lattice bench's triad) if every kept tensor is written once
# and read once (the run's kept-bytes formula: per layer × L, and outside the layers) and AdamW moves 28
# bytes a parameter (weight, gradient, two moments read; weight and moments written).
"$PY" - "$SCRATCH" "$ROUNDS" <<'EOF'
import json, os, re, statistics, sys
scratch, rounds = sys.argv[1], int(sys.argv[2])
try:
    bandwidth = json.loads(open(os.path.join(scratch, "bench.json")).read())["memory_bandwidth"]
    text = open(os.path.join(scratch, "candidates.txt")).read()
except (OSError, ValueError, KeyError):
    print("limits: not computed (no lattice bench or GEMM candidates in this run)"); sys.exit(0)
gemm = {"bf16": re.search(r"onednn-bf16\s+([0-9.]+) s", text), "fp32": re.search(r"best fp32\s+([0-9.]+) s", text)}
for dt in ("fp32", "bf16"):
    events = [json.loads(l) for l in open(os.path.join(scratch, f"{dt}_1.jsonl")) if l.strip()]
    summary = [e for e in events if e["event"] == "summary"][-1]
    rank = summary["memory"]["ranks"][0]
    kept = sum(rank["activation_bytes_per_layer_formula"]) + rank["activation_bytes_outside_layers_formula"]
    moved = 2 * kept + 28 * summary["parameters"]
    steps = []
    for r in range(1, rounds + 1):  # each run's first step warms up, as in the table above
        run = [json.loads(l) for l in open(os.path.join(scratch, f"{dt}_{r}.jsonl")) if l.strip()]
        steps += [e["step_s"] for e in run if e["event"] == "step"][1:]
    if not gemm[dt]:
        print(f"limit lattice {dt}: no GEMM figure"); continue
    limit = float(gemm[dt].group(1)) + moved / bandwidth
    step = statistics.median(steps)
    print(f"limit lattice {dt}: {limit:.3f} s = GEMMs {float(gemm[dt].group(1)):.3f} s + {moved / 1e9:.2f} GB at "
          f"{bandwidth / 1e9:.1f} GB/s; the step (median {step:.3f} s) is {step / limit:.2f}x it "
          f"(target {'1.3' if dt == 'bf16' else '1.2'}x: {'met' if step / limit <= (1.3 if dt == 'bf16' else 1.2) else 'NOT met'})")
EOF
