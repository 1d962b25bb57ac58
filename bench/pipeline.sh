#!/usr/bin/env bash
# Pipeline schedules and partitions, measured on one engine (issue 16): for p = 2 and 4 and 8 and 16
# micro-batches a step, GPipe, 1F1B, interleaved 1F1B (m = 2), ZB-H1 and PipeDream-2BW on even stages,
# and 1F1B and ZB-H1 on the partitioner's stages (--pipeline-layers auto); each row gives the median
# step time, the bubble measured from the trace (the idle share of the last step; for 2BW the
# second-to-last, a steady step, since the last one drains), the bubble the simulator gives at the
# trace's mean pass times beside the schedule's formula (2BW: a steady step's), and rank 0's and the largest rank's
# activation peak beside the formula (first stage: eq. 5's micro-batches × its layers' rows; others
# from the per-stage prediction of `lattice plan`). The model's head is heavy (vocabulary 8192 on
# h 256), so the last stage's output layer weighs about 2.5 layers, as GPT-2's does on small models.
#
# On a 2-core machine p = 4 oversubscribes the cores (4 ranks of 1 thread): its times include
# time-sharing, so its bubbles are larger than any schedule's; compare rows of one p.
#
# Usage: bench/pipeline.sh [build-dir]   Env: LAYERS (8), HIDDEN (256), SEQ (128), VOCAB (8192),
#        STEPS (4), PS ("2 4"), NS ("8 16"), BAL_P (2: the balanced 1F1B-vs-2BW table's p)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd)/lattice"
[[ -x "$LATTICE" ]] || { echo "pipeline.sh: no $LATTICE (build first or pass the build dir)" >&2; exit 2; }
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-pipeline.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
cd "$SCRATCH"
for i in $(seq 1 2000); do echo "In the beginning $i the pipeline was without form, and void; and the stages were even."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
LAYERS=${LAYERS:-8}
MODEL=(--data data --layers "$LAYERS" --hidden "${HIDDEN:-256}" --heads 8 --seq-len "${SEQ:-128}" --vocab "${VOCAB:-8192}"
       --micro-batch 1 --steps "${STEPS:-4}" --dropout 0.1 --threads 1 --json)
