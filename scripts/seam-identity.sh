#!/usr/bin/env bash
# The CPU side of the backend seam (docs/design.md §18): this tree's lattice, whose model calls every
# kernel through dev::, against REF's (a commit from before the seam) built on the same machine with
# the same flags: per-step losses and the saved model.safetensors must be equal byte for byte.
#   scripts/seam-identity.sh [REF]      (REF default: 7c84524, main just before the seam)
# Builds REF's lattice target in a temporary worktree (a few minutes; ccache helps), runs one rank
# (fp32, bf16 activations, fused attention, selective recompute with bf16 weights) and TP 2 + SP under
# mpirun, dropout on, and prints one line per case. Exit 1 if any differs. Not part of scripts/test.sh:
# building a second tree would double the suite's build time.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REF=${1:-7c84524}
NEW=${LATTICE:-$ROOT/build/lattice}
[ -x "$NEW" ] || { echo "seam-identity: no $NEW (run scripts/build.sh first)" >&2; exit 1; }
git -C "$ROOT" cat-file -e "$REF^{commit}" 2>/dev/null || { echo "seam-identity: commit $REF is not in this repository" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/seam-identity.XXXXXX")
trap 'git -C "$ROOT" worktree remove --force "$WORK/ref" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
git -C "$ROOT" worktree add -q --detach "$WORK/ref" "$REF" || exit 1
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
arch=$(sed -n 's/^LATTICE_ARCH:STRING=//p' "$(dirname "$NEW")/CMakeCache.txt" 2>/dev/null)
echo "seam-identity: building $REF's lattice (LATTICE_ARCH=${arch:-default})"
cmake -S "$WORK/ref" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release ${arch:+-DLATTICE_ARCH=$arch} "${launcher[@]}" >/dev/null &&
  cmake --build "$WORK/build" -j"$(nproc)" --target lattice >/dev/null || { echo "seam-identity: $REF does not build" >&2; exit 1; }
OLD=$WORK/build/lattice
cd "$WORK" || exit 1
for i in $(seq 1 300); do echo "the text $i of the book, and it was good and the word $((i * 7)) was there"; done > corpus.txt
"$NEW" prepare --input corpus.txt --out data 2>/dev/null || exit 1
MODEL=(--data data --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 4 --steps 4
       --dropout 0.1 --threads 1 --json)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
same() {  # same NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  for side in old new; do
    local bin=$OLD; [ $side = new ] && bin=$NEW
    if [ "$np" = 1 ]; then "$bin" train "${MODEL[@]}" --save "ck_${name}_$side" "$@" > "${name}_$side.jsonl" 2>/dev/null
    else mpirun --oversubscribe -np "$np" "$bin" train "${MODEL[@]}" --save "ck_${name}_$side" "$@" > "${name}_$side.jsonl" 2>/dev/null
    fi
  done
  local losses; losses=$(grep -c '"event":"step"' "${name}_new.jsonl")
  if [ "$losses" -gt 0 ] && cmp -s "ck_${name}_old/model.safetensors" "ck_${name}_new/model.safetensors" &&
     cmp -s <(grep -o '"loss":[^,]*' "${name}_old.jsonl") <(grep -o '"loss":[^,]*' "${name}_new.jsonl"); then
    echo "same bits: $name ($losses losses and model.safetensors)"
  else
    echo "DIFFER: $name"; status=1
  fi
}
same fp32 1
same bf16_activations 1 --activation-dtype bf16
same fused_attention 1 --attention fused
same selective_bf16_weights 1 --recompute selective --params-dtype bf16
same tp2_sp 2 --tensor-model-parallel-size 2 --sequence-parallel
exit $status
