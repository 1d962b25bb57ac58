#!/usr/bin/env bash
# Mixture-of-Experts against a dense model of equal active FLOPs, on the King James Bible (byte tokens),
# and expert parallelism against one rank and plain DP.
#
# 1. Quality: four models trained with the same seed, data order, batch and lr schedule (cosine from
#    3e-3, 20 warm-up steps), dropout 0, for STEPS steps, validation loss every EVAL_EVERY steps:
#      dense          L=4, h=128, MLP 4h
#      switch         Switch top-1 over 8 experts of 4h (each token runs one dense-sized MLP), capacity 1.25
#      switch-nodrop  the same without a capacity (no token dropped)
#      top2           noisy top-2 over 8 experts of 2h (two half-sized MLPs a token: the dense MLP's FLOPs),
#                     capacity 1.25
#    the MoE models with auxiliary loss coefficient 0.01, every layer an MoE layer. Active and total
#    parameters and forward FLOPs per token come from `lattice plan --json` for the same flags.
# 2. Speed: ROUNDS interleaved rounds of SPEED_STEPS steps (the first step of each run is warm-up),
#    the same flags, starting from each model's trained weights (--init: the routers are balanced as
#    after training, not as at initialisation): each model on one rank with THREADS threads, DP 2
#    (mpirun -np 2, one thread a rank) and, for switch and top2, EP 2 on the same two ranks. Figures
#    are median step times and tokens/s = global batch tokens / median step; ratios are of medians.
#    Each 2-rank run is also checked to train the one-rank model (its losses, relative difference).
#
# Usage: bench/moe.sh [build-dir] [out-dir]   (defaults: build, <build-dir>/bench-moe)
# Env:   STEPS (600), EVAL_EVERY (100), EVAL_BATCHES (32), ROUNDS (3), SPEED_STEPS (6), THREADS (2),
#        SEED (1337), LAYOUTS (1; 0 skips the 2-rank runs), DATA (a prepared KJV dir; default: prepared
#        in the scratch dir from `bible "Gen1:1-Rev22:21"`), KEEP=1 keeps the scratch dir.
# OMP_WAIT_POLICY is left as it is (recorded in moe.json). An MoE step runs hundreds of small expert
# GEMMs, each an OpenMP fork/join: with the default policy a 2-thread step slowed 4-6x here while other
# jobs held both cores (passive avoids that, but cost 10-45% at a light load). Read the
# load averages printed on stderr; the 2-rank runs use one thread a rank and are not affected.
# Writes <out-dir>/moe.json (every number), <out-dir>/moe.md (the tables) and the runs' JSON Lines;
# prints the tables. Exits 0 whatever the figures say.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd)" || { echo "moe.sh: no build dir ${1:-$ROOT/build}" >&2; exit 2; }
LATTICE="$BUILD/lattice"
[[ -x "$LATTICE" ]] || { echo "moe.sh: no $LATTICE (build first or pass the build dir)" >&2; exit 2; }
OUT="${2:-$BUILD/bench-moe}"
mkdir -p "$OUT" 2>/dev/null || { echo "moe.sh: cannot create $OUT" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
STEPS=${STEPS:-600} EVAL_EVERY=${EVAL_EVERY:-100} EVAL_BATCHES=${EVAL_BATCHES:-32}
ROUNDS=${ROUNDS:-3} SPEED_STEPS=${SPEED_STEPS:-6} THREADS=${THREADS:-2} SEED=${SEED:-1337} LAYOUTS=${LAYOUTS:-1}
for v in STEPS EVAL_EVERY EVAL_BATCHES ROUNDS SPEED_STEPS THREADS SEED; do
  [[ "${!v}" =~ ^[0-9]+$ && "${!v}" -gt 0 ]] || { echo "moe.sh: $v must be a positive integer (got '${!v}')" >&2; exit 2; }
done
(( SPEED_STEPS >= 2 )) || { echo "moe.sh: SPEED_STEPS must be at least 2 (the first step is warm-up)" >&2; exit 2; }
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ "$LAYOUTS" == 1 ]]; then
  command -v mpirun >/dev/null || { echo "moe.sh: mpirun not found (scripts/install-deps.sh, or LAYOUTS=0)" >&2; exit 2; }
fi
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-moe.XXXXXX")"
if [[ "${KEEP:-0}" == 1 ]]; then echo "moe.sh: scratch dir $SCRATCH" >&2; else trap 'rm -rf "$SCRATCH"' EXIT; fi
# A private copy of the binary: every run of the benchmark uses the same one even if the build dir is
# rebuilt meanwhile.
cp "$LATTICE" "$SCRATCH/lattice"
BINARY_SHA=$(sha256sum "$LATTICE" | cut -c1-16)
REVISION=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)
LATTICE="$SCRATCH/lattice"

