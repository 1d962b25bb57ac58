#!/usr/bin/env bash
# Installs every dependency lattice needs from Debian's packages. Idempotent: a machine that
# already has them all does nothing (no apt-get update, no network).
set -euo pipefail
PKGS=(build-essential cmake pkg-config libdnnl-dev libopenblas-dev libomp-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
      openmpi-bin libopenmpi-dev bible-kjv iproute2 clang libclang-rt-14-dev lld libblis-dev
      libsentencepiece-dev chromium)
# chromium (headless) is the browser the report test renders the HTML run report in.
# python3-torch is the independent reference (tests/reference); optional for the build itself.
if [ "${LATTICE_NO_TORCH:-0}" != "1" ]; then PKGS+=(python3-torch python3-numpy); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