echo "cores: $(getconf _NPROCESSORS_ONLN); ranks of one thread each; model: ${MODEL[*]:2}"
rows=()
for p in ${PS:-2 4}; do
  for n in ${NS:-8 16}; do
    for spec in "gpipe:even" "1f1b:even" "interleaved:even" "zb-h1:even" "pipedream-2bw:even" "1f1b:auto" "zb-h1:auto"; do
      sched=${spec%%:*} part=${spec##*:}
      name="p${p}_n${n}_${sched}_${part}"
      flags=(--pipeline-model-parallel-size "$p" --global-batch "$n" --schedule "$sched" --trace "$name.trace.json")
      [[ "$sched" == interleaved ]] && flags+=(--virtual-stages 2)
      [[ "$part" == auto ]] && flags+=(--pipeline-layers auto)
      mpirun --oversubscribe -np "$p" "$LATTICE" train "${MODEL[@]}" "${flags[@]}" > "$name.jsonl" 2> "$name.err" ||
        { echo "pipeline.sh: $name failed: $(tail -1 "$name.err")" >&2; exit 1; }
      m=1; [[ "$sched" == interleaved ]] && m=2
      trace_step=()
      [[ "$sched" == pipedream-2bw ]] && trace_step=(--trace-step $((${STEPS:-4} - 2)))
      "$LATTICE" schedule --pipeline-model-parallel-size "$p" --micro-batches "$n" --virtual-stages "$m" \
        --schedule "$sched" --from-trace "$name.trace.json" "${trace_step[@]}" --json > "$name.real.json" 2> "$name.real.err"
      counts=$(grep -o 'pipeline layers (auto): [0-9,]*' "$name.err" | grep -o '[0-9,]*$' || true)
      plan_flags=(--pipeline-model-parallel-size "$p" --global-batch "$n" --gpus "$p" --activation-dtype fp32
                  --params-dtype fp32 --hardware cpu)
      [[ "$sched" == zb-h1 || "$sched" == pipedream-2bw ]] && plan_flags+=(--schedule "$sched")
      [[ "$sched" == interleaved ]] && plan_flags+=(--virtual-stages 2)
      [[ -n "$counts" ]] && plan_flags+=(--pipeline-layers "$counts")
      if [[ "$sched" == gpipe ]]; then
        echo "{}" > "$name.plan.json"  # the planner models 1F1B-like schedules only
      else
        "$LATTICE" plan "${MODEL[@]:0:12}" --micro-batch 1 "${plan_flags[@]}" --json > "$name.plan.json" 2> "$name.plan.err"
      fi
      rows+=("$name:$p:$n:$sched:$m:${counts:-even}")
    done
  done
done
"$PY" - "$LATTICE" "${rows[@]}" <<'PYEOF'
import json, statistics, subprocess, sys
lattice = sys.argv[1]
mib = lambda b: b / 2**20
print()
print("| p | n | schedule | stages | step s (median) | bubble: measured | at measured pass times: simulated / formula | rank 0 activations: measured / eq. 5 (MiB) | largest stage: measured / predicted (MiB) |")
print("|---|---|---|---|---|---|---|---|---|")
for row in sys.argv[2:]:
    name, p, n, sched, m, counts = row.split(":")
    p, n, m = int(p), int(n), int(m)
    lines = [json.loads(l) for l in open(name + ".jsonl")]
    steps = [e["step_s"] for e in lines if e.get("event") == "step"][1:]
    ranks = lines[-1]["memory"]["ranks"]
    real = json.load(open(name + ".real.json"))
    # Mean pass times from the trace (one micro-batch of one chunk), simulated as even stages.
    ev = [e for e in json.load(open(name + ".trace.json"))["traceEvents"] if e.get("ph") == "X"]
    mean = lambda cat: statistics.mean([e["dur"] for e in ev if e["cat"] == cat] or [0])
    f = mean("forward") * m
    if sched == "zb-h1":
        b, w = mean("backward_input") * m, mean("backward_weight") * m
    else:
        b, w = mean("backward") * m, 0.0
    args = [lattice, "schedule", "--pipeline-model-parallel-size", str(p), "--micro-batches", str(n), "--virtual-stages", str(m),
            "--schedule", sched, "--forward-time", str(f), "--backward-time", str(b + w), "--json"]
    if w > 0: args += ["--weight-time", str(w)]
    if sched == "pipedream-2bw": args += ["--steps", "3"]  # first, steady, last: the steady step is compared
    sim = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    if sched == "pipedream-2bw": sim["bubble"], sim["bubble_formula"] = sim["steady_bubble"], sim["steady_bubble_formula"]
    first = [r for r in ranks if r["pp_rank"] == 0][0]
    eq5 = sim["first_stage_formula"] * sum(first["activation_bytes_per_layer_formula"])
    largest = max(ranks, key=lambda r: r["activation_peak_bytes"])
    plan = json.load(open(name + ".plan.json")).get("memory_by_stage", [])
    predicted = "%.2f" % mib(plan[largest["pp_rank"]]["activations"]) if plan else "–"
    print("| %d | %d | %s | %s | %.3f | %.1f%% | %.1f%% / %.1f%% | %.2f / %.2f | %.2f / %s (stage %d) |" % (
        p, n, sched + (" (m=2)" if m > 1 else ""), counts, statistics.median(steps), 100 * real["bubble"],
        100 * sim["bubble"], 100 * sim["bubble_formula"], mib(first["activation_peak_bytes"]), mib(eq5),
        mib(largest["activation_peak_bytes"]), predicted, largest["pp_rank"]))
PYEOF

# PipeDream-2BW against 1F1B where the stages are even (vocabulary 256: a light head) and the bubble
# is large (n = 2p): 3 rounds interleaved, each the median of steps 2–STEPS; the ratio of the medians
# beside the formulas' (steady 2BW step over the 1F1B step at F = B/2).
BAL_P=${BAL_P:-2}; BAL_N=$((2 * BAL_P))
BAL=(--data data --layers "$LAYERS" --hidden "${HIDDEN:-256}" --heads 8 --seq-len "${SEQ:-128}" --vocab 256
     --micro-batch 1 --steps "${STEPS:-4}" --dropout 0.1 --threads 1 --json
     --pipeline-model-parallel-size "$BAL_P" --global-batch "$BAL_N")
for round in 1 2 3; do
  for sched in 1f1b pipedream-2bw; do
    mpirun --oversubscribe -np "$BAL_P" "$LATTICE" train "${BAL[@]}" --schedule "$sched" > "bal_${sched}_$round.jsonl" \
      2> "bal_$sched.err" || { echo "pipeline.sh: balanced $sched failed: $(tail -1 "bal_$sched.err")" >&2; exit 1; }
  done
done
"$PY" - "$BAL_P" "$BAL_N" <<'PYEOF'
import json, statistics, sys
p, n = int(sys.argv[1]), int(sys.argv[2])
med = lambda f: statistics.median([e["step_s"] for e in map(json.loads, open(f)) if e.get("event") == "step"][1:])
a = [med("bal_1f1b_%d.jsonl" % r) for r in (1, 2, 3)]
b = [med("bal_pipedream-2bw_%d.jsonl" % r) for r in (1, 2, 3)]
F, B = 1.0, 2.0
want = (n * (F + B) + (p - 1) * F) / ((n + p - 1) * (F + B))
print()
print("| p | n | 1F1B s/step (3 rounds) | 2BW s/step (3 rounds) | 2BW / 1F1B: measured (median) / formula |")
print("|---|---|---|---|---|")
print("| %d | %d | %s | %s | %.3f / %.3f |" % (p, n, " ".join("%.4f" % x for x in a), " ".join("%.4f" % x for x in b),
      statistics.median(y / x for x, y in zip(a, b)), want))
PYEOF
