#!/usr/bin/env bash
# Installs every dependency lattice needs from Debian's packages. Idempotent: a machine that
# already has them all does nothing (no apt-get update, no network).
#
#   scripts/install-deps.sh           the CPU build's packages (below)
#   scripts/install-deps.sh --cuda    those, and the CUDA fallback toolchain (issue 33, docs/gpu.md
#                                     "Toolchains"): Debian 12's nvidia-cuda-toolkit (nvcc 11.8 at
#                                     /usr/bin/nvcc, cuBLAS/cuBLASLt 11, targets sm_90) and g++-11,
#                                     the newest host compiler nvcc 11.8 accepts (g++ 12 it refuses).
#
# --cuda is for a machine with no nvcc at all: it does not touch a CUDA already at /usr/local/cuda
# (CUDA 13 here; the build and .ci/run prefer that one), and it is large (about 5 GB installed).
# nvidia-cuda-toolkit is in Debian's contrib and non-free components: --cuda adds those two
# components for the Debian mirror this machine already uses (read from /etc/apt/sources.list and
# /etc/apt/sources.list.d/*, the suites <codename> and <codename>-updates), as one file of its own,
# /etc/apt/sources.list.d/lattice-contrib-non-free.sources; no other mirror is added, and nothing is
# changed when the packages are there already or the mirror already has the components.
set -euo pipefail
CUDA=0
for a in "$@"; do
  case "$a" in
    --cuda) CUDA=1 ;;
    *) echo "usage: scripts/install-deps.sh [--cuda]" >&2; exit 2 ;;
  esac
done
PKGS=(build-essential cmake pkg-config libdnnl-dev libopenblas-dev libomp-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
      openmpi-bin libopenmpi-dev bible-kjv iproute2 clang libclang-rt-14-dev lld libblis-dev
      libsentencepiece-dev chromium)
# chromium (headless) is the browser the report test renders the HTML run report in.
# python3-torch is the independent reference (tests/reference); optional for the build itself.
if [ "${LATTICE_NO_TORCH:-0}" != "1" ]; then PKGS+=(python3-torch python3-numpy); fi
CUDA_PKGS=(nvidia-cuda-toolkit g++-11)
[ "$CUDA" = 1 ] && PKGS+=("${CUDA_PKGS[@]}")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

# --cuda: contrib and non-free for the Debian mirror already configured (only when a CUDA package is
# missing). Prints "URI<TAB>COMPONENTS<TAB>SIGNED-BY" for each enabled deb source of suite $1.
debian_sources() {
  local suite=$1 f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # One-line format: deb [options] URI SUITE COMPONENT...
    awk -v s="$suite" '$1 == "deb" {
        i = 2; opts = ""
        if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) { opts = opts " " $i; i++ } opts = opts " " $i; i++ }
        if ($(i + 1) != s) next
        comps = ""; for (j = i + 2; j <= NF; j++) comps = comps " " $j
        sb = ""; if (match(opts, /signed-by=[^] ]+/)) sb = substr(opts, RSTART + 10, RLENGTH - 10)
        printf "%s\t%s\t%s\n", $i, comps, sb }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: stanzas separated by blank lines; fields Types, URIs, Suites, Components, Signed-By.
    awk -v s="$suite" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && enabled !~ /^[Nn]o/ && (" " suites " ") ~ (" " s " "))
          { n = split(uris, u, " "); for (k = 1; k <= n; k++) printf "%s\t%s\t%s\n", u[k], comps, sb }
        types = uris = suites = comps = sb = enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
        if (key == "types") types = val; else if (key == "uris") uris = val
        else if (key == "suites") suites = val; else if (key == "components") comps = val
        else if (key == "signed-by") sb = val; else if (key == "enabled") enabled = val }
      END { flush() }' "$f"
  done
}
need_cuda=0
for p in "${missing[@]}"; do case "$p" in nvidia-cuda-toolkit | g++-11) need_cuda=1 ;; esac; done
if [ "$need_cuda" = 1 ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || { echo "install-deps: --cuda: no VERSION_CODENAME in /etc/os-release" >&2; exit 1; }
  line=$(debian_sources "$codename" | head -1)
  if [ -z "$line" ]; then
    echo "install-deps: --cuda: no Debian mirror for suite $codename in /etc/apt/sources.list{,.d/*}" >&2
    exit 1
  fi
  IFS=$'\t' read -r uri comps signed_by <<<"$line"
  have_all=1
  for c in contrib non-free; do [[ " $comps " == *" $c "* ]] || have_all=0; done
  list=/etc/apt/sources.list.d/lattice-contrib-non-free.sources
  if [ "$have_all" = 0 ] && [ ! -f "$list" ]; then
    echo "install-deps: adding contrib non-free of $uri ($codename, $codename-updates) in $list" >&2
    {
      echo "# Added by lattice's scripts/install-deps.sh --cuda: nvidia-cuda-toolkit (issue 33)."
      echo "Types: deb"
      echo "URIs: $uri"
      echo "Suites: $codename $codename-updates"
      echo "Components: contrib non-free"
      [ -n "$signed_by" ] && echo "Signed-By: $signed_by"
    } | $SUDO tee "$list" >/dev/null
  fi
fi

echo "install-deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
