#!/usr/bin/env bash
# The planner against the engine, layout by layout, on this machine: for each row, `lattice plan
# --hardware local` (this host as mpirun runs the layout: ranks share the cores, MPI at the rates a
# saved `lattice bench` measured) predicts the step, and `lattice train` runs it, plan and run side by
# side in every round. Printed: the predicted step (median over the rounds' plans) beside the measured
# median (min–max over the timed steps of all rounds) and the error; the prediction split into the planner's parts (GEMM, element-wise, recompute, TP, PP p2p, bubble,
# DP/ZeRO, optimizer) beside the measured split from each run's trace (`lattice schedule --from-trace
# --split`, the slowest rank); and the predicted per-rank accounted peak beside the measured one.
#
# Shapes (SHAPE): gpt2s = 12 layers, hidden 768, 12 heads, seq 256, vocab 8192, global batch 4;
# small = 4 layers, hidden 256, 8 heads, seq 128, vocab 8192, global batch 8; tiny = the test's model.
# Dropout 0, fp32 unless the row says bf16, one thread a rank under mpirun (2 for one rank).
#
# Usage: bench/plan_vs_engine.sh [path/to/lattice]        (default: build/lattice)
# Env:   SHAPE (gpt2s), ROUNDS (2; 3 at small), STEPS (4, the first untimed; 8 at small, whose 0.1-s steps
#        swing with the host's load), ROWS (default all, e.g. "one tp2"),
#        CHECK=1 exits 1 when a row's step is outside ±10% (default 0: print only), KEEP=1 keeps the scratch
#        directory, BENCH_BUDGET (30) the seconds of each MPI bench. The benches of one process (2 threads)
#        and of 2 and 4 ranks are measured first, into the scratch directory.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-$ROOT/build/lattice}"
[[ -x "$LATTICE" ]] || { echo "plan_vs_engine.sh: no lattice binary at $LATTICE" >&2; exit 2; }
SHAPE=${SHAPE:-gpt2s} CHECK=${CHECK:-0}
if [[ $SHAPE == small ]]; then ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-8}; else ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-4}; fi
ROWS=${ROWS:-"one tp2 tp2_sp dp2_z0 dp2_z1 dp2_z2 dp2_z3 pp2_gpipe pp2_1f1b pp2_interleaved tp2_dp2 tp2_pp2 one_selective one_full tp2_sp_selective one_bf16 tp2_bf16 one_fused pp2_zbh1 pp2_2bw moe_ep2 one_offload cp2 ring2"}
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lattice-plan-vs-engine.XXXXXX")
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT
export LATTICE_BENCH_DIR="$SCRATCH/bench"

case $SHAPE in
  gpt2s) MODEL=(--layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab 8192); GB=4 ;;
  small) MODEL=(--layers 4 --hidden 256 --heads 8 --seq-len 128 --vocab 8192); GB=8 ;;
  tiny)  MODEL=(--layers 4 --hidden 64 --heads 4 --seq-len 32 --vocab 256); GB=8 ;;
  *) echo "plan_vs_engine.sh: SHAPE must be gpt2s, small or tiny" >&2; exit 2 ;;
esac
random_token_file "$SCRATCH/data" 300000 "${MODEL[9]}" 8192
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)

