#!/usr/bin/env bash
# lattice plan --search: the 1T model on 3072 GPUs answers (quickly) with fitting layouts.
set -euo pipefail
LATTICE=$1; SCRATCH=$2
mkdir -p "$SCRATCH"

"$LATTICE" plan --search --layers 128 --hidden 25600 --heads 160 --seq-len 2048 --vocab 51200 \
  --gpus 3072 --global-batch 3072 --gpu-memory 80GB --top 5 --json > "$SCRATCH/search.json"
test "$(wc -l < "$SCRATCH/search.json")" -eq 1
python3 - "$SCRATCH/search.json" <<'PY'
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["event"] == "plan_search"
c = j["candidates"]
assert len(c) == 5 and j["layouts_considered"] > 1000
times = [x["predicted_iteration_s"] for x in c]
assert times == sorted(times)
for x in c:
    l = x["layout"]
    assert x["fits"] and x["total_bytes"] <= 80e9
    # c > 1 with a pipeline is among the fastest here (t 4 × c 2 × p 32): GPUs = t·c·p·DP.
    assert l["tp"] * l["cp"] * l["pp"] * l["dp"] == 3072 and l["tp"] <= 8 and 160 % l["tp"] == 0
    assert (160 // l["tp"]) % l["cp"] == 0 and 2048 % (2 * l["cp"]) == 0
    assert 128 % (l["pp"] * l["virtual_stages"]) == 0
    assert 0 < x["mfu"] < 1
PY

"$LATTICE" plan --search --layers 128 --hidden 25600 --heads 160 --seq-len 2048 --vocab 51200 \
  --gpus 3072 --global-batch 3072 > "$SCRATCH/search.txt"
grep -q "fastest first" "$SCRATCH/search.txt"
grep -q "^1 " "$SCRATCH/search.txt"
echo ok
