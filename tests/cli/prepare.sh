#!/usr/bin/env bash
# `lattice prepare`: a small corpus becomes train.bin/val.bin in llm.c's format; bad inputs end
# with exit 1 or 2, one stderr line, and no output files.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1

failures=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
int32_at() { od -An -t d4 -j "$2" -N 4 "$1" | tr -d ' '; }
lines() { wc -l < "$1" | tr -d ' '; }

# A 2,000-byte corpus: 1,800 train tokens, 200 val tokens.
for i in $(seq 1 100); do printf 'line %04d: abcdefgh\n' "$i"; done > corpus.txt
check "corpus is 2000 bytes" test "$(stat -c %s corpus.txt)" -eq 2000

"$LATTICE" prepare --input corpus.txt --out data 2> ok.err
check "prepare succeeds" test $? -eq 0
check "one summary line" test "$(lines ok.err)" -eq 1
check "summary counts tokens" grep -q "prepared data: bytes tokenizer, vocab 256; train.bin 1,800 tokens, val.bin 200 tokens" ok.err
check "train.bin size" test "$(stat -c %s data/train.bin)" -eq $((1024 + 2 * 1800))
check "val.bin size" test "$(stat -c %s data/val.bin)" -eq $((1024 + 2 * 200))
check "magic" test "$(int32_at data/train.bin 0)" = 20240520
check "version" test "$(int32_at data/train.bin 4)" = 1
check "train count" test "$(int32_at data/train.bin 8)" = 1800
check "val count" test "$(int32_at data/val.bin 8)" = 200
# The first token is the corpus's first byte: 'l' = 108 as uint16.
check "first token is the first byte" test "$(od -An -t u2 -j 1024 -N 2 data/train.bin | tr -d ' ')" = 108
numbers() { tr -s ' \n' '\n\n' | grep -v '^$'; }
check "val.bin holds the last 10%" \
  test "$(od -An -v -t u2 -j 1024 data/val.bin | numbers)" = "$(tail -c 200 corpus.txt | od -An -v -t u1 | numbers)"
check "no temporary files" test -z "$(ls data | grep -v -e '^train.bin$' -e '^val.bin$' -e '^tokenizer.json$' -e '^data.json$')"
check "data.json counts tokens and bytes" grep -q '"bytes": 1800' data/data.json

# Bad inputs: status 1 or 2, exactly one stderr line naming the cause, no output directory.
expect_error() {  # expect_error NAME PATTERN ARGS...
  local name=$1 pattern=$2; shift 2
  "$LATTICE" prepare "$@" > "$name.out" 2> "$name.err"
  local status=$?
  check "$name: exit 1 or 2 (got $status)" test "$status" -eq 1 -o "$status" -eq 2
  check "$name: one stderr line" test "$(lines "$name.err")" -eq 1
  check "$name: message names the cause" grep -q -- "$pattern" "$name.err"
  check "$name: starts with 'lattice prepare: error:'" grep -q "^lattice prepare: error: " "$name.err"
}
: > empty.txt
printf '0123456789' > tiny.txt
expect_error missing "missing.txt does not exist" --input missing.txt --out bad1
expect_error empty "empty.txt is empty" --input empty.txt --out bad2
expect_error tiny "too small" --input tiny.txt --out bad3
expect_error unknown_flag "--bogus" --input corpus.txt --out bad4 --bogus
expect_error no_input "input" --out bad5
for d in bad1 bad2 bad3 bad4 bad5; do check "no output for $d" test ! -e "$d"; done

"$LATTICE" prepare --help > help.out 2> help.err
check "--help exits 0" test $? -eq 0
check "--help lists --input" grep -q -- "--input" help.out

echo "$failures failure(s)"
test "$failures" -eq 0
