#!/usr/bin/env bash
# --offload-optimizer at the GPT-2-small shape (12 layers, h 768, s 256, b 4, vocab 8192: 91.7M
# parameters, 734 MB of AdamW moments): step time and memory with the moments in RAM and on disk,
# interleaved rounds, medians; then both under a cgroup memory limit smaller than the in-RAM run's
# peak, where the page cache cannot hold the moments either: the in-RAM run is killed, the offloaded
# one trains, reading and writing the moments from the disk each step. Also ZeRO-3 on 2 ranks with
# the weight shards offloaded too (--offload-params) beside the same run in RAM.
#
# Usage: bench/offload.sh [lattice-binary]   Env: ROUNDS (2), STEPS (5), LIMIT (bytes, default 1.9 GiB),
# OFFLOAD_DIR (default: a directory in the scratch dir, which must be on a disk, not tmpfs). Root for the cgroup.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LATTICE="${1:-$ROOT/build/lattice}"
[[ -x "$LATTICE" ]] || { echo "offload.sh: no $LATTICE (build first or pass it)" >&2; exit 2; }
PY=python3; [[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib/token_file.sh"
ROUNDS="${ROUNDS:-2}" STEPS="${STEPS:-5}" LIMIT="${LIMIT:-2040109465}"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/lattice-offload.XXXXXX")"
CG=/sys/fs/cgroup/memory/lattice-offload-$$
cleanup() { rmdir "$CG" 2> /dev/null || true; rm -rf "$SCRATCH"; }
trap cleanup EXIT
OFF="${OFFLOAD_DIR:-$SCRATCH/offload}"
random_token_file "$SCRATCH/data" 300000 8192 8192
SHAPE=(--data "$SCRATCH/data" --layers 12 --hidden 768 --heads 12 --seq-len 256 --vocab 8192 --micro-batch 4
       --dropout 0 --threads 2 --lr-schedule constant --warmup 0 --json)
run() {  # run NAME [FLAGS...]: JSON Lines into NAME.jsonl
  local name=$1; shift
  "$LATTICE" train "${SHAPE[@]}" --steps "$STEPS" "$@" > "$SCRATCH/$name.jsonl" 2> "$SCRATCH/$name.err"
}
for r in $(seq 1 "$ROUNDS"); do
  run "ram_$r"
  run "disk_$r" --offload-optimizer "$OFF"
done
# ZeRO-3 on 2 ranks (one thread each), the weight shards offloaded too (--offload-params).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
ZERO3=(--zero 3 --global-batch 8 --threads 1)
for r in $(seq 1 "$ROUNDS"); do
  mpirun --oversubscribe -np 2 "$LATTICE" train "${SHAPE[@]}" --steps "$STEPS" "${ZERO3[@]}" \
    > "$SCRATCH/z3ram_$r.jsonl" 2> "$SCRATCH/z3ram_$r.err"
  mpirun --oversubscribe -np 2 "$LATTICE" train "${SHAPE[@]}" --steps "$STEPS" "${ZERO3[@]}" \
    --offload-params "$OFF" > "$SCRATCH/z3disk_$r.jsonl" 2> "$SCRATCH/z3disk_$r.err"
done
limited="no cgroup (not root, or no memory controller)"
if mkdir "$CG" 2> /dev/null && echo "$LIMIT" > "$CG/memory.limit_in_bytes"; then
  limited="cgroup limit $LIMIT bytes"
  for mode in ram disk; do
    flags=(); [[ $mode == disk ]] && flags=(--offload-optimizer "$OFF")
    sync; echo 1 > /proc/sys/vm/drop_caches 2> /dev/null || true
    ( echo $BASHPID > "$CG/cgroup.procs"
      exec "$LATTICE" train "${SHAPE[@]}" --steps "$STEPS" "${flags[@]}" ) > "$SCRATCH/limited_$mode.jsonl" \
      2> "$SCRATCH/limited_$mode.err" && echo 0 > "$SCRATCH/limited_$mode.status" ||
      echo $? > "$SCRATCH/limited_$mode.status"
  done
fi
"$PY" - "$SCRATCH" "$ROUNDS" "$limited" <<'PYEOF'
import json, os, statistics, sys
scratch, rounds, limited = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mib = lambda b: "%.0f MiB" % (b / 2**20)
def load(name):
    path = os.path.join(scratch, name + ".jsonl")
    if not os.path.exists(path): return None
    lines = [json.loads(l) for l in open(path) if l.startswith("{")]
    steps = [l for l in lines if l.get("event") == "step"]
    return steps, (lines[-1] if lines and "memory" in lines[-1] else None)
print("| run | median step s (steps 2+) | model states resident | of which moments | offload staging | peak RSS |")
print("|---|---|---|---|---|---|")
# One row: the median step over every round (steps 2+) and rank 0's memory of the last round.
for mode, label in (("ram", "moments in RAM"), ("disk", "--offload-optimizer"),
                    ("z3ram", "ZeRO-3, DP 2, shards in RAM (rank 0)"), ("z3disk", "ZeRO-3, DP 2, --offload-params (rank 0)")):
    times, last = [], None
    for r in range(1, rounds + 1):
        steps, summary = load("%s_%d" % (mode, r))
        times += [s["step_s"] for s in steps[1:]]
        last = summary
    m = last["memory"]["ranks"][0]
    print("| %s | %.3f | %s | %s | %s | %s |" % (label, statistics.median(times), mib(sum(m["model_state_bytes"].values())),
          mib(m["model_state_bytes"]["optimizer"]), mib(m["category_peak_bytes"].get("offload_io", 0)), mib(m["rss_peak_bytes"])))
print()
print("under %s:" % limited)
for mode in ("ram", "disk"):
    path = os.path.join(scratch, "limited_%s.status" % mode)
    if not os.path.exists(path): continue
    status = int(open(path).read())
    got = load("limited_" + mode)
    if status == 0 and got and got[1]:
        steps, summary = got
        print("  %s: trained, median step %.3f s, peak RSS %s" % (mode, statistics.median(s["step_s"] for s in steps[1:]),
              mib(summary["memory"]["ranks"][0]["rss_peak_bytes"])))
    else:
        print("  %s: did not finish (exit status %d%s)" % (mode, status, ", killed by the OOM killer" if status in (137, 9) else ""))
PYEOF
