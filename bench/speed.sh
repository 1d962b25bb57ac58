#!/usr/bin/env bash
# The speed target, measured in one run: a training step of the GPT-2-small shape (12 layers, hidden 768,
# 12 heads, seq-len 256, micro-batch 4, vocab 8192, dropout 0) with 2 threads, lattice fp32 and bf16
# activations against the PyTorch peer (bench/pytorch_peer.py) on the same machine, same run.
#
# Usage: bench/speed.sh [path/to/lattice]     (default: build/lattice, else build-bench/lattice)
# Env:   STEPS (lattice steps, the first is warm-up and not timed; default 5),
#        PEER_STEPS (timed PyTorch steps after one warm-up; default 3), THREADS (default 2),
#        KEEP=1 keeps the scratch directory.
# Prints a table of tokens/s, step time, MFU and the ratios to PyTorch; exits 0 whatever the figures.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-}"
if [[ -z "$LATTICE" ]]; then
  for c in "$ROOT/build/lattice" "$ROOT/build-bench/lattice"; do [[ -x "$c" ]] && LATTICE="$c" && break; done
fi
[[ -x "$LATTICE" ]] || { echo "speed.sh: no lattice binary (build first or pass its path)" >&2; exit 2; }
STEPS="${STEPS:-5}"
PEER_STEPS="${PEER_STEPS:-3}"
THREADS="${THREADS:-2}"
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3  # Debian's, which has python3-torch

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-speed.XXXXXX")"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT

# Token file: 300k random tokens below 8192 in llm.c's format (256 int32 header: magic, version, count).
"$PY" - "$SCRATCH/data" <<'EOF'
import os, random, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
n = 300_000
rng = random.Random(8192)
with open(os.path.join(out, "train.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(rng.randrange(8192) for _ in range(n))))
EOF

SHAPE=(--layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab 8192 --micro-batch 4 --dropout 0)
echo "speed.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2

run_lattice() {  # $1 = activation dtype; prints the summary line
  echo "+ $LATTICE train --data $SCRATCH/data ${SHAPE[*]} --activation-dtype $1 --steps $STEPS --threads $THREADS --lr-schedule constant --warmup 0 --json" >&2
  "$LATTICE" train --data "$SCRATCH/data" "${SHAPE[@]}" --activation-dtype "$1" --steps "$STEPS" \
    --threads "$THREADS" --lr-schedule constant --warmup 0 --json | tee "$SCRATCH/$1.jsonl" | grep '"summary"'
}
FP32="$(run_lattice fp32)"
BF16="$(run_lattice bf16)"
echo "+ $PY $ROOT/bench/pytorch_peer.py --steps $PEER_STEPS --warmup 1 --threads $THREADS" >&2
PEER="$("$PY" "$ROOT/bench/pytorch_peer.py" --steps "$PEER_STEPS" --warmup 1 --threads "$THREADS" | tail -1)"
echo "speed.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$FP32" "$BF16" "$PEER" <<'EOF'
import json, sys
fp32, bf16, peer = (json.loads(a) for a in sys.argv[1:4])
# Model FLOPs of one step (SPEC §7), to give the peer an MFU on lattice's fp32 peak (300 GFLOP/s).
B, s, L, h, v = 4, 256, 12, 768, 8192
flops = 72 * B * s * L * h * h * (1 + s / (6 * h) + v / (12 * h * L))
peer_mfu = peer["tokens_per_s"] / (B * s) * flops / 300e9
p = peer["tokens_per_s"]
print(f"GPT-2-small shape (L=12 h=768 a=12 s=256 b=4 v=8192), {flops / 1e9:.0f} GFLOP/step, 2 threads")
print(f"{'run':<18}{'tokens/s':>10}{'step s':>9}{'MFU':>8}{'vs PyTorch':>12}")
for name, r, mfu in (("lattice fp32", fp32, fp32["mfu"]), ("lattice bf16", bf16, bf16["mfu"]),
                     ("pytorch fp32", peer, peer_mfu)):
    t = r["tokens_per_s"]
    print(f"{name:<18}{t:>10.1f}{B * s / t:>9.3f}{100 * mfu:>7.1f}%{t / p:>11.2f}x")
print("MFU: model FLOPs / time / peak; peak 300 GFLOP/s fp32, 700 GFLOP/s bf16 (lattice's defaults; "
      "the peer is rated on the fp32 peak).")
target = fp32["tokens_per_s"] >= 2 * p and bf16["tokens_per_s"] > fp32["tokens_per_s"]
print(f"target (fp32 >= 2x PyTorch, bf16 faster still): {'met' if target else 'NOT met'}")
EOF