# The corpus: the KJV as scripts/demo.sh prepares it (byte tokens, last 10% = val.bin).
if [[ -n "${DATA:-}" ]]; then
  [[ -f "$DATA/train.bin" && -f "$DATA/val.bin" ]] || { echo "moe.sh: DATA=$DATA has no train.bin and val.bin" >&2; exit 2; }
else
  command -v bible >/dev/null || { echo "moe.sh: the bible command is missing (apt-get install bible-kjv, or set DATA)" >&2; exit 2; }
  bible "Gen1:1-Rev22:21" > "$SCRATCH/kjv.txt"
  "$LATTICE" prepare --input "$SCRATCH/kjv.txt" --out "$SCRATCH/kjv" > /dev/null 2> "$SCRATCH/prepare.err" ||
    { echo "moe.sh: lattice prepare failed: $(tail -1 "$SCRATCH/prepare.err")" >&2; exit 1; }
  DATA="$SCRATCH/kjv"
fi

SHAPE=(--layers 4 --hidden 128 --heads 4 --seq-len 128 --micro-batch 8 --global-batch 16)
declare -A FLAGS=(
  [dense]=""
  [switch]="--num-experts 8 --moe-router switch --moe-expert-capacity-factor 1.25 --moe-aux-loss-coeff 0.01"
  [switch-nodrop]="--num-experts 8 --moe-router switch --moe-no-drop --moe-aux-loss-coeff 0.01"
  [top2]="--num-experts 8 --moe-router topk --moe-router-topk 2 --moe-ffn-hidden-size 256 --moe-expert-capacity-factor 1.25 --moe-aux-loss-coeff 0.01"
)
MODELS=(dense switch switch-nodrop top2)
LAYOUT_MODELS=(dense switch top2)  # DP 2 (and EP 2 for the MoE ones) of these
TRAIN=(--data "$DATA" "${SHAPE[@]}" --dropout 0 --seed "$SEED" --json)
MPI=(mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS=1)

run() {  # run NAME LOG CMD...: the command's stdout into LOG; on failure, its last stderr line and exit 1
  local name=$1 log=$2; shift 2
  "$@" > "$log" 2> "$log.err" || { echo "moe.sh: $name failed: $(grep -v '^\s*$' "$log.err" | tail -1)" >&2; exit 1; }
}

LOADS="start $(cut -d' ' -f1 /proc/loadavg)"
echo "moe.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; output in $OUT" >&2
# Parameters and FLOPs of each model, by the planner.
for m in "${MODELS[@]}"; do
  # shellcheck disable=SC2086
  run "plan $m" "$OUT/plan_$m.json" "$LATTICE" plan "${SHAPE[@]}" ${FLAGS[$m]} --json
done

# 1. Quality runs (one after the other, THREADS threads each).
for m in "${MODELS[@]}"; do
  echo "+ lattice train ${SHAPE[*]} --dropout 0 --seed $SEED --steps $STEPS --eval-every $EVAL_EVERY --eval-batches $EVAL_BATCHES --threads $THREADS ${FLAGS[$m]}" >&2
  # shellcheck disable=SC2086
  run "train $m" "$OUT/train_$m.jsonl" "$LATTICE" train "${TRAIN[@]}" --steps "$STEPS" --eval-every "$EVAL_EVERY" \
    --eval-batches "$EVAL_BATCHES" --threads "$THREADS" ${FLAGS[$m]} --save "$SCRATCH/ck_$m"
done

# 2. Speed, interleaved: every case once per round.
cases=()
for m in "${MODELS[@]}"; do cases+=("one_$m"); done
if [[ "$LAYOUTS" == 1 ]]; then
  for m in "${LAYOUT_MODELS[@]}"; do
    cases+=("dp2_$m")
    if [[ "$m" != dense ]]; then cases+=("ep2_$m"); fi
  done
fi
for r in $(seq 1 "$ROUNDS"); do
  echo "moe.sh: speed round $r/$ROUNDS, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  LOADS+=", round $r $(cut -d' ' -f1 /proc/loadavg)"
  for c in "${cases[@]}"; do
    m=${c#*_} log="$OUT/speed_${c}_$r.jsonl" init=(--init "$SCRATCH/ck_${c#*_}")
    # shellcheck disable=SC2086
    case $c in
      one_*) run "$c" "$log" "$LATTICE" train "${TRAIN[@]}" "${init[@]}" --steps "$SPEED_STEPS" --threads "$THREADS" ${FLAGS[$m]} ;;
      dp2_*) run "$c" "$log" "${MPI[@]}" "$LATTICE" train "${TRAIN[@]}" "${init[@]}" --steps "$SPEED_STEPS" --threads 1 ${FLAGS[$m]} ;;
      ep2_*) run "$c" "$log" "${MPI[@]}" "$LATTICE" train "${TRAIN[@]}" "${init[@]}" --steps "$SPEED_STEPS" --threads 1 ${FLAGS[$m]} \
               --expert-model-parallel-size 2 ;;
    esac
  done
