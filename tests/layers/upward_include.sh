#!/usr/bin/env bash
# An upward #include is rejected twice over: by scripts/check-layers.py (even in a header nothing
# compiles) and by the compiler (a layer's include path holds only the layers below it).
# Usage: upward_include.sh CXX LAYER_INCLUDE_DIR SRC_DIR
set -euo pipefail
CXX=$1 VIEWS=$2 SRC=$3
CHECK="$(dirname "$0")/../../scripts/check-layers.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. The include-graph check: a copy of the tree with one header of `model` including `train`.
cp -r "$SRC" "$tmp/src"
python3 "$CHECK" "$tmp/src" >/dev/null || fail "the unmodified tree should pass"
printf '#pragma once\n#include "train/trainer.hpp"\n' > "$tmp/src/model/upward.hpp"
if python3 "$CHECK" "$tmp/src" 2>"$tmp/err"; then fail "check-layers accepted model -> train"; fi
grep -q "model/upward.hpp:2: includes train/trainer.hpp, but model may not use train (above it)" "$tmp/err" \
  || fail "check-layers did not name the upward include: $(cat "$tmp/err")"
# ... and a layers.txt that lets a low layer use a higher one.
sed -i 's/^tensor: core$/tensor: core model/' "$tmp/src/layers.txt"
rm "$tmp/src/model/upward.hpp"
if python3 "$CHECK" "$tmp/src" 2>"$tmp/err"; then fail "check-layers accepted tensor -> model in layers.txt"; fi
grep -q "tensor may use model, which is not a layer listed above it" "$tmp/err" || fail "layers.txt order not checked"

# 2. The compiler: model's include view has no train/, but has core/.
printf '#include "core/error.hpp"\nint main() { return 0; }\n' > "$tmp/ok.cpp"
"$CXX" -std=c++20 -fsyntax-only -I "$VIEWS/model" "$tmp/ok.cpp" || fail "a downward include did not compile"
printf '#include "train/trainer.hpp"\nint main() { return 0; }\n' > "$tmp/up.cpp"
if "$CXX" -std=c++20 -fsyntax-only -I "$VIEWS/model" "$tmp/up.cpp" 2>"$tmp/err"; then
  fail "an upward include compiled in model's include view"
fi
grep -q "train/trainer.hpp" "$tmp/err" || fail "the compiler failed for another reason: $(head -3 "$tmp/err")"
echo "upward includes rejected by the check and by the compiler"
