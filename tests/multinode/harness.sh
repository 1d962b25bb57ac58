#!/usr/bin/env bash
# The two-host harness itself (netns.sh, through up.sh): it is skipped with a SKIP line and exit 77
# where namespaces cannot be made (not root; no `ip netns`); it removes every namespace (and with
# them the bridge and veths), process and temp dir it made when its command fails, when it is
# interrupted (INT, TERM), and, at the next run, when it was killed outright (SIGKILL); two runs at
# once get distinct names.
# Usage: harness.sh MPIEXEC SCRATCH     (exit 77: namespaces unavailable, skipped)
set -u
export MPIEXEC=$1
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
UP=$HERE/up.sh
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/../cli/lib/check.sh"

bash "$UP" true > first.out 2>&1
status=$?
if [ "$status" -eq 77 ]; then cat first.out; exit 77; fi
check "up.sh builds and removes the network (status $status)" test "$status" -eq 0
[ "$status" -eq 0 ] || cat first.out

leftovers() {  # leftovers PREFIX: what of run PREFIX still exists
  ip netns list | awk '{print $1}' | grep -F -- "$1"
  ls -d /tmp/"$1".* 2>/dev/null
}
wait_for() {  # wait_for FILE: up to 10 s
  local i
  for i in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}
ended() { [ -n "$1" ] && ! kill -0 "$1" 2>/dev/null; }
wait_gone() {  # wait_gone PID: up to 15 s
  local i
  for i in $(seq 1 150); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

# Skipped, not failed, without root or without `ip netns`.
if command -v setpriv > /dev/null; then
  setpriv --reuid=65534 --regid=65534 --clear-groups bash "$UP" true > nobody.out 2>&1
  status=$?
  check "not root: exit 77 (got $status) with a SKIP line" test "$status" -eq 77
  check "not root: the SKIP line says why" grep -q "^SKIP: multinode: .*needs root" nobody.out
else
  echo "note: no setpriv, the not-root case is not exercised"
fi
mkdir -p fakebin
printf '#!/bin/sh\necho "Object \\"netns\\" is unknown, try \\"ip help\\"." >&2\nexit 255\n' > fakebin/ip
chmod +x fakebin/ip
PATH=$PWD/fakebin:$PATH bash "$UP" true > nonetns.out 2>&1
status=$?
check "no 'ip netns': exit 77 (got $status) with a SKIP line" test "$status" -eq 77
check "no 'ip netns': the SKIP line says why" grep -q "^SKIP: multinode: .*ip netns" nonetns.out

# The command fails: everything removed, its status kept.
bash "$UP" sh -c 'echo "$MN_PREFIX" > failing.prefix; ip netns list > failing.during; exit 3' > failing.out 2>&1
status=$?
prefix=$(cat failing.prefix 2>/dev/null)
check "failing command: status 3 kept (got $status)" test "$status" -eq 3
check "failing command: its namespaces existed during the run" test "$(grep -c -- "$prefix" failing.during)" -eq 3
check "failing command: nothing left ($(leftovers "$prefix" | tr '\n' ' '))" test -n "$prefix" -a -z "$(leftovers "$prefix")"

# Interrupted (INT as from Ctrl-C, TERM as from a CI runner): everything removed, the command ended.
set -m  # background jobs keep SIGINT (a shell without job control starts them with it ignored)
for sig in INT TERM; do
  if [ "$sig" = INT ]; then want=130; else want=143; fi
  rm -f "$sig.info"
  bash "$UP" sh -c "echo \"\$MN_PREFIX \$\$\" > $sig.info; exec sleep 60" > "$sig.out" 2>&1 &
  pid=$!
  wait_for "$sig.info"
  read -r prefix child < "$sig.info"
  check "$sig: namespaces up before the signal" test "$(ip netns list | grep -c -- "$prefix")" -eq 3
  kill -"$sig" "$pid"
  wait_gone "$pid"
  wait "$pid"
  status=$?
  check "$sig: harness exits $want (got $status)" test "$status" -eq "$want"
  check "$sig: nothing left ($(leftovers "$prefix" | tr '\n' ' '))" test -n "$prefix" -a -z "$(leftovers "$prefix")"
  check "$sig: the command was ended" ended "$child"
done

# Killed outright (SIGKILL, no trap runs): the next run removes what it left.
rm -f KILL.info
bash "$UP" sh -c 'echo "$MN_PREFIX $$" > KILL.info; exec sleep 60' > KILL.out 2>&1 &
pid=$!
wait_for KILL.info
read -r prefix child < KILL.info
kill -KILL "$pid"
wait "$pid" 2>/dev/null
kill -TERM "$child" 2>/dev/null  # the orphaned command (no trap ended it)
check "SIGKILL: the namespaces outlive the killed run" test "$(ip netns list | grep -c -- "$prefix")" -eq 3
bash "$UP" true > sweep.out 2>&1
check "SIGKILL: the next run removes them (exit $?)" test -n "$prefix" -a -z "$(leftovers "$prefix")"
check "SIGKILL: and says so" grep -q "removing namespace $prefix-head left by a run that died" sweep.out
set +m

# Two runs at once: distinct names, both succeed, each removes only its own.
bash "$UP" sh -c 'echo "$MN_PREFIX" > one.prefix; sleep 2' > one.out 2>&1 &
p1=$!
bash "$UP" sh -c 'echo "$MN_PREFIX" > two.prefix; sleep 2' > two.out 2>&1 &
p2=$!
wait_gone "$p1"; wait "$p1"; s1=$?
wait_gone "$p2"; wait "$p2"; s2=$?
one=$(cat one.prefix 2>/dev/null) two=$(cat two.prefix 2>/dev/null)
check "two runs at once: both exit 0 ($s1, $s2)" test "$s1" -eq 0 -a "$s2" -eq 0
check "two runs at once: distinct names ($one, $two)" test -n "$one" -a -n "$two" -a "$one" != "$two"
check "two runs at once: nothing left" test -z "$(leftovers "$one")$(leftovers "$two")"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ] && [ -z "${MULTINODE_KEEP:-}" ] && rm -rf "$SCRATCH"  # kept on failure
[ "$failures" -eq 0 ]
