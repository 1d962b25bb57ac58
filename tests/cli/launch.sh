#!/usr/bin/env bash
# lattice launch on this machine (localhost): usage errors are one line and exit 2 (no --save, no
# train command), bad hostfiles and flags one line and exit 1, a job's own failure is not restarted,
# a killed rank is restarted from the checkpoint, and --max-restarts 0 stops with one line, exit 3
# and the checkpoint intact; a stopped mpirun's ranks end before the relaunch, a crashed rank is not
# restarted, and a launcher killed or signalled leaves no process of its job behind. The two-host
# cases (host lost, link cut, SIGSTOP) are tests/multinode/launch.sh.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
for i in $(seq 1 300); do echo "And it came to pass $i that the launcher restarted it."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
echo "localhost slots=2" > hosts
MODEL=(--data data --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 8 --dropout 0.1
       --threads 1 --json)
L=(timeout 200 "$LATTICE" launch --hostfile hosts --mpi-arg=--oversubscribe --no-progress-timeout 60)
NOBATCH=(); skip=0
for a in "${MODEL[@]}"; do  # MODEL without its batch flags
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case $a in --micro-batch|--global-batch) skip=1; continue ;; esac
  NOBATCH+=("$a")
done

usage() {  # usage NAME WANT PATTERN ARGS...
  local name=$1 want=$2 pattern=$3; shift 3
  "$LATTICE" launch "$@" > u.out 2> u.err
  local status=$?
  check "$name: exit $want (got $status)" test "$status" -eq "$want"
  check "$name: one line" test "$(wc -l < u.err)" -eq 1
  check "$name: says why" grep -q -- "$pattern" u.err
}
usage "no --save" 2 "must include --save" --hostfile hosts -- train "${MODEL[@]}" --steps 2
usage "no train command" 2 "usage: lattice launch --hostfile" --hostfile hosts
usage "no hostfile" 2 "hostfile is required" -- train "${MODEL[@]}" --steps 2 --save ck
printf 'a slots=x\n' > bad_hosts
usage "bad hostfile" 1 "bad_hosts:1: slots must be a whole number" --hostfile bad_hosts -- train "${MODEL[@]}" --steps 2 --save ck
printf 'localhost slots=2 slots=3\n' > twice_hosts
usage "a count given twice" 1 "twice_hosts:1: slots is given twice" --hostfile twice_hosts -- train "${MODEL[@]}" --steps 2 --save ck
printf 'localhost slots=1\n127.0.0.1 slots=1\n' > alias_hosts
usage "two names of this machine" 1 "both name this machine" --hostfile alias_hosts -- train "${MODEL[@]}" --steps 2 --save ck
usage "--min-ranks above the slots" 1 "the hostfile's 2 slot(s) are fewer than --min-ranks 5" \
  --hostfile hosts --min-ranks 5 -- train "${MODEL[@]}" --steps 2 --save ck
usage "no such mpirun" 1 "--mpirun /nonexistent/mpirun (or \$MPIEXEC) is not a program this machine can run" \
  --hostfile hosts --mpirun /nonexistent/mpirun -- train "${MODEL[@]}" --steps 2 --save ck
# A host name that is an option of the remote agent (ssh ran "-oProxyCommand=..." as one), and a
# hostfile given twice (the last one won, silently).
printf -- '-oProxyCommand=touch${IFS}pwned slots=1\n' > option_hosts
usage "a host name that is an option" 1 "option_hosts:1: '-oProxyCommand=touch\${IFS}pwned' is not a host name" \
  --hostfile option_hosts -- train "${MODEL[@]}" --steps 2 --save ck
check "a host name that is an option: nothing ran" test ! -e pwned
usage "--hostfile twice" 2 "--hostfile given twice" --hostfile hosts --hostfile alias_hosts -- train "${MODEL[@]}" --steps 2 --save ck
usage "--mpi-arg=-np" 1 "--mpi-arg -np: the launcher sets the ranks and hosts itself" \
  --hostfile hosts --mpi-arg=-np --mpi-arg=1 -- train "${MODEL[@]}" --steps 2 --save ck
