#!/bin/sh
# The CUDA compiler launcher CMakeLists.txt sets when the first ptxas on PATH is not the chosen nvcc's
# (two CUDA toolkits on one machine): runs the command with nvcc's own directory first on PATH, so
# nvcc runs its own toolkit's ptxas, fatbinary and nvlink.   sh nvcc-path.sh DIR COMMAND [ARG]...
dir=$1
shift
PATH="$dir:$PATH" exec "$@"
