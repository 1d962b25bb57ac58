#!/usr/bin/env bash
# `lattice --version` / `lattice version`: the version of CMakeLists.txt's project() and the commit the
# binary was built from (git's short HEAD of this checkout, "-dirty" when the tree differed); the same
# version in a run's start record and in a checkpoint's trainer.json ("lattice_version"), which readers
# ignore: a checkpoint without it (written before it was recorded) still resumes.
set -u
LATTICE=$1
SCRATCH=$2
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$ROOT/tests/cli/lib/check.sh"

"$LATTICE" --version > v.out 2> v.err
check "--version exits 0" test $? -eq 0
check "--version prints one line on stdout, nothing on stderr" test "$(wc -l < v.out)" -eq 1 -a ! -s v.err
LINE=$(cat v.out)
echo "$LINE"
VERSION=$(sed -n 's/^project(lattice VERSION \([0-9.]*\) .*/\1/p' "$ROOT/CMakeLists.txt")
check "CMakeLists.txt names the version" test -n "$VERSION"
check "the line: lattice VERSION (commit C, built DATE, COMPILER)" \
  grep -qE "^lattice ${VERSION//./\\.} \(commit ([0-9a-f]+(-dirty)?|unknown), built [0-9]{4}-[0-9]{2}-[0-9]{2}, .+\)$" v.out
COMMIT=$(sed -n 's/^lattice [^ ]* (commit \([^,]*\),.*/\1/p' v.out)
"$LATTICE" version > v2.out 2>&1
check "lattice version prints the same line" test "$(cat v2.out)" = "$LINE"
"$LATTICE" --help > help.out
check "--help lists version" grep -q "^  version " help.out
expect_error "--version takes no arguments" "takes no arguments" --version extra
"$LATTICE" version --help > vh.out 2>&1
check "lattice version --help: exit 0, its usage (every command prints --help)" \
  test $? -eq 0 -a "$(sed -n 2p vh.out)" = "Usage: lattice version"

if HEAD=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
  check "the commit is this checkout's HEAD ($HEAD; the binary says $COMMIT)" \
    test "$COMMIT" = "$HEAD" -o "$COMMIT" = "$HEAD-dirty"
else
  # "unknown", or what a packager named with -DLATTICE_COMMIT=...
  echo "note: $ROOT is not a git checkout; the commit is $COMMIT"
  check "outside a git checkout the binary still names a commit" test -n "$COMMIT"
fi

# The start record and the checkpoint carry VERSION+COMMIT.
for i in $(seq 1 200); do echo "In the beginning $i the word was with the text, and the text was good."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
SMALL=(--data data --layers 2 --hidden 32 --heads 4 --seq-len 32 --micro-batch 4 --threads 1)
"$LATTICE" train "${SMALL[@]}" --steps 2 --save ck --json > run.jsonl 2> run.err
check "train exits 0" test $? -eq 0
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('lattice_version'))" "$1"; }
head -1 run.jsonl > start.json
check "the start record carries lattice_version $VERSION+$COMMIT" test "$(field start.json)" = "$VERSION+$COMMIT"
check "trainer.json carries lattice_version $VERSION+$COMMIT" test "$(field ck/trainer.json)" = "$VERSION+$COMMIT"

# A checkpoint written before the field existed (and one from another build) resumes. Those manifests
# summed the .safetensors files alone: the edited trainer.json's sum is dropped as theirs never held it.
unsum() { python3 -c "
import json; p='$1/lattice-checkpoint.json'; m=json.load(open(p)); del m['sums']['trainer.json']; open(p,'w').write(json.dumps(m))"; }
cp -r ck old && python3 -c "
import json; p='old/trainer.json'; j=json.load(open(p)); del j['lattice_version']; open(p,'w').write(json.dumps(j, indent=2) + '\n')" && unsum old
"$LATTICE" train "${SMALL[@]}" --steps 3 --resume old --json > old.jsonl 2> old.err
check "a checkpoint without lattice_version resumes" test $? -eq 0
cp -r ck other && python3 -c "
import json; p='other/trainer.json'; j=json.load(open(p)); j['lattice_version']='9.9.9+0000000'; open(p,'w').write(json.dumps(j, indent=2) + '\n')" && unsum other
"$LATTICE" train "${SMALL[@]}" --steps 3 --resume other --json > other.jsonl 2> other.err
check "a checkpoint from another build resumes" test $? -eq 0
check "both resumes give the same loss" test "$(grep '"event":"step"' old.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["loss"])')" = \
  "$(grep '"event":"step"' other.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["loss"])')"
"$LATTICE" eval --checkpoint old --data data/val.bin --batches 1 > /dev/null 2> eval.err
check "eval reads a checkpoint without lattice_version" test $? -eq 0

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
