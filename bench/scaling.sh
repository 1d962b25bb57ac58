#!/usr/bin/env bash
# How fast each parallel layout runs on the same cores as one rank: the GPT-2-small shape (12 layers,
# hidden 768, 12 heads, seq-len 256, vocab 8192, global batch 4, dropout 0, fp32) trained as one rank
# with 2 threads and under TP 2, TP 2 + SP, DP 2 (plain, and with ZeRO-1), PP 2 (1F1B, 4 micro-batches of 1) with one thread per
# rank, and TP 2 × DP 2 and PP 2 × DP 2 at 4 ranks (2 ranks per core: oversubscribed 2×, one thread
# each). Efficiency = one rank's median step / the layout's median step (same cores, same global batch).
#
# The cases are interleaved for ROUNDS rounds; each run's first step warms up and is not timed; the
# figures are medians of the timed steps of all rounds. The PP rows are also rated against their bubble
# formula (docs/design.md §6): the best a 2-stage 1F1B step can do is t_one · (1 + (p−1)/m) / p per
# core-equivalent, so the formula's efficiency is 1 / (1 + (p−1)/m) = 0.80 at p 2, m 4.
#
# The "ceiling" row is two lattice processes with no MPI between them, each training half the global
# batch on one thread at once (its step = the slower process's): what any 2-process layout could reach
# with free communication, i.e. what splitting one 2-thread process into two 1-thread ones costs by itself.
#
# Also printed per layout: its step against the ceiling row's, and its exposed communication (the
# summary's wait on communication no compute hid, the most-waiting rank's share of its step).
#
# Usage: bench/scaling.sh [path/to/lattice]     (default: build/lattice)
# Env:   ROUNDS (default 3), STEPS (per run, first untimed; default 4), CASES (default all, e.g. "one dp2"),
#        BEFORE=path/to/older/lattice runs every case with it too, interleaved, and adds its columns
#        (what a change bought, measured in one run), KEEP=1 keeps the scratch directory.
# Prints one table; exits 0 whatever the figures.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-$ROOT/build/lattice}"
[[ -x "$LATTICE" ]] || { echo "scaling.sh: no lattice binary at $LATTICE (build first or pass its path)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-4}
CASES=${CASES:-"one ceiling tp2 tp2_sp dp2 dp2_zero1 pp2 tp2_dp2 pp2_dp2"}
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/lattice-scaling.XXXXXX")
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$SCRATCH"' EXIT

random_token_file "$SCRATCH/data" 300000 8192 8192

COMMON=(train --data "$SCRATCH/data" --layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab 8192
        --global-batch 4 --dropout 0 --steps "$STEPS" --lr-schedule constant --warmup 0 --json)
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
BEFORE=${BEFORE:-}
[[ -z "$BEFORE" || -x "$BEFORE" ]] || { echo "scaling.sh: BEFORE=$BEFORE is not an executable" >&2; exit 2; }
run() {  # $1 case, $2 round, $3 binary, $4 tag → $SCRATCH/$4$1_$2.jsonl
  local out="$SCRATCH/$4$1_$2.jsonl" cmd LATTICE=$3
  if [[ $1 == ceiling ]]; then  # two independent processes at once, half the global batch each
    local half=("${COMMON[@]}")
    for i in "${!half[@]}"; do [[ ${half[$i]} == --global-batch ]] && half[$((i + 1))]=2; done
    echo "+ 2 x OMP_NUM_THREADS=1 $LATTICE ${half[*]} --micro-batch 2 --threads 1" >&2
    for part in a b; do
      OMP_NUM_THREADS=1 "$LATTICE" "${half[@]}" --micro-batch 2 --threads 1 >"${out%.jsonl}.$part.jsonl" \
        2>"$SCRATCH/$4$1_$2.$part.err" &
    done
    wait || echo "scaling.sh: case ceiling failed" >&2
    return
  fi
  case $1 in
    one)     cmd=("$LATTICE" "${COMMON[@]}" --micro-batch 4 --threads 2) ;;
    tp2)     cmd=("${MPI[@]}" -np 2 "$LATTICE" "${COMMON[@]}" --micro-batch 4 --threads 1 --tensor-model-parallel-size 2) ;;
    tp2_sp)  cmd=("${MPI[@]}" -np 2 "$LATTICE" "${COMMON[@]}" --micro-batch 4 --threads 1 --tensor-model-parallel-size 2 --sequence-parallel) ;;
    dp2)     cmd=("${MPI[@]}" -np 2 "$LATTICE" "${COMMON[@]}" --micro-batch 2 --threads 1) ;;
    dp2_zero1) cmd=("${MPI[@]}" -np 2 "$LATTICE" "${COMMON[@]}" --micro-batch 2 --threads 1 --zero 1) ;;
    pp2)     cmd=("${MPI[@]}" -np 2 "$LATTICE" "${COMMON[@]}" --micro-batch 1 --threads 1 --pipeline-model-parallel-size 2) ;;
    tp2_dp2) cmd=("${MPI[@]}" -np 4 "$LATTICE" "${COMMON[@]}" --micro-batch 2 --threads 1 --tensor-model-parallel-size 2) ;;
    pp2_dp2) cmd=("${MPI[@]}" -np 4 "$LATTICE" "${COMMON[@]}" --micro-batch 1 --threads 1 --pipeline-model-parallel-size 2) ;;
    *) echo "scaling.sh: unknown case $1" >&2; exit 2 ;;
  esac
  echo "+ ${cmd[*]}" >&2
  "${cmd[@]}" >"$out" 2>"$SCRATCH/$4$1_$2.err" || { echo "scaling.sh: case $1 failed:" >&2; tail -3 "$SCRATCH/$4$1_$2.err" >&2; }
}
echo "scaling.sh: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for r in $(seq 1 "$ROUNDS"); do
  for c in $CASES; do
    [[ -n "$BEFORE" ]] && run "$c" "$r" "$BEFORE" before_
    run "$c" "$r" "$LATTICE" ""
  done
