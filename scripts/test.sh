#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh -DLATTICE_WERROR=ON
# Multi-threaded kernels and several test processes would fight over 2 cores: one test at a time,
# each with the machine's threads.
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 900 "$@"
