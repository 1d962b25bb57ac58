#!/usr/bin/env bash
# Configures and builds lattice into build/ (Release). Extra arguments go to cmake's configure,
# e.g. scripts/build.sh -DLATTICE_SANITIZE=ON.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
