#!/usr/bin/env bash
# The link between two hosts dies mid-run: 4 ranks (TP 2 inside each host, DP 2 across; see
# netns.sh) train with --comm-timeout T; once steps are flowing host b's cable is cut (its bridge
# port brought down). Every lattice rank on both hosts must be gone within T + 30 s, having said why
# in one line (rank R: ... no progress / timed out). OpenMPI 4.1's mpirun waits for the daemon it
# can no longer reach, so the cable is then restored and mpirun must exit non-zero within 40 s.
# Usage: link_cut.sh LATTICE MPIEXEC SCRATCH     (exit 77: namespaces unavailable, skipped)
set -u
LATTICE=$1 MPIEXEC=$2 SCRATCH=$3
COMM_TIMEOUT=${COMM_TIMEOUT:-8}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
LATTICE=$(readlink -f "$LATTICE")
mn_up
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/../cli/lib/check.sh"
echo "hosts: $MN_A ($MN_ADDR_A) and $MN_B ($MN_ADDR_B), mpirun in $MN_HEAD"

for i in $(seq 1 300); do echo "And it came to pass $i that the link held, until it did not."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
MODEL=(--data "$PWD/data" --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 8
       --steps 1000000 --dropout 0.1 --threads 1 --json)

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }  # bash 5: no bc needed
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }     # milliseconds -> "S.d"
lattice_pids() { mn_pids_named "$MN_A" lattice; mn_pids_named "$MN_B" lattice; }
steps_done() { grep -c '"event":"step"' run.jsonl 2>/dev/null; }
show_logs() {
  echo "--- mpirun stderr"; tail -20 run.err
  for f in ranks/rank.*; do [ -e "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done
}

mkdir -p ranks
# Bounds the whole run: 20 s to start, T + 30 s for the ranks, 40 s for mpirun after the restore.
mn_mpirun_bg $((COMM_TIMEOUT + 95)) -np 4 "$HERE/rank_probe.sh" "$PWD/ranks" --stderr-file \
  "$LATTICE" train "${MODEL[@]}" --tensor-model-parallel-size 2 --comm-timeout "$COMM_TIMEOUT" > run.jsonl 2> run.err

# Training must be under way (a few steps done, all 4 ranks alive) before the cut.
for _ in $(seq 1 200); do
  [ "$(steps_done)" -ge 5 ] && break
  kill -0 "$MN_MPIRUN_PID" 2>/dev/null || break
  sleep 0.1
done
check "training under way before the cut ($(steps_done) steps)" test "$(steps_done)" -ge 5
if [ "$(steps_done)" -lt 5 ]; then show_logs; exit 1; fi
check "4 lattice ranks running, 2 per host" \
  test "$(mn_pids_named "$MN_A" lattice | wc -l)" -eq 2 -a "$(mn_pids_named "$MN_B" lattice | wc -l)" -eq 2

mn_link b down
cut=$(now_ms)
before=$(steps_done)
deadline=$(( (COMM_TIMEOUT + 30) * 1000 ))
gone=""
while :; do
  elapsed=$(( $(now_ms) - cut ))
  if [ -z "$(lattice_pids)" ]; then gone=$(secs "$elapsed"); break; fi
  [ "$elapsed" -gt "$deadline" ] && break
  sleep 0.2
done
if [ -n "$gone" ]; then seen="gone after $gone s"; else seen="still running after $(secs "$elapsed") s"; fi
check "every lattice rank gone within --comm-timeout $COMM_TIMEOUT + 30 s of the cut ($seen)" test -n "$gone"
[ -n "$gone" ] || echo "still running: $(lattice_pids | tr '\n' ' ')"
check "training stopped at the cut ($before steps before, $(steps_done) at the end)" test "$(steps_done)" -le $((before + 2))

mn_link b up
restored=$(now_ms)
for _ in $(seq 1 400); do kill -0 "$MN_MPIRUN_PID" 2>/dev/null || break; sleep 0.1; done
wait_s=$(secs $(( $(now_ms) - restored )))
if kill -0 "$MN_MPIRUN_PID" 2>/dev/null; then
  check "mpirun exits within 40 s of the restore (still running after ${wait_s} s)" false
  status=timeout
else
  wait "$MN_MPIRUN_PID"
  status=$?
  # 124/137: our bounding timeout ended mpirun, which is not mpirun exiting on its own.
  check "mpirun exits non-zero after the restore (status $status, ${wait_s} s after the link came back)" \
    test "$status" -ne 0 -a "$status" -ne 124 -a "$status" -ne 137
fi

# The one-line reasons: every rank's stderr (copied on its own host) and mpirun's (which gets host
# b's lines only if its daemon's forwarding survives the cut).
pattern='rank [0-9]+: .*(timed out|no progress)'
cat ranks/rank.*.err run.err 2>/dev/null | grep -E "$pattern" | sort -u > reasons.txt
cat reasons.txt
check "a rank on host a said why it stopped" grep -qE "$pattern" ranks/rank.0.err ranks/rank.1.err
check "a rank on host b said why it stopped" grep -qE "$pattern" ranks/rank.2.err ranks/rank.3.err
check "mpirun's stderr shows a rank's reason" grep -qE "$pattern" run.err
check "each reason is one line naming its rank (at most one per rank)" \
  test "$(grep -oE 'rank [0-9]+:' reasons.txt | sort | uniq -d | wc -l)" -eq 0
[ "$failures" -eq 0 ] || show_logs
echo "cut -> every rank gone: ${gone:-n/a} s (--comm-timeout $COMM_TIMEOUT); restore -> mpirun exit $status: ${wait_s} s"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ] && [ -z "${MULTINODE_KEEP:-}" ] && rm -rf "$SCRATCH"  # kept on failure
[ "$failures" -eq 0 ]
