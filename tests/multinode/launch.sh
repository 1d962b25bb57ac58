#!/usr/bin/env bash
# `lattice launch` on two hosts (network namespaces, see netns.sh): 2 hosts × 2 ranks train TP 2 ×
# DP 2 with a save every SAVE_EVERY steps, and mid-run
#   kill:  host b dies: its lattice ranks are killed (SIGKILL) and its cable goes down, so it no
#          longer answers: the launcher relaunches on host a alone with
#          the planner's layout, from the last promoted checkpoint;
#   stop:  one of host b's ranks is stopped (SIGSTOP): the others' watchdogs end the job (exit 3),
#          host b still answers and stays, the job restarts on both hosts;
#   cut:   host b's cable is cut: the launcher's no-progress timeout ends a job mpirun cannot end,
#          host b no longer answers, the job restarts on host a alone;
#   min:   as kill, with --min-ranks 4: one line, exit 3, the checkpoint intact.
# Each run completes, and every step's loss (those redone after the restart included) equals the
# uninterrupted one-rank run's within 1e-5 relative; steps redone ≤ SAVE_EVERY; time to resume shown.
# Usage: launch.sh LATTICE MPIEXEC SCRATCH [CASES...]   (exit 77: namespaces unavailable, skipped)
set -u
LATTICE=$1 MPIEXEC=$2 SCRATCH=$3
shift 3
CASES=("$@")
[ ${#CASES[@]} -eq 0 ] && CASES=(kill stop cut min)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
LATTICE=$(readlink -f "$LATTICE")
mn_up
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/../cli/lib/check.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
echo "hosts: $MN_A ($MN_ADDR_A) and $MN_B ($MN_ADDR_B), mpirun in $MN_HEAD"

for i in $(seq 1 300); do echo "And it came to pass $i that the layouts agreed, every one of them."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
STEPS=${STEPS:-40} SAVE_EVERY=${SAVE_EVERY:-4} COMM_TIMEOUT=${COMM_TIMEOUT:-5} NO_PROGRESS=${NO_PROGRESS:-15}
MODEL=(--data "$PWD/data" --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 8
       --steps "$STEPS" --dropout 0.1 --threads 1 --json)

"$LATTICE" train "${MODEL[@]}" --save ck_one > one.jsonl 2> one.err
check "one rank: exit 0" test $? -eq 0

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }
steps_done() { grep -c '"event":"step"' "$1.jsonl" 2>/dev/null; }

# launch_bg NAME FLAGS...: lattice launch in the head namespace, as mn_mpirun runs mpirun (the MCA
# settings as environment variables, which mpirun reads and launch's probe uses for the agent).
launch_bg() {
  local name=$1; shift
  ip netns exec "$MN_HEAD" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$MN_HEAD" \
    env TMPDIR="$MN_TMP" OMPI_MCA_plm_rsh_agent="$MN_DIR/agent.sh $MN_TMP/hosts.map" OMPI_MCA_plm_rsh_no_tree_spawn=1 \
    OMPI_MCA_btl=tcp,self OMPI_MCA_oob_tcp_if_include="$MN_SUBNET" OMPI_MCA_btl_tcp_if_include="$MN_SUBNET" \
    OMPI_MCA_hwloc_base_binding_policy=none \
    timeout -k 5 280 "$LATTICE" launch --hostfile "$MN_HOSTFILE" --mpirun "$MPIEXEC" --no-progress-timeout "$NO_PROGRESS" \
    "$@" -- train "${MODEL[@]}" --tensor-model-parallel-size 2 --save "$PWD/ck_$name" --save-every "$SAVE_EVERY" \
    --comm-timeout "$COMM_TIMEOUT" > "$name.jsonl" 2> "$name.err" &
  LAUNCH_PID=$!
  MN_BG_PIDS+=("$LAUNCH_PID")
}

# wait_steps NAME N: until N steps of the first job are out (60 s at most).
wait_steps() {
  local i
  for i in $(seq 1 600); do
    [ "$(steps_done "$1")" -ge "$2" ] && return 0
    kill -0 "$LAUNCH_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# finish NAME: waits for launch; prints the time from the failure to the first step after it.
finish() {
  local name=$1 failed_at=$2 resumed_at=""
  while kill -0 "$LAUNCH_PID" 2>/dev/null; do
    if [ -z "$resumed_at" ] && grep -q '"event":"resumed"' "$name.jsonl" 2>/dev/null; then resumed_at=$(now_ms); fi
    sleep 0.1
  done
  wait "$LAUNCH_PID"
  STATUS=$?
  [ -z "$resumed_at" ] && grep -q '"event":"resumed"' "$name.jsonl" && resumed_at=$(now_ms)
  [ -n "$resumed_at" ] && RESUME_S=$(secs $((resumed_at - failed_at))) || RESUME_S=n/a
}

# verify NAME WORLD HOSTS: the run completed, one restart onto WORLD ranks on HOSTS (JSON list), every
# step's loss equals the one-rank run's, steps redone ≤ SAVE_EVERY.
verify() {
  local name=$1 world=$2 hosts=$3
  check "$name: launch exits 0 (got $STATUS)" test "$STATUS" -eq 0
  grep '^lattice launch' "$name.err"
  check "$name: one restart line" test "$(grep -c '^lattice launch: restart ' "$name.err")" -eq 1
  check "$name: losses equal the one-rank run's, restart and layout as expected" \
    "$PY" - "$name" "$world" "$hosts" "$STEPS" "$SAVE_EVERY" <<'PYEOF'
import json, sys
name, world, hosts, steps, every = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
recs = [json.loads(l) for l in open(name + ".jsonl") if l.startswith("{")]
ref = {r["step"]: r["loss"] for r in map(json.loads, open("one.jsonl")) if r.get("event") == "step"}
restarts = [i for i, r in enumerate(recs) if r.get("event") == "restart"]
assert len(restarts) == 1, "restarts: %d" % len(restarts)
r = recs[restarts[0]]
before = [x for x in recs[:restarts[0]] if x.get("event") == "step"]
after = [x for x in recs[restarts[0]:] if x.get("event") == "step"]
starts = [x for x in recs[restarts[0]:] if x.get("event") == "start"]
print("restart:", {k: r[k] for k in ("reason", "lost_hosts", "hosts", "from", "to", "resume_step", "steps_redone", "seconds_lost")})
assert r["hosts"] == hosts, (r["hosts"], hosts)
assert r["to"]["world"] == world, r["to"]
lay = starts[0]["layout"]
assert (lay["tp"], lay["pp"], lay["dp"], starts[0]["micro_batch"]) == (r["to"]["tp"], r["to"]["pp"], r["to"]["dp"], r["to"]["micro_batch"]), (lay, r["to"])
last_before = max(x["step"] for x in before)
assert after[0]["step"] == r["resume_step"] + 1, (after[0]["step"], r["resume_step"])
assert after[-1]["step"] == steps, after[-1]["step"]
redone = last_before - r["resume_step"]
assert r["steps_redone"] == redone and 0 <= redone <= every, (r["steps_redone"], redone, every)
worst = max(abs(x["loss"] - ref[x["step"]]) / abs(ref[x["step"]]) for x in before + after)
worst_after = max(abs(x["loss"] - ref[x["step"]]) / abs(ref[x["step"]]) for x in after)
print("%d steps before the failure, %d after (from step %d, %d redone); worst relative loss difference %.2e (after the restart %.2e); layout %s -> %s"
      % (len(before), len(after), r["resume_step"] + 1, redone, worst, worst_after, r["from"], r["to"]))
sys.exit(0 if worst <= 1e-5 else 1)
PYEOF
}

b_lattice() { mn_pids_named "$MN_B" lattice; }

for case in "${CASES[@]}"; do
  echo "=== $case"
  case $case in
    kill)
      launch_bg kill
      wait_steps kill 10 || { check "kill: training under way" false; cat kill.err; continue; }
      # A host that dies: its ranks end and it stops answering (its cable down, as a powered-off
      # host's). Killing the ranks alone leaves a host that answers, which the launcher may keep or
      # leave out depending on whether mpirun names the killed rank before the survivors' exit 3.
      # The cable first: killed first, host b's daemon could report the deaths and the launcher probe
      # b before its cable went down (a loaded machine widens that gap), keep it, and need a second
      # restart when the relaunch hangs on it.
      mn_link b down
      kill -KILL $(b_lattice)
      failed_at=$(now_ms)
      finish kill "$failed_at"
      mn_link b up
      verify kill 2 "[\"$MN_ADDR_A\"]"
      echo "kill: time from the kill to the first step after the restart: $RESUME_S s"
      ;;
    stop)
      launch_bg stop
      wait_steps stop 10 || { check "stop: training under way" false; cat stop.err; continue; }
      victim=$(b_lattice | tail -1)
      kill -STOP "$victim"
      failed_at=$(now_ms)
      finish stop "$failed_at"
      kill -KILL "$victim" 2>/dev/null
      verify stop 4 "[\"$MN_ADDR_A\", \"$MN_ADDR_B\"]"
      echo "stop: time from the SIGSTOP to the first step after the restart: $RESUME_S s (--comm-timeout $COMM_TIMEOUT)"
      ;;
    cut)
      launch_bg cut
      wait_steps cut 10 || { check "cut: training under way" false; cat cut.err; continue; }
      mn_link b down
      failed_at=$(now_ms)
      finish cut "$failed_at"
      mn_link b up
      verify cut 2 "[\"$MN_ADDR_A\"]"
      echo "cut: time from the cut to the first step after the restart: $RESUME_S s (--comm-timeout $COMM_TIMEOUT, --no-progress-timeout $NO_PROGRESS)"
      # What of the job was left on host b (its ranks end by their own watchdog; mn_cleanup sweeps the rest).
      ;;
    min)
      launch_bg min --min-ranks 4
      wait_steps min 10 || { check "min: training under way" false; cat min.err; continue; }
      mn_link b down  # host b dies (see kill: the cable first)
      kill -KILL $(b_lattice)
      finish min 0
      mn_link b up
      check "min-ranks: exit 3 (got $STATUS)" test "$STATUS" -eq 3
      grep '^lattice launch' min.err
      check "min-ranks: one stop line naming the slots and the checkpoint" \
        grep -qE '^lattice launch: stopping: 2 slot\(s\) answer .*fewer than --min-ranks 4; the checkpoint in .*ck_min holds step [0-9]+$' min.err
      held=$(grep -oE 'holds step [0-9]+$' min.err | grep -oE '[0-9]+$')
      check "min-ranks: the checkpoint is intact (trainer.json at step $held, its weights there)" \
        "$PY" -c "import json,os,sys; j=json.load(open('ck_min/trainer.json')); sys.exit(0 if j['step']==int('$held') and os.path.getsize('ck_min/model.safetensors')>0 else 1)"
      ;;
  esac
done

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ] && [ -z "${MULTINODE_KEEP:-}" ] && rm -rf "$SCRATCH"  # kept on failure
[ "$failures" -eq 0 ]
