#!/usr/bin/env bash
# Hostile pass harness (issue 32, second pass). Usage: hostile.sh LATTICE LOG [SECTION...]
# Each case: H NAME EXPECT 'command'   (EXPECT: fail | ok | any), run with bash -c in its own dir
# under $W/cN; fixtures in $F are the "user's files" and fingerprinted around every case.
set -u
HERE=$(cd "$(dirname "$0")" && pwd); L=$(realpath "$1"); LOG=$2; shift 2
SECTIONS="${*:-all}"
export L
export F=/tmp/hfix W=${HW:-/tmp/hwork}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
N=0
fp() { find "$F" -print0 2>/dev/null | sort -z | xargs -0 -r stat -c '%n %s %Y %a %F' 2>/dev/null | md5sum; \
       find "$F" -type f -print0 | sort -z | xargs -0 -r md5sum | md5sum; }
fixtures() {
  rm -rf "$F" && mkdir -p "$F" && cd "$F" || exit 1
  for i in $(seq 1 400); do echo "In the beginning $i the word was with the text, and the text was good."; done > corpus.txt
  "$L" prepare --input corpus.txt --out data 2>/dev/null
  "$L" train --data data --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --threads 1 --steps 2 \
    --save ck --report-dir rep --trace rep/trace.json --seed 7 2>/dev/null >/dev/null
  "$L" prepare --input corpus.txt --out bpe --tokenizer bpe --vocab-size 300 2>/dev/null
  echo "keep me" > notes.txt
  echo "<html><body>mine</body></html>" > mine.html
  echo "<svg>mine</svg>" > mine.svg
  printf 'layers = 1\nhidden = 32\nheads = 2\nseq-len = 16\n' > good.toml
  "$L" bench --seconds 0.01 --json > bench.json 2>/dev/null
  ln -s notes.txt link_notes.txt
  mkdir -p emptydir
}
H() {  # H NAME EXPECT COMMAND
  local name=$1 expect=$2 cmd=$3
  N=$((N + 1))
  local d="$W/c$N"; rm -rf "$d"; mkdir -p "$d"
  local before after t0 t1 rc cls
  before=$(fp)
  t0=$(date +%s.%N)
  ( cd "$d" && timeout -k 5 60 bash -c "set -o pipefail; $cmd" > "$d/.out" 2> "$d/.err" < /dev/null ); rc=$?
  t1=$(date +%s.%N)
  after=$(fp)
  local nerr first; nerr=$(grep -c '' "$d/.err"); first=$(head -1 "$d/.err" | cut -c1-400)
  local err; err=$(cat "$d/.err")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then cls=hang
  elif [ "$rc" -ge 128 ] || grep -qE "terminate called|Aborted|Segmentation|Sanitizer|runtime error|core dumped|what\(\)" "$d/.err"; then cls=crash
  elif [ "$before" != "$after" ]; then cls=file-touched
  elif grep -qE "std::|basic_string|stoi|stol|stod|stoul|filesystem error|vector::|_M_|bad_alloc|json\.exception|nlohmann|\[json" "$d/.err"; then cls=unhelpful-message
  elif [ "$rc" -ne 0 ] && { [ "$nerr" -ne 1 ] || ! grep -qE "^lattice( [a-z]+)?: error: " "$d/.err"; }; then cls=unhelpful-message
  elif [ "$expect" = fail ] && [ "$rc" -eq 0 ]; then cls=silent-wrong?
  elif [ "$expect" = ok ] && [ "$rc" -ne 0 ]; then cls=refused-valid?
  else cls=ok; fi
  printf "%d\t%s\t%d\t%.2f\t%d\t%s\t%s\t%s\t%s\n" "$N" "$cls" "$rc" "$(echo "$t1 - $t0" | bc)" "$nerr" "$name" "${cmd//$'\n'/ ⏎ }" "$first" "$(head -c 120 "$d/.out" | tr "\n\t" "  ")" >> "$LOG"
  [ "$cls" != ok ] && printf '%d %-14s rc=%d %s :: %s\n' "$N" "$cls" "$rc" "$name" "$first"
  return 0
}
want() { [ "$SECTIONS" = all ] || [[ " $SECTIONS " == *" $1 "* ]]; }
[ -d "$F" ] && [ -z "${REFIX:-}" ] || fixtures
rm -rf "$W"; mkdir -p "$W"
T="--data $F/data --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --threads 1"
export T
for f in "$HERE"/cases/*.sh; do . "$f"; done
echo "cases run: $N"