done
LOADS+=", end $(cut -d' ' -f1 /proc/loadavg)"
echo "moe.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

FLAG_LIST=(); for m in "${MODELS[@]}"; do FLAG_LIST+=("${FLAGS[$m]}"); done
BINARY_SHA=$BINARY_SHA REVISION=$REVISION LOADS=$LOADS "$PY" - "$OUT" "$STEPS" "$EVAL_EVERY" "$ROUNDS" "$SPEED_STEPS" "$THREADS" "$SEED" "$LAYOUTS" "$EVAL_BATCHES" \
  "${SHAPE[*]}" "${MODELS[*]}" "${LAYOUT_MODELS[*]}" "${FLAG_LIST[@]}" <<'PYEOF'
import json, math, os, statistics, sys
out, steps, every, rounds, speed_steps, threads, seed, layouts, eval_batches = sys.argv[1], *map(int, sys.argv[2:10])
shape, models, layout_models = sys.argv[10], sys.argv[11].split(), sys.argv[12].split()
flags = dict(zip(models, sys.argv[13:]))
label = {"dense": "dense (MLP 4h)", "switch": "Switch top-1, 8 experts of 4h, capacity 1.25",
         "switch-nodrop": "Switch top-1, 8 experts of 4h, no dropping",
         "top2": "noisy top-2, 8 experts of 2h, capacity 1.25"}
tokens_per_step = 16 * 128  # global batch × seq-len (SHAPE)

def events(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip().startswith("{")]

res = {"config": {"shape": shape, "flags": flags, "steps": steps, "eval_every": every, "rounds": rounds,
                  "speed_steps": speed_steps, "threads": threads, "seed": seed, "eval_batches": eval_batches,
                  "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
                  "revision": os.environ["REVISION"], "binary_sha256_prefix": os.environ["BINARY_SHA"],
                  "cores": os.cpu_count(), "load_average_1min": os.environ["LOADS"],
                  "speed_runs_start_from": "the quality run's final weights (--init)",
                  "lr": "cosine 3e-3 -> 3e-4, 20 warm-up steps", "dropout": 0, "corpus": "KJV, byte tokens"},
       "models": {}, "speed": {}}
WINDOW = 20  # train loss at step N = mean of steps N-19..N (one batch's loss is noisy)
for m in models:
    ev = events(os.path.join(out, f"train_{m}.jsonl"))
    st = [e for e in ev if e.get("event") == "step"]
    plan = events(os.path.join(out, f"plan_{m}.json"))[0]
    summary = [e for e in ev if e.get("event") == "summary"][0]
    loss = [e["loss"] for e in st]
    d = {"parameters": plan["parameters"], "active_parameters": plan["active_parameters"],
         "forward_flops_per_token": plan["forward_flops_per_token"],
         "train_loss": loss, "val_loss": {e["step"]: e["loss"] for e in ev if e.get("event") == "eval"},
         "step_s": [e["step_s"] for e in st],
         "train_run_median_step_s": statistics.median(e["step_s"] for e in st[1:])}
    if m != "dense":
        d["moe_dropped_fraction"] = [e["moe_dropped_fraction"] for e in st]
        d["moe_aux_loss"] = [e["moe_aux_loss"] for e in st]
        d["moe_load_min"] = [e["moe_load_min"] for e in st]
        d["moe_load_max"] = [e["moe_load_max"] for e in st]
        d["moe_load"] = summary["moe_load"]
    res["models"][m] = d

def window(loss, n): return statistics.mean(loss[max(0, n - WINDOW):n])

md = []
checkpoints = sorted(set(list(range(every, steps + 1, every)) + [steps]))
md.append(f"Loss by step (train = mean of the {WINDOW} steps up to N; val = {eval_batches} "
          "validation micro-batches):\n")
md.append("| step | " + " | ".join(f"{m} train | {m} val" for m in models) + " |")
md.append("|---|" + "---|---|" * len(models))
for n in checkpoints:
    row = [f"{n}"]
    for m in models:
        d = res["models"][m]
        v = d["val_loss"].get(n)
        row += [f"{window(d['train_loss'], n):.4f}", f"{v:.4f}" if v is not None else "–"]
    md.append("| " + " | ".join(row) + " |")

def case_steps(case):
    xs = []
    for r in range(1, rounds + 1):
        st = [e for e in events(os.path.join(out, f"speed_{case}_{r}.jsonl")) if e.get("event") == "step"]
        xs += [e["step_s"] for e in st][1:]
    return xs

def case_losses(case, r):
    return [e["loss"] for e in events(os.path.join(out, f"speed_{case}_{r}.jsonl")) if e.get("event") == "step"]

