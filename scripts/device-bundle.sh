#!/usr/bin/env bash
# Gathers, on this machine (Debian 12, network to its mirror), the Debian packages the whole lattice
# build needs on the GPU machine, which has nvcc, cuBLAS, CMake and a C++ compiler but none of Debian's
# libraries and no network: oneDNN, OpenMPI (and the libraries it loads), SentencePiece, CLI11,
# nlohmann-json. They go into .device-debs/ (git-ignored, about 20 MB), which a device call carries
# (`carry: [".device-debs"]`); scripts/device-check.sh's build phase unpacks them into a prefix with
# dpkg-deb -x (or ar + tar) and builds against it. It also prepares, with this machine's lattice
# (build/lattice, or $LATTICE), the speed phase's data: GPT-2's vocabulary size (50304) needs a BPE
# tokenizer trained on a corpus of enough distinct words, two minutes of one core here, into
# .device-debs/gpt2-data (2.5 MB). docs/gpu.md, "Running the device check".
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.device-debs
PKGS=(libdnnl2 libdnnl-dev
      libopenmpi3 libopenmpi-dev openmpi-common openmpi-bin libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
      libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200
      libmunge2 libnuma1 libltdl7 libudev1
      libsentencepiece0 libsentencepiece-dev libprotobuf-lite32
      libcli11-dev nlohmann-json3-dev)
mkdir -p "$DEST"
cd "$DEST"
missing=()
for p in "${PKGS[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  # From the apt cache when the machine installed them already, else downloaded.
  for p in "${missing[@]}"; do
    f=$(ls /var/cache/apt/archives/"${p}"_*.deb 2>/dev/null | head -1 || true)
    if [ -n "$f" ]; then cp "$f" .; else apt-get download "$p" >/dev/null || { echo "device-bundle: cannot get $p" >&2; exit 1; }; fi
  done
fi
if [ ! -f gpt2-data/train.bin ]; then
  LATTICE=${LATTICE:-$(cd .. && pwd)/build/lattice}
  [ -x "$LATTICE" ] || { echo "device-bundle: no $LATTICE to prepare the speed data (scripts/build.sh, or LATTICE=...)" >&2; exit 1; }
  python3 - <<'PY'
import random
random.seed(1)  # the same corpus every time: 120,000 random words, 400,000 of them drawn
words = [''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(random.randint(3, 9))) for _ in range(120000)]
out = []
for i in range(400000):
    out.append(random.choice(words))
    if i % 12 == 11:
        out.append('.\n')
open('gpt2-corpus.txt', 'w').write(' '.join(out))
PY
  "$LATTICE" prepare --input gpt2-corpus.txt --out gpt2-data --tokenizer bpe --vocab-size 50304 >/dev/null
  rm -f gpt2-corpus.txt
fi
echo "device-bundle: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $DEST (carry it: \"carry\": [\"$DEST\"])"