check "refused runs wrote nothing" test ! -e ck
# --dump-config among train's flags prints train's settings, as train does, and starts no job (it
# printed them, then called the run unfinished: exit 1).
"$LATTICE" launch --hostfile hosts -- train "${MODEL[@]}" --steps 2 --save ck --dump-config > dump_launch.toml 2> dump.err
check "launch -- train --dump-config: exit 0, nothing on stderr" bash -c "[ $? -eq 0 ] && [ ! -s dump.err ]"
"$LATTICE" train "${MODEL[@]}" --steps 2 --save ck --dump-config > dump_train.toml
check "... train's own dump, byte for byte, and no job ran" bash -c "cmp -s dump_launch.toml dump_train.toml && [ ! -e ck ]"

# The job's own failure (bad input: exit 1) is passed on, not restarted.
"${L[@]}" -- train "${MODEL[@]}" --steps 2 --save ck_bad --lr -1 > bad.out 2> bad.err
status=$?
check "bad input: exit 1, not restarted (got $status)" test "$status" -eq 1 -a "$(grep -c 'restart ' bad.err)" -eq 0
# train's line alone: mpirun's notice of a non-zero exit (about 12 lines) and the launcher's own are left out.
check "bad input: train's one line" bash -c "[ \$(wc -l < bad.err) -eq 1 ] && grep -q '^lattice train: error: --lr' bad.err"
usage "--mpi-arg --map-by node" 1 "--mpi-arg --map-by node: the launcher finds a lost rank's host by the hostfile's slot order" \
  --hostfile hosts --mpi-arg=--map-by --mpi-arg=node -- train "${MODEL[@]}" --steps 2 --save ck
usage "--mpi-arg=--tag-output" 1 "--mpi-arg --tag-output: the launcher reads the job's output line by line" \
  --hostfile hosts --mpi-arg=--tag-output -- train "${MODEL[@]}" --steps 2 --save ck
# The same placement as MCA parameters, on the command line or in the environment (accepted before,
# and a killed rank's healthy neighbour host was then dropped); slot and core stay allowed.
usage "--mpi-arg -mca rmaps_base_mapping_policy node" 1 \
  "--mpi-arg rmaps_base_mapping_policy 'node': slot or core only: the launcher finds a lost rank's host" \
  --hostfile hosts --mpi-arg=-mca --mpi-arg=rmaps_base_mapping_policy --mpi-arg=node -- train "${MODEL[@]}" --steps 2 --save ck
OMPI_MCA_rmaps_base_mapping_policy=node usage "OMPI_MCA_rmaps_base_mapping_policy=node" 1 \
  "OMPI_MCA_rmaps_base_mapping_policy 'node': slot or core only (environment).*unset it" \
  --hostfile hosts -- train "${MODEL[@]}" --steps 2 --save ck
OMPI_MCA_rmaps_ppr_n_pernode=1 usage "OMPI_MCA_rmaps_ppr_n_pernode=1" 1 "OMPI_MCA_rmaps_ppr_n_pernode (environment)" \
  --hostfile hosts -- train "${MODEL[@]}" --steps 2 --save ck
check "refused placements wrote nothing" test ! -e ck