done
echo "scaling.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) at end" >&2

"$PY" - "$SCRATCH" "$ROUNDS" "$CASES" "${BEFORE:+before_}" <<'PYEOF'
import json, os, statistics, sys
scratch, rounds, cases, before = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
label = {"one": "one rank, 2 threads", "ceiling": "ceiling: 2 processes, no MPI, half the batch each",
         "tp2": "TP 2", "tp2_sp": "TP 2 + SP", "dp2": "DP 2 (micro-batch 2 each)",
         "dp2_zero1": "DP 2 + ZeRO-1 (each rank updates half the parameters)",
         "pp2": "PP 2, 1F1B, 4 micro-batches of 1", "tp2_dp2": "TP 2 x DP 2 (4 ranks, 2x oversubscribed)",
         "pp2_dp2": "PP 2 x DP 2 (4 ranks, 2x oversubscribed, 2 micro-batches of 1)"}
bubble = {"pp2": 1 / (1 + 1 / 4), "pp2_dp2": 1 / (1 + 1 / 2)}  # 1 / (1 + (p-1)/m), docs/design.md §6
def timed(path):  # a run's step times, the first (warm-up) step dropped
    try:
        ev = [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return []
    return [e["step_s"] for e in ev if e.get("event") == "step"][1:]
def steps(c, tag=""):
    t = []
    for r in range(1, rounds + 1):
        base = os.path.join(scratch, f"{tag}{c}_{r}")
        if c == "ceiling":  # the two processes' steps, step by step: the slower one's
            t += [max(a, b) for a, b in zip(timed(base + ".a.jsonl"), timed(base + ".b.jsonl"))]
        else:
            t += timed(base + ".jsonl")
    return t
def exposed(c):  # the exposed communication: the summary's wait a rank spent on communication no compute
    # hid (report/step_time.cpp), as a share of its step, the most-waiting rank's; median over rounds
    fr = []
    for r in range(1, rounds + 1):
        try:
            ev = [json.loads(l) for l in open(os.path.join(scratch, f"{c}_{r}.jsonl")) if l.startswith("{")]
        except OSError:
            continue
        for e in ev:
            ranks = e.get("step_time", {}).get("ranks", []) if e.get("event") == "summary" else []
            if ranks:
                fr.append(max(x["comm_wait_s"] / x["step_s"] for x in ranks if x["step_s"] > 0))
    return statistics.median(fr) if fr else None
med = {c: statistics.median(steps(c)) for c in cases if steps(c)}
old = {c: statistics.median(steps(c, before)) for c in cases if before and steps(c, before)}
print(f"GPT-2-small shape (L 12, h 768, a 12, s 256, v 8192, B 4, fp32), {os.cpu_count()} cores, "
      f"{rounds} interleaved rounds, medians of timed steps")
print(f"{'run':<62}{'steps':>6}{'s/step':>9}{'efficiency':>12}{'of ceiling':>12}{'vs bubble':>11}{'exposed comm':>14}"
      + (f"{'before s/step':>15}{'before eff.':>13}" if before else ""))
for c in cases:
    if c not in med:
        print(f"{label[c]:<62}  failed"); continue
    eff = med["one"] / med[c] if "one" in med else float("nan")
    vb = f"{eff / bubble[c]:>10.2f}" if c in bubble else f"{'':>10}"
    ceil = f"{med['ceiling'] / med[c]:>12.2f}" if "ceiling" in med and c not in ("one", "ceiling") else f"{'':>12}"
    x = exposed(c) if c not in ("one", "ceiling") else None
    comm = f"{100 * x:>13.1f}%" if x is not None else f"{'':>14}"
    tail = ""
    if before and c in old:
        tail = f"{old[c]:>15.3f}{(old['one'] / old[c] if 'one' in old else float('nan')):>13.2f}"
    print(f"{label[c]:<62}{len(steps(c)):>6}{med[c]:>9.3f}{eff:>12.2f}{ceil}{vb} {comm}{tail}")
print("efficiency = one rank's median step / the layout's (same 2 cores); of ceiling = the ceiling row's step / "
      "the layout's; vs bubble = efficiency / the 1F1B bubble formula's 1/(1+(p-1)/m); exposed comm = the "
      "most-waiting rank's wait on communication no compute hid, share of its step (the run's summary)")
PYEOF
