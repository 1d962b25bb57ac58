#!/usr/bin/env bash
# TP within a host × DP across hosts: 4 ranks on two "hosts" (network namespaces joined by a bridge,
# see netns.sh), tensor-model-parallel size 2 on each host and DP 2 over the link, train the
# one-rank model (dropout on): per-step losses within 1e-7 relative, final weights within 1e-5
# (the corpus and model of tests/cli/lib/layouts.sh).
# The ranks really were on two hosts: each rank records its network namespace and hostname, every
# TP group lies inside one host and every DP group spans both, and the bytes on host b's cable
# cover what its ranks' DP all-reduces sent (their TP traffic went over each host's loopback).
# Usage: layout.sh LATTICE MPIEXEC SCRATCH     (exit 77: namespaces unavailable, skipped)
set -u
LATTICE=$1 MPIEXEC=$2 SCRATCH=$3
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
LATTICE=$(readlink -f "$LATTICE")
mn_up
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/../cli/lib/check.sh"
. "$HERE/../cli/lib/compare.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
echo "hosts: $MN_A ($MN_ADDR_A) and $MN_B ($MN_ADDR_B), mpirun in $MN_HEAD"

for i in $(seq 1 300); do echo "And it came to pass $i that the layouts agreed, every one of them."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
STEPS=4
MODEL=(--data "$PWD/data" --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 8
       --steps $STEPS --dropout 0.1 --threads 1 --json)

"$LATTICE" train "${MODEL[@]}" --save ck_one > one.jsonl 2> one.err
check "one rank: exit 0" test $? -eq 0

mkdir -p ranks
read -r b_sent0 b_recv0 <<< "$(mn_link_bytes b)"
a_lo0=$(mn_lo_bytes a) b_lo0=$(mn_lo_bytes b)
mn_mpirun 90 -np 4 "$HERE/rank_probe.sh" "$PWD/ranks" \
  "$LATTICE" train "${MODEL[@]}" --save "$PWD/ck_tp2dp2" --tensor-model-parallel-size 2 > tp2dp2.jsonl 2> tp2dp2.err
status=$?
read -r b_sent1 b_recv1 <<< "$(mn_link_bytes b)"
a_lo1=$(mn_lo_bytes a) b_lo1=$(mn_lo_bytes b)
echo "loopback bytes: host a $((a_lo1 - a_lo0)), host b $((b_lo1 - b_lo0))"
check "TP 2 x DP 2 over two hosts: exit 0 (got $status)" test "$status" -eq 0
[ "$status" -eq 0 ] || { echo "--- mpirun stderr"; cat tp2dp2.err; }
cat ranks/rank.* 2>/dev/null

"$LATTICE" groups --world 4 --tensor-model-parallel-size 2 --json > groups.json
check "ranks 0-1 on host a, 2-3 on host b; TP groups inside a host, DP groups across both" \
  "$PY" - "$MN_A" "$MN_B" <<'PYEOF'
import json, sys, re
a, b = sys.argv[1], sys.argv[2]
where = {}
for r in range(4):
    try:
        rec = dict(kv.split("=", 1) for kv in open("ranks/rank.%d" % r).read().split())
    except OSError:
        sys.exit("rank %d left no record" % r)
    if rec["netns"] != rec["host"]:
        sys.exit("rank %d: network namespace %s but hostname %s" % (r, rec["netns"], rec["host"]))
    where[r] = rec["netns"]
if [where[r] for r in range(4)] != [a, a, b, b]:
    sys.exit("placement %s, expected ranks 0-1 on %s and 2-3 on %s" % (where, a, b))
g = json.load(open("groups.json"))
for grp in g["tp"]:
    if len({where[r] for r in grp}) != 1: sys.exit("TP group %s spans hosts" % grp)
for grp in g["dp"]:
    if len({where[r] for r in grp}) != 2: sys.exit("DP group %s stays on one host" % grp)
print("placement:", where, "tp", g["tp"], "dp", g["dp"])
PYEOF

# The bound is below one fp32 ulp of the loss (2^-23 relative at ~5.5): it holds by averaging. The
# loss is the mean of 8·32 = 256 token losses; TP's partial sums differ from one rank's in oneDNN's
# last bits, k ulps per token with random signs, so the mean moves ~2^-23·sqrt(k)/16 relative. Taken
# at 6σ with k ≤ 4 (a CPU whose blockings err up to 4 ulps a token; measured k ≈ 1 here, 4e-9 on
# this layout in cli.parallel_layouts), that is 6·2·2^-23/16 = 9e-8: 1e-7. A systematic error (a
# wrong reduction, a token counted twice) moves the mean by ~1e-3 or more.
LOSS_TOL=1e-7 check "per-step losses within 1e-7 relative, final weights within 1e-5 of one rank" compare tp2dp2 one

# Host b's ranks (2, 3) all-reduce gradients with their DP peers on host a (0, 1): at least the DP
# bytes they report (per step, ring accounting) x steps crossed b's cable each way, over TCP. Their
# TP bytes (as many again) stayed on the host, on its loopback (TCP too: btl tcp,self, no shared
# memory), and did not also cross the cable.
check "host b's cable carried its ranks' DP traffic, each host's loopback its ranks' TP traffic" \
  "$PY" - "$((b_sent1 - b_sent0))" "$((b_recv1 - b_recv0))" "$((a_lo1 - a_lo0))" "$((b_lo1 - b_lo0))" "$STEPS" <<'PYEOF'
import json, sys
sent, recv, lo_a, lo_b, steps = map(int, sys.argv[1:])
ranks = [json.loads(l) for l in open("tp2dp2.jsonl") if '"event":"summary"' in l][0]["comm"]["ranks"]
dp = lambda rs: steps * sum(r["dp"] for r in ranks if r["rank"] in rs)
tp = lambda rs: steps * sum(r["tp"] for r in ranks if r["rank"] in rs)
print("host b's cable: %d bytes out, %d in; its ranks' DP %d, TP %d bytes over %d steps"
      % (sent, recv, dp((2, 3)), tp((2, 3)), steps))
print("loopback: host a %d bytes (its ranks' TP %d), host b %d (TP %d)" % (lo_a, tp((0, 1)), lo_b, tp((2, 3))))
ok = dp((2, 3)) > 0 and tp((2, 3)) > 0 and dp((2, 3)) <= min(sent, recv) and max(sent, recv) < dp((2, 3)) + tp((2, 3))
ok = ok and lo_a >= tp((0, 1)) and lo_b >= tp((2, 3))
sys.exit(0 if ok else 1)
PYEOF

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ] && [ -z "${MULTINODE_KEEP:-}" ] && rm -rf "$SCRATCH"  # kept on failure
[ "$failures" -eq 0 ]