def case_comm(case):
    s = [e for e in events(os.path.join(out, f"speed_{case}_1.jsonl")) if e.get("event") == "summary"][0]
    r = s["comm"]["ranks"]
    return {k: statistics.median(x.get(k, 0) for x in r) for k in ("dp", "expert_dp", "ep", "ep_formula_balanced")}

cases = [f"one_{m}" for m in models]
if layouts:
    cases += [f"{l}_{m}" for m in layout_models for l in ("dp2", "ep2") if not (l == "ep2" and m == "dense")]
for c in cases:
    xs = case_steps(c)
    sp = {"step_s": xs, "median_step_s": statistics.median(xs), "tokens_per_s": tokens_per_step / statistics.median(xs),
          "comm_bytes_per_rank_last_step": case_comm(c)}
    if not c.startswith("one_"):  # the layout trains the one-rank model
        ref = f"one_{c.split('_', 1)[1]}"
        sp["max_rel_loss_diff_vs_one_rank"] = max(abs(a - b) / abs(a) for r in range(1, rounds + 1)
                                                  for a, b in zip(case_losses(ref, r), case_losses(c, r)))
    res["speed"][c] = sp

md.append("")
md.append(f"Per model (one rank, {threads} threads; tokens/s = {tokens_per_step} tokens / median step of "
          f"{rounds} interleaved rounds):\n")
md.append("| model | active params | total params | fwd FLOPs/token | final train loss | final val loss | "
          "dropped | tokens/s | vs dense |")
md.append("|---|---|---|---|---|---|---|---|---|")
dense_tps = res["speed"]["one_dense"]["tokens_per_s"]
def final_val(d):  # the last validation (at STEPS when EVAL_EVERY divides it)
    if not d["val_loss"]: return "–"
    n = max(d["val_loss"]); return f"{d['val_loss'][n]:.4f}" + ("" if n == steps else f" (step {n})")
for m in models:
    d, sp = res["models"][m], res["speed"][f"one_{m}"]
    drop = "–" if m == "dense" else f"{100 * statistics.mean(d['moe_dropped_fraction']):.1f}%"
    md.append(f"| {label[m]} | {d['active_parameters']:,} | {d['parameters']:,} | {d['forward_flops_per_token'] / 1e6:.3f} M | "
              f"{window(d['train_loss'], steps):.4f} | {final_val(d)} | {drop} | "
              f"{sp['tokens_per_s']:,.0f} | {sp['tokens_per_s'] / dense_tps:.2f}× |")
md.append("")
md.append("(dropped: mean share of routed token-expert assignments beyond capacity over the run.)")

if layouts:
    md.append("")
    md.append(f"Step time by layout (median s of {rounds} interleaved rounds × {speed_steps - 1} timed steps; one rank "
              f"= {threads} threads, DP 2 and EP 2 = 2 ranks × 1 thread; bytes a rank sent in the last step):\n")
    md.append("| model | one rank | DP 2 | EP 2 | EP 2 / one rank | EP 2 / DP 2 | DP 2 bytes (dense + expert grads) | "
              "EP 2 bytes (dense grads + all-to-all) |")
    md.append("|---|---|---|---|---|---|---|---|")
    mib = lambda b: f"{b / 2**20:.2f} MiB"
    for m in layout_models:
        one, dp2 = res["speed"][f"one_{m}"], res["speed"][f"dp2_{m}"]
        ep2 = res["speed"].get(f"ep2_{m}")
        cd = dp2["comm_bytes_per_rank_last_step"]
        row = [label[m], f"{one['median_step_s']:.3f}", f"{dp2['median_step_s']:.3f}"]
        if ep2:
            ce = ep2["comm_bytes_per_rank_last_step"]
            row += [f"{ep2['median_step_s']:.3f}", f"{ep2['median_step_s'] / one['median_step_s']:.2f}",
                    f"{ep2['median_step_s'] / dp2['median_step_s']:.2f}",
                    f"{mib(cd['dp'])} + {mib(cd['expert_dp'])}", f"{mib(ce['dp'])} + {mib(ce['ep'])}"]
        else:
            row += ["–", "–", "–", f"{mib(cd['dp'])}", "–"]
        md.append("| " + " | ".join(row) + " |")
    worst = max(v["max_rel_loss_diff_vs_one_rank"] for k, v in res["speed"].items() if not k.startswith("one_"))
    md.append("")
    md.append(f"Every DP 2 and EP 2 run trained the one-rank model: losses within {worst:.1e} relative.")

text = "\n".join(md)
with open(os.path.join(out, "moe.json"), "w") as f:
    json.dump(res, f, indent=1)
with open(os.path.join(out, "moe.md"), "w") as f:
    f.write(text + "\n")
print(text)
PYEOF