# kill_one NAME FLAGS...: launch a 2-rank run, kill one rank after 12 steps.
kill_one() {
  local name=$1; shift
  "${L[@]}" "$@" -- train "${MODEL[@]}" --steps 300 --save "ck_$name" --save-every 5 --comm-timeout 5 --report-dir "rep_$name" \
    > "$name.jsonl" 2> "$name.err" &
  local pid=$!
  for _ in $(seq 1 300); do [ "$(grep -c '"event":"step"' "$name.jsonl")" -ge 12 ] && break; sleep 0.1; done
  kill -KILL "$(pgrep -f -- "--save ck_$name" | grep -v "^$pid$" | xargs -r ps -o pid=,comm= -p | awk '$2 == "lattice" {print $1}' | tail -1)"
  wait "$pid"
  STATUS=$?
}
kill_one restarted
check "killed rank: the run completes (exit $STATUS)" test "$STATUS" -eq 0
check "killed rank: one restart line" test "$(grep -c '^lattice launch: restart 1 of at most 3 (rank died)' restarted.err)" -eq 1
check "killed rank: a restart event, then steps to 300" \
  bash -c "grep -q '\"event\":\"restart\"' restarted.jsonl && grep '\"event\":\"step\"' restarted.jsonl | tail -1 | grep -q '\"step\":300'"

# The restart in the run log and the report (docs/recovery.md): the launcher's records land whole in
# run.jsonl beside the job's, and report.html has a row naming the layouts, steps redone and seconds lost.
check "killed rank: run.jsonl holds the restart and resumed records, every line JSON" \
  python3 -c "import json; r=[json.loads(l) for l in open('rep_restarted/run.jsonl')]; e=[x.get('event') for x in r]; assert e.count('restart') == 1 and e.count('resumed') == 1, e"
check "killed rank: the report's Restarts section shows the restart" \
  bash -c "grep -q 'Restarts (lattice launch)' rep_restarted/report.html && grep -q 'rank died' rep_restarted/report.html && grep -q 'DP 2 (2 ranks, micro-batch 2) → DP 2 (2 ranks' rep_restarted/report.html"
"$LATTICE" report rep_restarted --html restarted.html 2> report.err
check "killed rank: lattice report draws the restart with its first step after the relaunch" \
  python3 -c "import re; h=open('restarted.html').read(); s=h[h.index('<section id=' + chr(34) + 'restarts'):]; rows=re.findall(r'<tr>(.*?)</tr>', s, re.S); cells=re.findall(r'<td[^>]*>(.*?)</td>', rows[1]); assert len(cells) == 9 and cells[8] != '–', cells"

kill_one stopped --max-restarts 0
check "--max-restarts 0: exit 3 (got $STATUS)" test "$STATUS" -eq 3
check "--max-restarts 0: one stop line naming the checkpoint" \
  grep -qE '^lattice launch: stopping: a rank was lost \(rank died\) after 0 restart\(s\), the limit \(--max-restarts 0\); the checkpoint in ck_stopped holds step [0-9]+$' stopped.err
held=$(grep -oE 'holds step [0-9]+$' stopped.err | grep -oE '[0-9]+$')
check "--max-restarts 0: the checkpoint is intact at step $held" \
  "$LATTICE" eval --checkpoint ck_stopped --data data/val.bin

