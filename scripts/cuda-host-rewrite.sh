#!/usr/bin/env bash
# One file of src/cuda rewritten for the host simulation (scripts/cuda-host-common.sh): the build's
# rule for each file (tests/host_sim/host_sim.cmake), so that a changed kernel recompiles alone.
#   scripts/cuda-host-rewrite.sh ROOT DEST NAME    writes DEST/cuda/NAME from ROOT/src/cuda/NAME
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: scripts/cuda-host-rewrite.sh ROOT DEST NAME" >&2; exit 2; }
. "$(dirname "$0")/cuda-host-common.sh"
cuda_host_rewrite_file "$1" "$2" "$3"
