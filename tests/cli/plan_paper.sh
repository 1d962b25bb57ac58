#!/usr/bin/env bash
# lattice plan --paper --svg DIR: every table, two SVG figures, Table 5 within the issue's bounds.
set -euo pipefail
LATTICE=$1; SCRATCH=$2
mkdir -p "$SCRATCH"

"$LATTICE" plan --paper --svg "$SCRATCH/figs" > "$SCRATCH/paper.txt"
for t in "Table 2" "Figure 1" "Figure 7" "Table 4" "Table 5"; do grep -q "$t" "$SCRATCH/paper.txt"; done
for f in figure1 figure7; do
  head -c 4 "$SCRATCH/figs/$f.svg" | grep -q "<svg"
  grep -q "</svg>" "$SCRATCH/figs/$f.svg"
done
python3 -c "import xml.dom.minidom,sys; [xml.dom.minidom.parse(f) for f in sys.argv[1:]]" \
  "$SCRATCH/figs/figure1.svg" "$SCRATCH/figs/figure7.svg"

"$LATTICE" plan --paper --json > "$SCRATCH/paper.json"
python3 - "$SCRATCH/paper.json" <<'PY'
import json, sys
j = json.loads(open(sys.argv[1]).read())
paper = {"22B": (41.5, 43.7), "175B": (51.4, 52.8), "530B": (56.0, 57.0), "1T": (56.3, 57.0)}
for r in j["table5"]:
    mfu, hfu = paper[r["model"]]
    assert abs(100 * r["mfu"] - mfu) <= 0.2 and abs(100 * r["hfu"] - hfu) <= 0.2, r
    assert abs(r["predicted_full_recompute_s"] / r["paper_full_recompute_s"] - 1) <= 0.15, r
    assert abs(r["predicted_this_work_s"] / r["paper_this_work_s"] - 1) <= 0.15, r
    assert abs(r["predicted_speedup"] - r["paper_speedup"]) <= 0.05, r
PY
echo ok
