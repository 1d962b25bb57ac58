# Two "hosts" on one machine, for the multinode tests (sourced by bash scripts).
#
# mn_up builds, entirely inside network namespaces (nothing is added to the machine's own network):
#
#   <prefix>-head  bridge br0 10.77.0.1/24, mpirun runs here  ── veth-a ── <prefix>-a  eth0 10.77.0.2
#                                                              ── veth-b ── <prefix>-b  eth0 10.77.0.3
#
# mpirun runs in the head namespace (it needs an address on the bridge to reach its daemons) and
# reads a hostfile of the two hosts' addresses; it starts a daemon on each through agent.sh (its
# plm_rsh_agent, in place of ssh), which runs it under `ip netns exec`. Every byte between the
# hosts crosses the bridge over TCP (btl tcp,self; both OpenMPI TCP stacks limited to the subnet).
# Each namespace also gets its own UTS namespace whose hostname is the namespace's name: OpenMPI
# keys its session directories by hostname, and two daemons sharing the machine's hostname hung
# mpirun's start-up about one time in five here. The subnet exists only inside these namespaces
# (the machine's own network is not touched), so two runs never collide.
#
# <prefix> = lattice-mn-<pid>x<start time of the test script>-<random>. An EXIT trap (also run on
# INT, TERM, HUP) kills every process in the namespaces, deletes them (which deletes the bridge and
# veths with them) and removes the temp dir (OpenMPI's session directories included); a run killed
# with SIGKILL is swept by the next mn_up (its owner is gone). Where namespaces cannot be made (not
# root, no iproute2, no netns/bridge/veth/UTS support), mn_up prints a SKIP line and exits 77
# (CTest SKIP_RETURN_CODE).
#
# After mn_up: MN_PREFIX MN_HEAD MN_A MN_B MN_TMP MN_HOSTFILE MN_ADDR_A MN_ADDR_B, and
#   mn_mpirun SECONDS ARGS...    mpirun in the head namespace (bounded by timeout), foreground
#   mn_mpirun_bg SECONDS ARGS... the same in the background: MN_MPIRUN_PID (wait on it)
#   mn_link a|b down|up          cut or restore a host's cable (its bridge port)
#   mn_link_bytes a|b            "bytes the host sent, bytes it received" on its cable
#   mn_lo_bytes a|b              bytes over the host's loopback (between its own ranks)
#   mn_pids_named NS NAME        pids of processes called NAME inside namespace NS

MN_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MN_SUBNET=10.77.0.0/24
MN_ADDR_HEAD=10.77.0.1
MN_ADDR_A=10.77.0.2
MN_ADDR_B=10.77.0.3
MN_BG_PIDS=()
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks oversubscribe the 2 cores: one thread each, and threads that sleep instead of spinning.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

mn_skip() { echo "SKIP: multinode: $*"; exit 77; }

# mn_owner_token PID: "PIDxSTARTTIME" (the start time tells a reused pid from the owner).
mn_owner_token() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  echo "$1x$(echo "${stat##*)}" | awk '{print $20}')"
}

# True when the run that owns token $1 (PIDxSTARTTIME) is still alive.
mn_owner_alive() { [ "$(mn_owner_token "${1%x*}")" = "$1" ]; }

# Ends every process inside namespace $1 (all of them were started by this harness): TERM, then
# KILL after 3 s.
mn_kill_ns() {
  local ns=$1 pids i
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -z "$pids" ] && return 0
  kill -TERM $pids 2>/dev/null
  for i in $(seq 1 30); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -z "$pids" ] && return 0
    sleep 0.1
  done
  kill -KILL $pids 2>/dev/null
  sleep 0.2
}

mn_delete_ns() { mn_kill_ns "$1"; ip netns del "$1" 2>/dev/null; }

# Removes what runs that died without their trap (SIGKILL) left behind.
mn_sweep_stale() {
  local ns owner d
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^lattice-mn-[0-9]+x[0-9]+-[0-9a-f]+-(head|a|b|probe)$'); do
    owner=$(echo "$ns" | cut -d- -f3)
    mn_owner_alive "$owner" && continue
    echo "multinode: removing namespace $ns left by a run that died (pid ${owner%x*})"
    mn_delete_ns "$ns"
  done
  for d in /tmp/lattice-mn-*x*-*; do
    [ -d "$d" ] || continue
    owner=$(basename "$d" | cut -d- -f3)
    mn_owner_alive "$owner" || rm -rf "$d"
  done
}

mn_cleanup() {
  local status=$? pid ns
  trap - EXIT INT TERM HUP
  for pid in "${MN_BG_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  if [ -n "${MN_PREFIX:-}" ]; then
    for ns in "$MN_HEAD" "$MN_A" "$MN_B" "$MN_PREFIX-probe"; do mn_delete_ns "$ns"; done
    for pid in "${MN_BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    [ -n "${MN_TMP:-}" ] && rm -rf "$MN_TMP"
    if ip netns list 2>/dev/null | grep -q -- "$MN_PREFIX"; then
      echo "multinode: could not remove every namespace of $MN_PREFIX" >&2
      [ "$status" -eq 0 ] && status=1
    fi
  fi
  exit "$status"
}

