#!/usr/bin/env bash
# Builds, on this machine, the two programs scripts/device-check.sh runs on a lent GPU (the trainer with
# --device cuda, and lattice_cuda_check) for sm_90, into .device-bin/ (git-ignored), so that a short
# lease measures instead of compiling: the two builds took 290 s of the 900 on the H200 (2026-11-27),
# where they take about 4 minutes of this machine's 2 cores. Carry both folders, and point the check at one:
#   run: DEVICE_PREBUILT=.device-bin scripts/device-check.sh ...   carry: [".device-debs", ".device-bin"]
# The programs link Debian 12's libraries, which .device-debs brings (scripts/device-bundle.sh), and the
# lent machine's CUDA 13 runtime and cuBLASLt: build with a CUDA 13 nvcc (docs/gpu.md, "Toolchains").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-device-prebuilt}
DEST=.device-bin
. scripts/cuda-toolchain.sh
nvcc=$(cuda_find_nvcc)
[ -n "$nvcc" ] || { echo "device-prebuild: no nvcc (\$CUDACXX, /usr/local/cuda/bin or PATH)" >&2; exit 1; }
case "$(cuda_nvcc_version "$nvcc")" in
  13.*) ;;
  *) echo "device-prebuild: nvcc $(cuda_nvcc_version "$nvcc") is not CUDA 13, the lent machine's runtime" >&2; exit 1 ;;
esac
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DLATTICE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DLATTICE_BUILD_TESTS=OFF -DLATTICE_WERROR=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target lattice lattice_cuda_check
mkdir -p "$DEST"
for b in lattice lattice_cuda_check; do
  # Written beside, then renamed: a failed copy leaves the last good program, not half of one.
  strip -o "$DEST/$b.tmp" "$BUILD_DIR/$b" && mv -f "$DEST/$b.tmp" "$DEST/$b"
done
echo "built here $(date -u +%Y-%m-%dT%H:%M:%SZ) at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo '+uncommitted'), nvcc $(cuda_nvcc_version "$nvcc"), $(c++ --version | head -1)" >"$DEST/BUILT"
echo "device-prebuild: $(du -sh "$DEST" | cut -f1) in $DEST ($(cat "$DEST/BUILT"))"
