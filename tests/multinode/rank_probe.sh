#!/usr/bin/env bash
# Runs one MPI rank of a multinode test: records where the rank runs, then becomes COMMAND.
# Usage (as mpirun's program): rank_probe.sh DIR [--stderr-file] COMMAND...
# Writes DIR/rank.R = "rank=R netns=NAMESPACE host=HOSTNAME pid=PID" (R = OMPI_COMM_WORLD_RANK).
# With --stderr-file the rank's stderr is also copied to DIR/rank.R.err, written on the rank's own
# host, so it is there even while that host cannot reach mpirun.
dir=$1; shift
rank=${OMPI_COMM_WORLD_RANK:?rank_probe.sh runs under mpirun}
echo "rank=$rank netns=$(ip netns identify $$) host=$(hostname) pid=$$" > "$dir/rank.$rank"
if [ "$1" = "--stderr-file" ]; then
  shift
  exec "$@" 2> >(exec tee -a "$dir/rank.$rank.err" >&2)
fi
exec "$@"
