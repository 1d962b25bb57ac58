#!/usr/bin/env bash
# The step-time stall of a checkpoint save (issue 36): the GPT-2-small shape of bench/speed.sh (12 layers,
# hidden 768, 12 heads, seq-len 256, micro-batch 4, vocab 8192, dropout 0: 91.5M parameters, a 1.1 GB
# checkpoint with AdamW's moments) trained for STEPS steps three ways, interleaved for ROUNDS rounds:
# no save, a synchronous save every step, and --async-save every step.
#
# The figure per save: the interval between two step records (the JSON stream's elapsed_s) that have a
# save between them — the step, the save's stall and whatever the background write takes from training
# (2 cores are shared by the training threads and the writer) — against the median interval without a
# save. Also shown: the stall each save event measures on the training thread (stall_s: all of a
# synchronous save; the copy to host buffers and any wait for the previous write of a background one)
# and the background write's time. Medians over every save of every round; the first step warms caches
# and its save is left out.
#
# Usage: bench/async_save.sh [path/to/lattice]   (default: build/lattice, else build-bench/lattice)
# Env:   ROUNDS (default 2), STEPS (default 5), THREADS (default 2), SAVE_EVERY (default 1),
#        DIR (where checkpoints go; default a scratch directory under TMPDIR), KEEP=1 keeps the scratch.
# Prints one table; exits 0 whatever the figures.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-}"
if [[ -z "$LATTICE" ]]; then
  for c in "$ROOT/build/lattice" "$ROOT/build-bench/lattice"; do [[ -x "$c" ]] && LATTICE="$c" && break; done
fi
[[ -x "$LATTICE" ]] || { echo "async_save.sh: no lattice binary (build first or pass its path)" >&2; exit 2; }
ROUNDS="${ROUNDS:-2}"
STEPS="${STEPS:-5}"
THREADS="${THREADS:-2}"
SAVE_EVERY="${SAVE_EVERY:-1}"
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-async-save.XXXXXX")"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT
CKPT="${DIR:-$SCRATCH}"
random_token_file "$SCRATCH/data" 300000 8192 8192

SHAPE=(--layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab 8192 --micro-batch 4 --dropout 0)
echo "async_save.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; checkpoints in $CKPT ($(df -T "$CKPT" | awk 'NR==2 {print $2}'))" >&2
run() {  # $1 = none | sync | async, $2 = round
  local save=()
  # Each round replaces the last round's checkpoint of its mode (--overwrite).
  [[ "$1" != none ]] && save=(--save "$CKPT/ck_$1" --save-every "$SAVE_EVERY" --overwrite)
  [[ "$1" == async ]] && save+=(--async-save)
  echo "+ $LATTICE train --data $SCRATCH/data ${SHAPE[*]} --steps $STEPS --threads $THREADS --lr-schedule constant --warmup 0 ${save[*]} --json" >&2
  "$LATTICE" train --data "$SCRATCH/data" "${SHAPE[@]}" --steps "$STEPS" --threads "$THREADS" \
    --lr-schedule constant --warmup 0 "${save[@]}" --json >"$SCRATCH/$1_$2.jsonl"
}
for r in $(seq 1 "$ROUNDS"); do
  for mode in none sync async; do run "$mode" "$r"; done
done
echo "async_save.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" "$ROUNDS" "$STEPS" "$SAVE_EVERY" <<'EOF'
import json, statistics, sys

scratch, rounds, steps, save_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
med = lambda xs: statistics.median(xs) if xs else float("nan")
rows = {}
for mode in ("none", "sync", "async"):
    step_s, around, stall, waited, write = [], [], [], [], []
    for r in range(1, rounds + 1):
        recs = [json.loads(l) for l in open(f"{scratch}/{mode}_{r}.jsonl")]
        st = [x for x in recs if x.get("event") == "step"]
        saves = {x["step"]: x for x in recs if x.get("event") == "save"}  # --async-save's events
        step_s += [x["step_s"] for x in st[1:]]
        for a, b in zip(st[1:], st[2:]):  # from the end of step a to the end of step b (a > 1)
            if mode == "none" or a["step"] % save_every == 0:
                around.append(b["elapsed_s"] - a["elapsed_s"])
        for k, x in saves.items():
            if 1 < k < steps:  # periodic saves after the warm-up step
                stall.append(x["stall_s"]), waited.append(x["waited_s"])
        write += [x["write_s"] for x in recs if x.get("event") == "save_promoted" and 1 < x["step"] < steps]
    rows[mode] = dict(step=med(step_s), around=med(around), n=len(around), stall=med(stall), waited=med(waited),
                      write=med(write))
base = rows["none"]["around"]
print(f"{'mode':<8}{'step s':>9}{'step+save s':>13}{'stall s':>9}{'n':>4}{'save stall_s':>14}{'waited_s':>10}{'write_s':>9}")
for mode, x in rows.items():
    extra = x["around"] - base
    if mode == "none":
        print(f"{mode:<8}{x['step']:>9.3f}{x['around']:>13.3f}{'-':>9}{x['n']:>4}{'-':>14}{'-':>10}{'-':>9}")
    else:
        w = f"{x['write']:>9.3f}" if x["write"] == x["write"] else f"{'-':>9}"
        st_ = f"{x['stall']:>14.3f}{x['waited']:>10.3f}" if x["stall"] == x["stall"] else f"{'-':>14}{'-':>10}"
        print(f"{mode:<8}{x['step']:>9.3f}{x['around']:>13.3f}{extra:>9.3f}{x['n']:>4}{st_}{w}")
print("step s: median step_s (training only); step+save s: median interval between the step records around a save "
      "(no save: any two); stall s: step+save minus the no-save interval; save stall_s: the training thread's time in "
      "the save (the JSON save event, written under --async-save); waited_s: of it, waiting for the previous background "
      "write; write_s: the background write.")
EOF
