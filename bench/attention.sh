#!/usr/bin/env bash
# Fused attention against the paper's two unfused modes (docs/design.md §3.1): one transformer layer
# of the GPT-2-small shape (h 768, 12 heads, b 1, dropout 0.1, fp32), forward + backward, at
# s = 256, 1024 and 2048 — unfused with recompute none, unfused with selective recompute, fused —
# in interleaved rounds (bench/bench_attention.cpp), medians, and the bytes each keeps per layer
# (tracking allocator). Ratios are against unfused/none of the same run. Then the kept bytes of a
# 2-layer training run at s = 1024 beside the formula, as `lattice train --json` reports them.
#
# Usage: bench/attention.sh [build-dir]    (default: build-attn, else build)
# Env:   THREADS (default 2), ROUNDS (default 7), SEQS (default "256 1024 2048"), BF16=1 for bf16 activations.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-}"
if [[ -z "$BUILD" ]]; then
  for c in "$ROOT/build-attn" "$ROOT/build"; do [[ -x "$c/bench/bench_attention" ]] && BUILD="$c" && break; done
fi
[[ -x "$BUILD/bench/bench_attention" && -x "$BUILD/lattice" ]] ||
  { echo "attention.sh: need <build>/bench/bench_attention and <build>/lattice (build first or pass the build dir)" >&2; exit 2; }
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-7}"
SEQS="${SEQS:-256 1024 2048}"
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
EXTRA=()
[[ "${BF16:-0}" == 1 ]] && EXTRA+=(--bf16)

echo "attention.sh: $(nproc) cores, $THREADS threads, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-attention.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT

# shellcheck disable=SC2086
cmd=("$BUILD/bench/bench_attention" --h 768 --heads 12 --b 1 --dropout 0.1 --rounds "$ROUNDS" "${EXTRA[@]}" $SEQS)
echo "+ OMP_NUM_THREADS=$THREADS ${cmd[*]}" >&2
OMP_NUM_THREADS="$THREADS" "${cmd[@]}" > "$SCRATCH/bench.jsonl" 2> "$SCRATCH/bench.txt"

# The trainer's own report: measured kept bytes per layer beside the formula (s = 1024, one step).
random_token_file "$SCRATCH/data" 20000 256 4
for attn in unfused fused; do
  for mode in none selective; do
    "$BUILD/lattice" train --data "$SCRATCH/data" --layers 2 --hidden 768 --heads 12 --seq-len 1024 --micro-batch 1 \
      --vocab 256 --dropout 0.1 --recompute $mode --attention $attn --steps 1 --threads "$THREADS" --json \
      > "$SCRATCH/train_${attn}_${mode}.jsonl" 2>/dev/null
  done
done

"$PY" - "$SCRATCH" <<'EOF'
import json, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(d + "/bench.jsonl")]
print("| s | configuration | fwd+bwd ms (median) | vs unfused none | kept / layer | vs unfused none |")
print("|---|---|---|---|---|---|")
for r in rows:
    print("| %d | %s | %.1f | %.2f× | %.2f MiB | %.3f× |" % (r["s"], r["config"].replace("_", " "), r["median_s"] * 1e3,
          r["time_vs_none"], r["kept_bytes"] / 2**20, r["kept_vs_none"]))
print()
print("lattice train, s 1024, h 768, 12 heads, b 1, dropout 0.1, fp32 (layer 0, bytes):")
print("| attention | recompute | measured | formula | measured / formula |")
print("|---|---|---|---|---|")
for attn in ("unfused", "fused"):
    for mode in ("none", "selective"):
        r = [json.loads(l) for l in open("%s/train_%s_%s.jsonl" % (d, attn, mode))][-1]["memory"]["ranks"][0]
        m, f = r["activation_bytes_per_layer"][0], r["activation_bytes_per_layer_formula"][0]
        print("| %s | %s | %d | %d | %.4f |" % (attn, mode, m, f, m / f))
EOF
cat "$SCRATCH/bench.txt" >&2
