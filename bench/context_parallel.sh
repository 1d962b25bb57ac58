#!/usr/bin/env bash
# Context parallelism at long sequences (docs/parallel.md, "Context parallelism"): a small model (4 layers,
# hidden 256, 8 heads, vocab 8192, micro-batch 1, fused attention, dropout 0.1, fp32) at s = 2048 and 4096,
# trained as one rank (2 threads), TP 2 + SP, CP 2 with the ring (p2p) and CP 2 with Ulysses (a2a), the
# 2-rank layouts with one thread per rank on the same 2 cores.
#
# Per row: the median step (timed steps: the first is a warm-up), every rank's accounted peak and
# activation peak (the largest rank's), the kept bytes of one layer on rank 0 (measured; the formula's
# in brackets), and for CP the time the CP group waited per step (the trace split's cp_comm: what the
# ring's transfers or Ulysses' all-to-alls left exposed) against the attention blocks' compute per step
# (--profile-ops: flash_block_* for the ring, flash_attention_* otherwise) — the ring's overlap.
# The cases are interleaved for ROUNDS rounds; figures are medians over rounds.
#
# Usage: bench/context_parallel.sh [path/to/lattice]     (default: build/lattice)
# Env:   ROUNDS (default 2), STEPS (per run, first untimed; default 3), SEQS (default "2048 4096"),
#        CASES (default "one tp2_sp cp2_p2p cp2_a2a"), KEEP=1 keeps the scratch directory.
# Prints one table; exits 0 whatever the figures.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-$ROOT/build/lattice}"
[[ -x "$LATTICE" ]] || { echo "context_parallel.sh: no lattice binary at $LATTICE (build first or pass its path)" >&2; exit 2; }
ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-3} SEQS=${SEQS:-"2048 4096"}
CASES=${CASES:-"one tp2_sp cp2_p2p cp2_a2a"}
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lattice-cp.XXXXXX")
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

random_token_file "$SCRATCH/data" 300000 8192 8192
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
run() {  # $1 case, $2 s, $3 round → $SCRATCH/$1_$2_$3.{jsonl,trace.json,split.json}
  local base="$SCRATCH/$1_$2_$3" cmd
  local common=(train --data "$SCRATCH/data" --layers 4 --hidden 256 --heads 8 --seq-len "$2" --vocab 8192
                --micro-batch 1 --global-batch 1 --attention fused --dropout 0.1 --steps "$STEPS"
                --lr-schedule constant --warmup 0 --json --profile-ops --trace "$base.trace.json")
  case $1 in
    one)     cmd=(env OMP_NUM_THREADS=2 "$LATTICE" "${common[@]}" --threads 2) ;;
    tp2_sp)  cmd=("${MPI[@]}" -np 2 "$LATTICE" "${common[@]}" --threads 1 --tensor-model-parallel-size 2 --sequence-parallel) ;;
    cp2_p2p) cmd=("${MPI[@]}" -np 2 "$LATTICE" "${common[@]}" --threads 1 --context-parallel-size 2 --cp-comm-type p2p) ;;
    cp2_a2a) cmd=("${MPI[@]}" -np 2 "$LATTICE" "${common[@]}" --threads 1 --context-parallel-size 2 --cp-comm-type a2a) ;;
    *) echo "context_parallel.sh: unknown case $1" >&2; exit 2 ;;
  esac
  echo "+ ${cmd[*]}" >&2
  "${cmd[@]}" >"$base.jsonl" 2>"$base.err" || { echo "context_parallel.sh: $1 at s $2 failed:" >&2; tail -3 "$base.err" >&2; return; }
  "$LATTICE" schedule --from-trace "$base.trace.json" --split --json >"$base.split.json" 2>/dev/null || true
}
echo "context_parallel.sh: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
     "$(grep -q amx_bf16 /proc/cpuinfo && echo AMX || echo 'no AMX'), load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for r in $(seq 1 "$ROUNDS"); do
  for s in $SEQS; do
    for c in $CASES; do run "$c" "$s" "$r"; done
  done
done
echo "context_parallel.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" "$ROUNDS" "$SEQS" "$CASES" "$STEPS" <<'PYEOF'
import json, os, statistics, sys
scratch, rounds, seqs, cases, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5])
label = {"one": "one rank, 2 threads", "tp2_sp": "TP 2 + SP", "cp2_p2p": "CP 2, ring (p2p)", "cp2_a2a": "CP 2, Ulysses (a2a)"}
def load(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")]
    except (OSError, ValueError):
        return []
def med(xs):
    return statistics.median(xs) if xs else float("nan")
MiB = 1 << 20
print(f"small model (L 4, h 256, a 8, v 8192, b 1, fused attention, dropout 0.1, fp32), {os.cpu_count()} cores, "
      f"{rounds} interleaved rounds, medians")
print(f"{'s':>5}  {'run':<22}{'s/step':>8}{'peak MiB':>10}{'act. peak MiB':>15}{'kept/layer MiB (formula)':>26}"
      f"{'CP wait s':>11}{'attn blocks s':>15}{'wait/blocks':>13}")
for s in seqs:
    for c in cases:
        step, peak, act, wait, blocks, kept, formula = [], [], [], [], [], None, None
        for r in range(1, rounds + 1):
            base = os.path.join(scratch, f"{c}_{s}_{r}")
            ev = load(base + ".jsonl")
            step += [e["step_s"] for e in ev if e.get("event") == "step"][1:]
            summary = [e for e in ev if e.get("event") == "summary"]
            if not summary:
                continue
            ranks = summary[-1]["memory"]["ranks"]
            peak.append(max(x["accounted_peak_bytes"] for x in ranks))
            act.append(max(x["activation_peak_bytes"] for x in ranks))
            kept, formula = ranks[0]["activation_bytes_per_layer"][0], ranks[0]["activation_bytes_per_layer_formula"][0]
            prof = {o["op"]: o["seconds"] for o in summary[-1].get("op_profile", [])}
            blocks.append(sum(v for k, v in prof.items() if k.startswith("flash_")) / max(1, steps - 1))
            split = load(base + ".split.json")
            if split:
                wait.append(max(x["cp_comm_s"] for x in split[0]["ranks"]))
        if not step:
            print(f"{s:>5}  {label[c]:<22}  failed"); continue
        cp = c.startswith("cp")
        w, b = med(wait), med(blocks)
        print(f"{s:>5}  {label[c]:<22}{med(step):>8.3f}{med(peak) / MiB:>10.1f}{med(act) / MiB:>15.1f}"
              f"{kept / MiB:>15.2f} ({formula / MiB:.2f})"
              + (f"{w:>11.3f}{b:>15.3f}{w / b:>13.2f}" if cp else f"{'':>11}{b:>15.3f}{'':>13}"))
print("peak: the largest rank's accounted peak; CP wait: the CP group's waits per step on the slower rank (trace split);"
      " attn blocks: the fused attention kernel's time per step (--profile-ops, rank 0)")
PYEOF
