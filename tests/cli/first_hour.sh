#!/usr/bin/env bash
# The small things of a first run: the settings printed once at start as flags that can be pasted
# back, --dump-config writing every setting as a TOML file --config reads back, and the progress
# line's elapsed time and ETA.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
export OMP_NUM_THREADS=1
for i in $(seq 1 300); do echo "In the beginning $i was the word, and the word was with the first hour."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2> /dev/null

"$LATTICE" train --data data --layers 3 --hidden 64 --heads 4 --seq-len 32 --micro-batch 4 --lr 0.01 --steps 4 \
  --dump-config > dumped.toml 2> dump.err
check "--dump-config: exit 0, nothing on stderr" test $? -eq 0 -a ! -s dump.err
check "the dump holds the given values" test "$(grep -c -e '^layers = 3$' -e '^lr = 0.01$' -e '^data = "data"$' dumped.toml)" -eq 3
check "... and the defaults, commented out, in TOML" \
  test "$(grep -c -e '^# lr-schedule = "cosine"$' -e '^# json = false$' -e '^# zero-prefetch = "on"$' dumped.toml)" -eq 3
check "... and not --vocab, which the data gives" test "$(grep -c '^vocab = ' dumped.toml)" -eq 0
"$LATTICE" train --config dumped.toml --json > from_dump.jsonl 2> from_dump.err
check "the dump trains as --config" test $? -eq 0
check "... the run it describes (4 steps)" test "$(grep -c '"event":"step"' from_dump.jsonl)" -eq 4

"$LATTICE" train --data data --layers 3 --hidden 64 --heads 4 --seq-len 32 --micro-batch 4 --lr 0.01 --steps 4 \
  2> human.err
check "the settings, once, as flags" test "$(grep -c '^lattice train: settings: .*--layers 3 --hidden 64 --heads 4 --seq-len 32 --data data --steps 4 --micro-batch 4 --lr 0.01 ' human.err)" -eq 1
check "every progress line shows elapsed time and an ETA" test "$(grep -c 'elapsed, ETA [0-9]*:[0-9][0-9]$' human.err)" -eq 4
settings=$(sed -n 's/^lattice train: settings: \(.*\) (--dump-config.*/\1/p' human.err)
eval "\"$LATTICE\" train $settings --json" > pasted.jsonl 2> /dev/null
check "the printed settings pasted back run the same 4 steps" "$PY" -c "
import json, sys
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '\"event\":\"step\"' in x]
print(l('pasted.jsonl'), l('from_dump.jsonl'))
sys.exit(0 if l('pasted.jsonl') == l('from_dump.jsonl') and len(l('pasted.jsonl')) == 4 else 1)"
check "JSON steps carry elapsed_s and eta_s, 0 at the last" "$PY" -c "
import json, sys
s = [json.loads(x) for x in open('from_dump.jsonl') if '\"event\":\"step\"' in x]
ok = all(e['elapsed_s'] > 0 for e in s) and s[-1]['eta_s'] == 0 and s[0]['eta_s'] > 0
ok = ok and all(a['elapsed_s'] < b['elapsed_s'] for a, b in zip(s, s[1:]))
sys.exit(0 if ok else 1)"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