# row -> "ranks threads micro-batch flags..." (the same flags go to train and plan)
row_spec() {
  case $1 in
    one)              echo "1 2 $((GB)) " ;;
    tp2)              echo "2 1 $((GB)) --tensor-model-parallel-size 2" ;;
    tp2_sp)           echo "2 1 $((GB)) --tensor-model-parallel-size 2 --sequence-parallel" ;;
    dp2_z0)           echo "2 1 $((GB / 2)) --zero 0" ;;
    dp2_z1)           echo "2 1 $((GB / 2)) --zero 1" ;;
    dp2_z2)           echo "2 1 $((GB / 2)) --zero 2" ;;
    dp2_z3)           echo "2 1 $((GB / 2)) --zero 3" ;;
    pp2_gpipe)        echo "2 1 1 --pipeline-model-parallel-size 2 --schedule gpipe" ;;
    pp2_1f1b)         echo "2 1 1 --pipeline-model-parallel-size 2 --schedule 1f1b" ;;
    pp2_interleaved)  echo "2 1 1 --pipeline-model-parallel-size 2 --virtual-stages 2 --schedule interleaved" ;;
    tp2_dp2)          echo "4 1 $((GB / 2)) --tensor-model-parallel-size 2" ;;
    tp2_pp2)          echo "4 1 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2" ;;
    one_selective)    echo "1 2 $((GB)) --recompute selective" ;;
    one_full)         echo "1 2 $((GB)) --recompute full" ;;
    tp2_sp_selective) echo "2 1 $((GB)) --tensor-model-parallel-size 2 --sequence-parallel --recompute selective" ;;
    one_bf16)         echo "1 2 $((GB)) --activation-dtype bf16" ;;
    tp2_bf16)         echo "2 1 $((GB)) --tensor-model-parallel-size 2 --activation-dtype bf16" ;;
    one_fused)        echo "1 2 $((GB)) --attention fused" ;;
    pp2_zbh1)         echo "2 1 1 --pipeline-model-parallel-size 2 --schedule zb-h1" ;;
    pp2_2bw)          echo "2 1 1 --pipeline-model-parallel-size 2 --schedule pipedream-2bw" ;;
    moe_ep2)          echo "2 1 $((GB / 2)) --num-experts 4 --expert-model-parallel-size 2" ;;
    one_offload)      echo "1 2 $((GB)) --offload-optimizer $SCRATCH/offload" ;;
    cp2)              echo "2 1 $((GB)) --context-parallel-size 2 --cp-comm-type a2a" ;;
    ring2)            echo "2 1 $((GB)) --context-parallel-size 2 --attention fused" ;;
    *) echo "plan_vs_engine.sh: unknown row $1" >&2; exit 2 ;;
  esac
}

echo "plan_vs_engine.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; shape $SHAPE" >&2
needed=$(for r in $ROWS; do row_spec "$r" | cut -d' ' -f1; done | sort -u)
for n in $needed; do
  if [[ $n == 1 ]]; then bench=("$LATTICE" bench --save --threads 2)
  else bench=("${MPI[@]}" -np "$n" "$LATTICE" bench --save --budget "${BENCH_BUDGET:-30}"); fi
  echo "+ ${bench[*]}" >&2
  "${bench[@]}" >/dev/null 2>"$SCRATCH/bench_np$n.err" ||
    { echo "plan_vs_engine.sh: the bench for $n rank(s) failed:" >&2; tail -3 "$SCRATCH/bench_np$n.err" >&2; exit 1; }
done

# Each round plans a row and then runs it, one after the other: the machine is shared and its speed drifts,
# so a prediction is compared with the runs beside it (the medians over the rounds of each).
for round in $(seq 1 "$ROUNDS"); do
  for row in $ROWS; do
    read -r ranks threads mb flags <<<"$(row_spec "$row")"
    # shellcheck disable=SC2086
    plan_flags=("${MODEL[@]}" --micro-batch "$mb" --global-batch "$GB" --gpus "$ranks" --threads "$threads"
                --dropout 0 --params-dtype fp32 $flags)
    [[ " $flags " == *" --activation-dtype "* ]] || plan_flags+=(--activation-dtype fp32)
    "$LATTICE" plan --hardware local "${plan_flags[@]}" --data "$SCRATCH/data" --json >"$SCRATCH/$row.$round.plan.json" \
      2>"$SCRATCH/$row.$round.plan.err" || { echo "plan_vs_engine.sh: plan of $row failed:" >&2; tail -2 "$SCRATCH/$row.$round.plan.err" >&2; }
    # shellcheck disable=SC2086
    args=(train --data "$SCRATCH/data" "${MODEL[@]}" --micro-batch "$mb" --global-batch "$GB" --threads "$threads"
          --dropout 0 --steps "$STEPS" --lr-schedule constant --warmup 0 --json --trace "$SCRATCH/$row.$round.trace.json" $flags)
    if [[ $ranks == 1 ]]; then cmd=(env OMP_NUM_THREADS="$threads" "$LATTICE" "${args[@]}")
    else cmd=("${MPI[@]}" -np "$ranks" "$LATTICE" "${args[@]}"); fi
    echo "+ ${cmd[*]}" >&2
    "${cmd[@]}" >"$SCRATCH/$row.$round.jsonl" 2>"$SCRATCH/$row.$round.err" ||
      { echo "plan_vs_engine.sh: $row failed:" >&2; tail -3 "$SCRATCH/$row.$round.err" >&2; continue; }
    "$LATTICE" schedule --from-trace "$SCRATCH/$row.$round.trace.json" --split --json \
      >"$SCRATCH/$row.$round.split.json" 2>/dev/null || true
  done