mn_require() {
  [ "$(id -u)" -eq 0 ] || mn_skip "creating network namespaces needs root (running as uid $(id -u))"
  local tool
  for tool in ip unshare timeout; do
    command -v "$tool" >/dev/null 2>&1 || mn_skip "'$tool' is not installed (scripts/install-deps.sh installs iproute2)"
  done
  ip netns list >/dev/null 2>&1 || mn_skip "this iproute2 has no 'ip netns'"
  local probe=$MN_PREFIX-probe err
  if ! err=$(ip netns add "$probe" 2>&1); then
    mn_skip "cannot create a network namespace here: $err"
  fi
  if ! err=$( { ip -n "$probe" link add br0 type bridge && ip -n "$probe" link add v0 type veth peer name v1 &&
                ip netns exec "$probe" unshare --uts true; } 2>&1); then
    mn_delete_ns "$probe"
    mn_skip "namespaces lack bridge, veth or UTS support: $err"
  fi
  mn_delete_ns "$probe"
  command -v "${MPIEXEC:-mpirun}" >/dev/null 2>&1 || mn_skip "no mpirun (${MPIEXEC:-mpirun})"
}

mn_build() {
  local ns host addr
  for ns in "$MN_HEAD" "$MN_A" "$MN_B"; do
    ip netns add "$ns" && ip -n "$ns" link set lo up || return 1
  done
  ip -n "$MN_HEAD" link add br0 type bridge &&
  ip -n "$MN_HEAD" addr add "$MN_ADDR_HEAD/24" dev br0 &&
  ip -n "$MN_HEAD" link set br0 up || return 1
  for host in a b; do
    if [ $host = a ]; then ns=$MN_A; addr=$MN_ADDR_A; else ns=$MN_B; addr=$MN_ADDR_B; fi
    ip -n "$MN_HEAD" link add "veth-$host" type veth peer name eth0 netns "$ns" &&
    ip -n "$MN_HEAD" link set "veth-$host" master br0 &&
    ip -n "$MN_HEAD" link set "veth-$host" up &&
    ip -n "$ns" addr add "$addr/24" dev eth0 &&
    ip -n "$ns" link set eth0 up || return 1
  done
}

mn_up() {
  MN_PREFIX=lattice-mn-$(mn_owner_token $$)-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  MN_HEAD=$MN_PREFIX-head
  MN_A=$MN_PREFIX-a
  MN_B=$MN_PREFIX-b
  trap mn_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  mn_require
  mn_sweep_stale
  MN_TMP=$(mktemp -d "/tmp/$MN_PREFIX.XXXXXX")
  mn_build >&2 || { echo "multinode: could not build the namespaces" >&2; exit 1; }
  MN_HOSTFILE=$MN_TMP/hostfile
  printf '%s slots=2\n%s slots=2\n' "$MN_ADDR_A" "$MN_ADDR_B" > "$MN_HOSTFILE"
  printf '%s %s\n%s %s\n' "$MN_ADDR_A" "$MN_A" "$MN_ADDR_B" "$MN_B" > "$MN_TMP/hosts.map"
  export MN_PREFIX MN_HEAD MN_A MN_B MN_TMP MN_HOSTFILE MN_ADDR_A MN_ADDR_B
}

# The mpirun command line, run inside the head namespace under its own hostname. OpenMPI's session
# directories go to MN_TMP (TMPDIR reaches the daemons: agent.sh inherits mpirun's environment).
mn_mpirun_cmd() {
  MN_CMD=(ip netns exec "$MN_HEAD" unshare --uts
          sh -c 'hostname "$0" && exec "$@"' "$MN_HEAD"
          env TMPDIR="$MN_TMP"
          "${MPIEXEC:-mpirun}" --hostfile "$MN_HOSTFILE" --bind-to none
          --mca plm_rsh_agent "$MN_DIR/agent.sh $MN_TMP/hosts.map" --mca plm_rsh_no_tree_spawn 1
          --mca btl tcp,self --mca oob_tcp_if_include "$MN_SUBNET" --mca btl_tcp_if_include "$MN_SUBNET"
          "$@")
}

mn_mpirun() {  # mn_mpirun SECONDS ARGS...: foreground (but interruptible), returns mpirun's status
  mn_mpirun_bg "$@"
  wait "$MN_MPIRUN_PID"
}

mn_mpirun_bg() {  # mn_mpirun_bg SECONDS ARGS...: sets MN_MPIRUN_PID (the bounding timeout's pid)
  local seconds=$1; shift
  mn_mpirun_cmd "$@"
  timeout -k 5 "$seconds" "${MN_CMD[@]}" &
  MN_MPIRUN_PID=$!
  MN_BG_PIDS+=("$MN_MPIRUN_PID")
}

mn_link() {  # mn_link a|b down|up
  ip -n "$MN_HEAD" link set "veth-$1" "$2"
}

mn_link_bytes() {  # mn_link_bytes a|b: bytes the host sent and received on its cable
  local f=/sys/class/net/veth-$1/statistics
  # Seen from the bridge port: what the port received is what the host sent.
  ip netns exec "$MN_HEAD" sh -c "echo \$(cat $f/rx_bytes) \$(cat $f/tx_bytes)"
}

mn_lo_bytes() {  # mn_lo_bytes a|b: bytes over the host's loopback (traffic between its own ranks)
  local ns=$MN_A; [ "$1" = b ] && ns=$MN_B
  ip netns exec "$ns" cat /sys/class/net/lo/statistics/tx_bytes
}

mn_pids_named() {  # mn_pids_named NS NAME
  local pid
  for pid in $(ip netns pids "$1" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
  done
}
