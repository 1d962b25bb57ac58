#!/usr/bin/env bash
# Installs, builds, prepares the King James Bible (Debian's bible-kjv), trains the default model
# for about a minute and prints generated text.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
mkdir -p data
if [ ! -f data/kjv/train.bin ]; then
  bible "Gen1:1-Rev22:21" > data/kjv.txt
  build/lattice prepare --input data/kjv.txt --out data/kjv
fi
build/lattice train --data data/kjv --steps "${STEPS:-600}" --save checkpoints/demo --eval-every 200
echo
echo "--- sample (lattice sample --checkpoint checkpoints/demo --prompt 'And God said' --tokens 300) ---"
build/lattice sample --checkpoint checkpoints/demo --prompt "And God said" --tokens 300