# kill_at NAME STEPS TRAIN_FLAGS...: a 2-rank run of 300 steps, one rank killed after STEPS steps.
kill_at() {
  local name=$1 steps=$2; shift 2
  local model=("${MODEL[@]}")
  [ -n "${KILL_MODEL+set}" ] && model=("${KILL_MODEL[@]}")
  "${L[@]}" -- train "${model[@]}" --steps 300 --save "ck_$name" --comm-timeout 5 "$@" \
    > "$name.jsonl" 2> "$name.err" &
  local pid=$!
  for _ in $(seq 1 300); do [ "$(grep -c '"event":"step"' "$name.jsonl")" -ge "$steps" ] && break; sleep 0.1; done
  # A rank (a "lattice train" process), never the launcher.
  kill -KILL "$(pgrep -f -- "--save ck_$name" | xargs -r ps -o pid=,comm=,args= -p | awk '$2 == "lattice"' |
                grep -- 'lattice train ' | awk '{print $1}' | tail -1)"
  wait "$pid"
  STATUS=$?
}
# A --save holding an older run's checkpoint: the first job refuses it (train's one line, exit 1, the
# checkpoint as it was); with --overwrite, a restart before the run's first save starts again from step
# 0, not from that older run's checkpoint (another run's weights and schedule).
"$LATTICE" train "${MODEL[@]}" --steps 2 --save ck_stale > /dev/null 2>&1
stale_sum=$(cat ck_stale/* | md5sum)
"${L[@]}" -- train "${MODEL[@]}" --steps 300 --save ck_stale > stale_refused.out 2> stale_refused.err
status=$?
check "an older run's checkpoint in --save: exit 1 (got $status), one line naming it" bash -c \
  "[ $status -eq 1 ] && [ \$(grep -c 'error: --save ck_stale holds the checkpoint of an earlier run (step 2' stale_refused.err) -eq 1 ]"
check "an older run's checkpoint in --save: untouched" test "$(cat ck_stale/* | md5sum)" = "$stale_sum"
kill_at stale 3 --save-every 1000 --report-dir rep_stale --overwrite
check "a restart before the first save: exit 0 (got $STATUS)" test "$STATUS" -eq 0
check "a restart before the first save: from step 0, not the older run's checkpoint" \
  grep -q "^lattice launch: restart 1 .*; from step 0 (no checkpoint saved yet)" stale.err
check "a restart before the first save: the relaunch trains steps 1 to 300" python3 -c "
import json; s = [r['step'] for r in map(json.loads, open('stale.jsonl')) if r.get('event') == 'step']
i = max(k for k in range(len(s)) if s[k] == 1); assert s[i:] == list(range(1, 301)), s"
# Its --report-dir goes on (train refused it as an earlier run's report, and the job was lost): the
# report holds the restart and the relaunch's steps 1 to 300, the first job's superseded.
"$LATTICE" report rep_stale --html stale.html 2> stale_report.err
check "a restart before the first save: the report goes on, restart and all" bash -c \
  "grep -q 'Restarts (lattice launch)' stale.html && [ \$(grep -c 'holds an earlier run' stale.err) -eq 0 ] && python3 -c \"
import json; r = [json.loads(l) for l in open('rep_stale/run.jsonl')]; e = [x.get('event') for x in r]
assert e.count('start') == 2 and e.count('restart') == 1 and r[-1]['event'] == 'summary', e\""
# A run resumed from its own checkpoint without batch flags (they come from it), killed before its first
# save: the restart resumes that checkpoint again, says so, and pins the run's global batch (the launcher
# pinned the defaults' 16 x 2, which train refused as another data order).
"$LATTICE" train "${MODEL[@]}" --steps 2 --save ck_own > /dev/null 2>&1
KILL_MODEL=("${NOBATCH[@]}")
kill_at own 5 --resume ck_own --save-every 1000
unset KILL_MODEL
check "its own --resume, restarted before a save: exit 0 (got $STATUS)" test "$STATUS" -eq 0
check "its own --resume, restarted before a save: the line names it" \
  grep -q "^lattice launch: restart 1 .*; from the run's own --resume ck_own at step 2 (no checkpoint saved yet)" own.err
check "its own --resume, restarted before a save: steps redone counted from its step 2" python3 -c "
import json; d = [json.loads(l) for l in open('own.jsonl')]
i = next(k for k, r in enumerate(d) if r.get('event') == 'restart')
last = max(r['step'] for r in d[:i] if r.get('event') == 'step')
assert d[i]['resume_step'] == 2 and d[i]['steps_redone'] == last - 2, (d[i], last)"

# --init or a layout flag from --config: a restart could not take it out (train refused --init beside
# --resume, and --sequence-parallel without TP, and the job was lost): refused before the first job.
"$LATTICE" train "${MODEL[@]}" --steps 2 --save ck_seed > /dev/null 2>&1
printf 'init = "ck_seed"\n' > init.toml
usage "--init from --config" 1 "--init set by --config init.toml: under launch give it on the command line" \
  --hostfile hosts -- train "${MODEL[@]}" --steps 2 --save ck_cfginit --config init.toml
printf 'tensor-model-parallel-size = 2\nsequence-parallel = true\n' > sp.toml
usage "a layout from --config" 1 "--sequence-parallel set by --config sp.toml: under launch give it on the command line" \
  --hostfile hosts -- train "${MODEL[@]}" --steps 2 --save ck_cfginit --config sp.toml
printf 'schedule = "zb-h1"\n' > zb.toml
usage "a pipeline's schedule from --config" 1 "--schedule set by --config zb.toml" \
  --hostfile hosts -- train "${MODEL[@]}" --pipeline-model-parallel-size 2 --steps 2 --save ck_cfginit --config zb.toml
check "--init or a layout from --config: nothing ran" test ! -e ck_cfginit
# Another model than the checkpoint's is refused by the launcher, before any rank starts (it was one
# lattice line inside the job, then mpirun's pages): for --init as for --resume.
usage "--init of another shape" 1 "lattice launch: error: checkpoint ck_seed holds another model (hidden 64, this run 128)" \
  --hostfile hosts -- train "${MODEL[@]}" --hidden 128 --steps 2 --init ck_seed --save ck_other
usage "--resume of another model" 1 "checkpoint ck_seed holds another model: its hidden 64 where the flags ask for 128" \
  --hostfile hosts -- train "${MODEL[@]}" --hidden 128 --steps 3 --resume ck_seed --save ck_seed
check "another model: nothing ran" test ! -e ck_other

# Fake mpiruns: a lost job with a report directory whose run.jsonl is the user's file (train refuses
# it; the launcher appended its restart records), and a job printing 64 MiB without a newline (the
# launcher held it all, rescanning it at each read: quadratic, 436 MB held for 30 s of output).
mkdir -p fake userdir
# A job whose rank reported itself lost but which mpirun does not end (as when it waits on a host
# that no longer answers), its output still flowing so that --no-progress-timeout never fires: the
# launcher ends it 10 s after the line (kLostJobGraceSeconds) and stops at --max-restarts 0, its fake
# "ranks" gone with it.
cat > fake/held <<'EOF'
#!/bin/sh
echo '{"event":"rank_lost","rank":1,"reason":"peer_timeout"}'
while :; do echo alive; sleep 0.5; done
EOF
chmod +x fake/held
timeout 60 "$LATTICE" launch --hostfile hosts --mpirun fake/held --max-restarts 0 -- train "${MODEL[@]}" --steps 2 --save ck_held \
  > held.out 2> held.err &
HELD_PID=$!  # it idles 10 s: checked at the end, the rest runs meanwhile
printf '#!/bin/sh\nexit 3\n' > fake/lost; chmod +x fake/lost
echo "my notes" > userdir/run.jsonl
"$LATTICE" launch --hostfile hosts --mpirun fake/lost --max-restarts 1 -- train "${MODEL[@]}" --steps 2 --save ck_fake \
  --report-dir userdir > /dev/null 2>&1
check "a user's run.jsonl: untouched by the launcher's records" test "$(cat userdir/run.jsonl)" = "my notes"
printf '#!/bin/sh\nhead -c 67108864 /dev/zero | tr "\\0" x\n' > fake/noline; chmod +x fake/noline
/usr/bin/time -f %M -o noline.rss "$LATTICE" launch --hostfile hosts --mpirun fake/noline --max-restarts 0 -- \
  train "${MODEL[@]}" --steps 2 --save ck_noline > noline.out 2>/dev/null
check "64 MiB without a newline: passed on whole" test "$(wc -c < noline.out)" -eq 67108865
# An "mpirun" that exits 0 without training is not a finished run (it exited 0).
printf '#!/bin/sh\nexit 0\n' > fake/nothing; chmod +x fake/nothing
usage "a job that exits 0 without training" 1 "the job exited 0, but ck_nothing holds no checkpoint, not step 2" \
  --hostfile hosts --mpirun fake/nothing -- train "${MODEL[@]}" --steps 2 --save ck_nothing
# Nor when --save holds an older run's checkpoint at --steps (it counted as this run's).
usage "exits 0 without training, an older run's checkpoint in --save" 1 \
  "the job exited 0, but ck_seed holds no checkpoint of this launch (an older run's), not step 2" \
  --hostfile hosts --mpirun fake/nothing -- train "${MODEL[@]}" --steps 2 --save ck_seed
# The batch in --config is taken (every relaunch gives it again on the command line, which wins): the
# job runs (here the fake one, whose exit 0 without training is the line below).
printf 'micro-batch = 2\nglobal-batch = 8\ntensor-model-parallel-size = 1\n' > batch.toml
usage "the batch and sizes from --config: taken" 1 "the job exited 0, but ck_batchcfg holds no checkpoint, not step 2" \
  --hostfile hosts --mpirun fake/nothing -- train "${NOBATCH[@]}" --steps 2 --save ck_batchcfg --config batch.toml
# The launcher's own memory (about 15 MiB here) and its 1 MiB line buffer, far below the 64 MiB it held.
check "64 MiB without a newline: the launcher stays below 40 MiB (max RSS $(cat noline.rss) KiB)" \
  test "$(tail -1 noline.rss)" -lt 40960

# start_run NAME STEPS FLAGS...: launch a 2-rank run in the background until STEPS steps are out.
start_run() {
  local name=$1 steps=$2; shift 2
  "${L[@]}" "$@" -- train "${MODEL[@]}" --steps 300 --save "ck_$name" --save-every 5 --comm-timeout 5 \
    > "$name.jsonl" 2> "$name.err" &
  RUN_PID=$!
  for _ in $(seq 1 300); do [ "$(grep -c '"event":"step"' "$name.jsonl")" -ge "$steps" ] && break; sleep 0.1; done
}
job_pids() {  # the processes of run NAME: the launcher, mpirun and the ranks (not `timeout`)
  pgrep -f -- "--save ck_$1" | grep -v "^$RUN_PID$" | xargs -r ps -o pid=,comm= -p | awk '$2 != "timeout" {print $1}'
}
pid_of() { job_pids "$1" | xargs -r ps -o pid=,comm=,args= -p | awk -v c="$2" '$2 == c' | grep -- "$3" | awk '{print $1}' | head -1; }
gone_within() {  # gone_within NAME SECONDS: no process of the run is left
  local i; for i in $(seq 1 $(($2 * 10))); do [ -z "$(job_pids "$1")" ] && return 0; sleep 0.1; done
  job_pids "$1" | xargs -r ps -o pid=,stat=,args= -p; return 1
}

# mpirun stopped (SIGSTOP): the no-progress timeout ends it; its ranks, in process groups of their
# own, must end too, or they train on and hold --save's lock against the relaunch.
L=(timeout 200 "$LATTICE" launch --hostfile hosts --mpi-arg=--oversubscribe --no-progress-timeout 3)
start_run hung 12
kill -STOP "$(pid_of hung mpirun mpirun)"
wait "$RUN_PID"; STATUS=$?
check "mpirun stopped: the run completes after one restart (exit $STATUS)" \
  bash -c "[ $STATUS -eq 0 ] && [ \$(grep -c '^lattice launch: restart 1 of at most 3 (no progress)' hung.err) -eq 1 ]"
check "mpirun stopped: the relaunch found --save free (no rank of the job before left)" \
  test "$(grep -c 'being written by another lattice run' hung.err)" -eq 0
check "mpirun stopped: steps to 300" bash -c "grep '\"event\":\"step\"' hung.jsonl | tail -1 | grep -q '\"step\":300'"
check "mpirun stopped: nothing left running" gone_within hung 5
L=(timeout 200 "$LATTICE" launch --hostfile hosts --mpi-arg=--oversubscribe --no-progress-timeout 60)

# Ctrl-C while mpirun is stopped: the signal stays pending in a stopped process, so the launcher
# continues it and, if it still does not end, kills it: exit 130, not a hang (timeout's 124).
L=(timeout 120 "$LATTICE" launch --hostfile hosts --mpi-arg=--oversubscribe --no-progress-timeout 600)
start_run stopint 8
kill -STOP "$(pid_of stopint mpirun mpirun)"
kill -INT "$(pid_of stopint lattice ' launch ')"
wait "$RUN_PID"; STATUS=$?
check "SIGINT with mpirun stopped: exit 130 (got $STATUS), not restarted" \
  bash -c "[ $STATUS -eq 130 ] && [ \$(grep -c 'restart ' stopint.err) -eq 0 ]"
check "SIGINT with mpirun stopped: nothing left running" gone_within stopint 10
L=(timeout 200 "$LATTICE" launch --hostfile hosts --mpi-arg=--oversubscribe --no-progress-timeout 60)

# A rank's crash (SIGSEGV) is the run's own fault: passed on, never restarted (docs/recovery.md).
start_run crash 8
kill -SEGV "$(pid_of crash lattice 'lattice train ')"
wait "$RUN_PID"; STATUS=$?
check "a rank crashed: exit 139, no restart (got $STATUS)" \
  bash -c "[ $STATUS -eq 139 ] && [ \$(grep -c 'restart ' crash.err) -eq 0 ]"
check "a rank crashed: one line naming the signal" grep -qE '^lattice launch: rank [01] crashed \(signal 11: ' crash.err
check "a rank crashed: stdout stays whole JSON lines" \
  python3 -c "import json; [json.loads(l) for l in open('crash.jsonl')]"

# The launcher killed (SIGKILL: no handler runs): its job must not outlive it.
hostfiles_before=$(ls /tmp/lattice-launch-hosts-* 2>/dev/null | sort)
start_run orphan 8
kill -KILL "$(pid_of orphan lattice ' launch ')"
wait "$RUN_PID" 2>/dev/null
check "launcher killed: mpirun and the ranks end with it" gone_within orphan 15
hostfiles_after=$(ls /tmp/lattice-launch-hosts-* 2>/dev/null | sort)
check "launcher killed: its hostfile is not left in /tmp" \
  test -z "$(comm -13 <(echo "$hostfiles_before") <(echo "$hostfiles_after"))"

# SIGTERM and SIGHUP to the launcher: forwarded, not restarted, 128 + the signal; nothing left.
for sig in TERM HUP; do
  start_run "sig$sig" 8
  kill -$sig "$(pid_of "sig$sig" lattice ' launch ')"
  wait "$RUN_PID"; STATUS=$?
  want=$((128 + $(kill -l $sig)))
  check "SIG$sig to the launcher: exit $want, not restarted (got $STATUS)" \
    bash -c "[ $STATUS -eq $want ] && [ \$(grep -c 'restart ' sig$sig.err) -eq 0 ]"
  check "SIG$sig to the launcher: nothing left running" gone_within "sig$sig" 10
  check "SIG$sig to the launcher: stdout stays whole JSON lines" \
    python3 -c "import json; [json.loads(l) for l in open('sig$sig.jsonl')]"
done

# The held job started above.
wait "$HELD_PID"
STATUS=$?
check "a lost rank's job that mpirun holds: exit 3 (got $STATUS)" test "$STATUS" -eq 3
check "a lost rank's job that mpirun holds: ended by the launcher, naming the rank" \
  grep -qE '^lattice launch: rank 1 reported itself lost 1[0-9] s ago and mpirun has not ended the job' held.err
check "a lost rank's job that mpirun holds: not by the no-progress timeout" bash -c '! grep -q "no output from the job" held.err'
check "a lost rank's job that mpirun holds: nothing of it left" bash -c '! pgrep -f "fake/hel[d]" > /dev/null'
echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
