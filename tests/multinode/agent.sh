#!/bin/sh
# OpenMPI's plm_rsh_agent for the multinode tests (see netns.sh): mpirun calls it as it would call
# ssh, `agent.sh MAPFILE [ssh options] HOST COMMAND...`; it runs COMMAND (an orted launch line, quoted
# for a remote shell) inside HOST's network namespace, in a UTS namespace whose hostname is the
# namespace's name (`lattice launch` probes hosts the same way, with COMMAND `true`). MAPFILE lines: "ADDRESS NAMESPACE".
map=$1; shift
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
ns=$(awk -v h="$host" '$1 == h { print $2 }' "$map")
if [ -z "$ns" ]; then
  echo "multinode agent: no namespace for host '$host' in $map" >&2
  exit 1
fi
# As ssh would, fail for a host that cannot be reached from here (mpirun's namespace): a TCP connect to
# it must be answered, accepted or refused, within 2 s (a cut cable answers nothing).
reach=$(timeout 2 bash -c "exec 3<>/dev/tcp/$host/9" 2>&1)
status=$?
if [ "$status" -ne 0 ] && ! printf '%s' "$reach" | grep -q refused; then
  echo "multinode agent: host '$host' does not answer" >&2
  exit 255
fi
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
