#!/usr/bin/env bash
# Builds the two-host network of netns.sh, runs COMMAND (in this machine's own namespace) with
# MN_PREFIX MN_HEAD MN_A MN_B MN_TMP MN_HOSTFILE MN_ADDR_A MN_ADDR_B exported, then removes
# everything. Exits with COMMAND's status (77 when namespaces cannot be made). Example:
#   bash tests/multinode/up.sh sh -c 'ip netns exec $MN_A ip addr'
set -u
MPIEXEC=${MPIEXEC:-mpirun}
. "$(dirname "$0")/netns.sh"
mn_up
"$@" &
MN_BG_PIDS+=($!)
wait $!
