#!/usr/bin/env bash
# Installs, builds, prepares the King James Bible (Debian's bible-kjv) with a 4096-piece BPE
# tokenizer, trains the demo model (scripts/demo.toml: about five minutes on 2 cores, thirteen on an
# Intel Xeon without AMX: docs/training.md, "The demo") and prints
# generated text; the run's HTML report is written to reports/demo/report.html as it trains.
# A rerun trains again from scratch, replacing the last demo's checkpoint and report (--overwrite).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
DATA=data/kjv-bpe4096
if [ ! -f "$DATA/tokenizer.model" ]; then
  mkdir -p data
  bible "Gen1:1-Rev22:21" > data/kjv.txt
  build/lattice prepare --input data/kjv.txt --out "$DATA" --tokenizer bpe --vocab-size 4096
fi
STEPS_FLAG=()
[ -n "${STEPS:-}" ] && STEPS_FLAG=(--steps "$STEPS")
build/lattice train --config scripts/demo.toml --data "$DATA" "${STEPS_FLAG[@]}" --save checkpoints/demo --overwrite \
  --eval-every "$(( ${STEPS:-1500} / 3 > 0 ? ${STEPS:-1500} / 3 : 1 ))" --eval-batches 64 --report-dir reports/demo
echo
echo "--- sample (lattice sample --checkpoint checkpoints/demo --prompt 'And God said' --tokens 200) ---"
build/lattice sample --checkpoint checkpoints/demo --prompt "And God said" --tokens 200
echo
echo "--- the run's report (curves, memory by category, traffic): open reports/demo/report.html in a browser ---"