done
echo "plan_vs_engine.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" "$ROUNDS" "$ROWS" "$CHECK" "$SHAPE" <<'PYEOF'
import json, os, statistics, sys
scratch, rounds, rows, check, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4] == "1", sys.argv[5]
parts = [("gemm", "gemm_s"), ("elementwise", "elementwise_s"), ("recompute", "recompute_s"), ("tp_comm", "tp_comm_s"),
         ("ep_comm", "ep_comm_s"), ("pp_comm", "pp_comm_s"), ("bubble", "bubble_s"), ("dp_comm", "dp_comm_s"), ("optimizer", "optimizer_s")]
# CP's all-to-alls and the ring's exposed waits only where a row splits sequences (cp* and ring* rows).
if any(row.startswith(("cp", "ring")) for row in rows):
    parts.insert(5, ("cp_comm", "cp_comm_s"))
def load(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError):
        return []
print(f"## plan --hardware local against lattice train, shape {shape} (step seconds; parts predicted / measured)\n")
print("| row | ranks | predicted s | measured s (min–max) | error | " + " | ".join(p for p, _ in parts) +
      " | peak/rank predicted | measured |")
print("|---|---|---|---|---|" + "---|" * len(parts) + "---|---|")
outside = 0
for row in rows:
    plans = [p[0] for p in (load(os.path.join(scratch, f"{row}.{r}.plan.json")) for r in range(1, rounds + 1)) if p]
    plan = plans[0] if plans else {}
    steps, splits, peak = [], [], 0
    for r in range(1, rounds + 1):
        recs = load(os.path.join(scratch, f"{row}.{r}.jsonl"))
        steps += [e["step_s"] for e in recs if e.get("event") == "step" and e["step"] > 1]
        for e in recs:
            if e.get("event") == "summary":
                peak = max([peak] + [m.get("accounted_peak_bytes", 0) for m in e["memory"]["ranks"]])
        sp = load(os.path.join(scratch, f"{row}.{r}.split.json"))
        if sp:
            splits.append(max(sp[0]["ranks"], key=lambda x: x["step_s"]))
    ranks = 1
    for size in ("dp", "tp", "cp", "pp"): ranks *= plan.get("layout", {}).get(size, 1)
    pred = statistics.median([p["predicted_iteration_s"] for p in plans]) if plans else None
    if not steps or pred is None:
        print(f"| {row} | {ranks} | {pred} | (no run) | | " + " | " * len(parts) + " |")
        outside += 1
        continue
    med = statistics.median(steps)
    err = (pred - med) / med
    outside += abs(err) > 0.10
    cells = []
    for name, key in parts:
        ps = [q["time_breakdown_s"][name] for q in plans if name in q.get("time_breakdown_s", {})]
        p = statistics.median(ps) if ps else None
        m = statistics.median([s[key] for s in splits]) if splits and key in splits[0] else None
        cells.append(("%.3f" % p if p is not None else "–") + " / " + ("%.3f" % m if m is not None else "–"))
    pred_peak = max([s.get("accounted_peak_bytes", 0) for s in plan.get("memory_by_stage", [])] or [0])
    # MoE ranks are predicted for one stage, no recompute, ZeRO 0-1, fp32 weights: say so rather than print 0.
    pred_cell = f"{pred_peak / 2**20:.1f} MiB" if pred_peak else "– (MoE: one stage, no recompute, ZeRO 0-1 only)"
    print(f"| {row} | {ranks} | {pred:.3f} | {med:.3f} ({min(steps):.3f}–{max(steps):.3f}) | {100 * err:+.1f}% | " +
          " | ".join(cells) + f" | {pred_cell} | {peak / 2**20:.1f} MiB |")
print(f"\n{len(rows) - outside} of {len(rows)} rows within ±10%")
sys.exit(1 if check and outside else 0)
PYEOF
