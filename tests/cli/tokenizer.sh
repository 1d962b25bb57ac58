#!/usr/bin/env bash
# SentencePiece tokenizers end to end (docs/design.md §15): prepare trains one on the corpus, train
# takes its vocabulary from the data and reports bits per byte, the checkpoint carries it, sample and
# eval use it, and every mismatch or damaged file is one clear line.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
export OMP_NUM_THREADS=1

for i in $(seq 1 400); do
  echo "And God said, Let there be light: and there was light $i. And the evening and the morning were the first day."
done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out bpe --tokenizer bpe --vocab-size 400 2> prep.err
check "prepare --tokenizer bpe: exit 0" test $? -eq 0
VOCAB=$("$PY" -c "import json; print(json.load(open('bpe/tokenizer.json'))['vocab'])")
check "prepare names the tokenizer, its vocabulary and compression" grep -q "bpe tokenizer, vocab $VOCAB.*bytes a token" prep.err
check "the data directory records the tokenizer" test -s bpe/tokenizer.model -a -s bpe/tokenizer.json -a -s bpe/data.json
"$LATTICE" prepare --input corpus.txt --out uni --tokenizer unigram --vocab-size 400 2> /dev/null
check "prepare --tokenizer unigram: exit 0" test $? -eq 0 -a -s uni/tokenizer.model
"$LATTICE" prepare --input corpus.txt --out bytes 2> /dev/null

MODEL=(--layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 4 --global-batch 4 --threads 1 --json)
"$LATTICE" train --data bpe "${MODEL[@]}" --steps 30 --eval-every 30 --save ck > train.jsonl 2> train.err
check "train on bpe data without --vocab: exit 0" test $? -eq 0
check "steps and the evaluation report bits per byte, loss x tokens/bytes / ln 2" "$PY" -c "
import json, math, sys
d = json.load(open('bpe/data.json'))
ev = [json.loads(l) for l in open('train.jsonl')]
step = [e for e in ev if e.get('event') == 'step'][-1]
val = [e for e in ev if e.get('event') == 'eval'][-1]
want_t = step['loss'] * d['train']['tokens'] / d['train']['bytes'] / math.log(2)
want_v = val['loss'] * d['val']['tokens'] / d['val']['bytes'] / math.log(2)
print(step['loss'], step['bits_per_byte'], want_t, val['bits_per_byte'], want_v)
sys.exit(0 if abs(step['bits_per_byte'] - want_t) < 1e-9 * want_t and abs(val['bits_per_byte'] - want_v) < 1e-9 * want_v else 1)"
check "the model's vocabulary is the tokenizer's ($VOCAB)" "$PY" -c "
import json, sys
sys.exit(0 if json.load(open('ck/trainer.json'))['model']['vocab'] == $VOCAB else 1)"
check "the checkpoint carries the tokenizer" cmp -s bpe/tokenizer.model ck/tokenizer.model
check "trainer.json records its fingerprint" grep -q "\"tokenizer\": \"bpe-$VOCAB-" ck/trainer.json

"$LATTICE" sample --checkpoint ck --prompt "And God said" --tokens 40 > sample.txt 2> sample.err
check "sample with the checkpoint's tokenizer: exit 0" test $? -eq 0
check "the sample continues the prompt in text" "$PY" -c "
import sys
t = open('sample.txt', encoding='utf-8').read()
sys.exit(0 if t.startswith('And God said') and len(t) > len('And God said') + 20 else 1)"
"$LATTICE" eval --checkpoint ck --data bpe/val.bin --batches 2 --micro-batch 2 --json > eval.jsonl 2> eval.err
check "eval reports bits per byte for val.bin" grep -q '"bits_per_byte"' eval.jsonl

# Mismatches and damage: one line each.
expect_error "a --vocab that is not the tokenizer's" "does not match the bpe tokenizer" train --data bpe \
  "${MODEL[@]}" --vocab 256 --steps 1
expect_error "resuming on another tokenizer's tokens" "was trained with tokenizer bpe-$VOCAB-" train --data uni \
  "${MODEL[@]}" --steps 31 --resume ck
expect_error "eval on byte tokens with a bpe checkpoint" "holds tokens of bytes" eval --checkpoint ck \
  --data bytes/val.bin --batches 1 --micro-batch 1
cp -r bpe swapped && cp uni/tokenizer.model swapped/tokenizer.model
expect_error "a data directory whose model was swapped" "but the directory holds" train --data swapped \
  "${MODEL[@]}" --steps 1
cp -r bpe broken && head -c 100 bpe/tokenizer.model > broken/tokenizer.model
expect_error "a damaged tokenizer model" "tokenizer.model is not a SentencePiece model" train --data broken \
  "${MODEL[@]}" --steps 1
cp -r bpe dir_model && rm dir_model/tokenizer.model && mkdir dir_model/tokenizer.model
expect_error "a tokenizer.model that is a directory: named so, not as missing" \
  "names a bpe tokenizer but dir_model/tokenizer.model is not a regular file" train --data dir_model "${MODEL[@]}" --steps 1
cp -r bpe no_sizes && rm no_sizes/data.json
expect_error "a bpe directory without data.json" "but no data.json" train --data no_sizes "${MODEL[@]}" --steps 1
cp -r bpe stale && cp bytes/train.bin stale/train.bin
expect_error "data.json that does not describe train.bin" "records .* tokens for train.bin" train --data stale \
  "${MODEL[@]}" --steps 1 --vocab "$VOCAB"
expect_error "--init from another tokenizer's checkpoint" "prepare the data with --tokenizer-from ck" train \
  --data uni "${MODEL[@]}" --steps 1 --init ck
"$LATTICE" prepare --input corpus.txt --out again --tokenizer-from ck 2> again.err
check "prepare --tokenizer-from a checkpoint keeps its tokenizer" cmp -s again/tokenizer.model bpe/tokenizer.model
"$LATTICE" train --data again "${MODEL[@]}" --steps 2 --init ck > /dev/null 2> init.err
check "... and --init from that checkpoint trains on it" test $? -eq 0
rm bytes/tokenizer.json
# Tokens that record no tokenizer are bytes only to a model of 256 ids: to the bpe model they are ids of
# a tokenizer not known (refused as bytes before 2026-11-30, and a loose copy of the bpe data with them),
# and scored (bits per byte from data.json's bytes of text). Recorded byte tokens are still refused above.
"$LATTICE" eval --checkpoint ck --data bytes/val.bin --batches 1 --micro-batch 1 > unrecorded.txt 2>&1
check "eval of unrecorded tokens with a bpe checkpoint: scored as ids" \
  bash -c "[ $? -eq 0 ] && grep -q '^eval loss' unrecorded.txt"
# The checkpoint's own tokenizer.json missing, or not a file: its trainer.json names the tokenizer, so
# it is named missing (sample decoded the bpe model's tokens as bytes, eval and --resume said the
# checkpoint was trained with bytes).
rm -rf ck_notok ck_dirtok && cp -r ck ck_notok && cp -r ck ck_dirtok && rm ck_notok/tokenizer.json ck_dirtok/tokenizer.json
mkdir ck_dirtok/tokenizer.json
expect_error "sample of a checkpoint without its tokenizer.json" \
  "checkpoint ck_notok was trained with tokenizer bpe-$VOCAB-[0-9a-f]* (its trainer.json), but ck_notok/tokenizer.json is missing" \
  sample --checkpoint ck_notok --prompt "And God" --tokens 4 --threads 1
expect_error "eval of a checkpoint whose tokenizer.json is a directory" "but ck_dirtok/tokenizer.json is not a regular file" \
  eval --checkpoint ck_dirtok --data bpe/val.bin --batches 1 --threads 1
expect_error "--resume of a checkpoint without its tokenizer.json" "ck_notok.*tokenizer.json.*is missing" \
  train --data bpe "${MODEL[@]}" --steps 3 --resume ck_notok
"$PY" -c "import json; json.dump({'kind': 'bytes', 'vocab': 256, 'fingerprint': 'bytes'}, open('ck_notok/tokenizer.json', 'w'))"
expect_error "sample of a checkpoint whose tokenizer.json was replaced by another valid one" \
  "ck_notok/tokenizer.json holds tokenizer bytes" sample --checkpoint ck_notok --prompt "And God" --tokens 4 --threads 1
expect_error "sample from a bare weights file of a bpe model" "a weights file carries no tokenizer" sample \
  --checkpoint ck/model.safetensors --layers 2 --hidden 64 --heads 4 --seq-len 32 --vocab "$VOCAB"
expect_error "an unknown tokenizer" "unknown tokenizer 'wordpiece'" prepare --input corpus.txt --out x \
  --tokenizer wordpiece
expect_error "bpe without a vocabulary size" "needs --vocab-size between 300 and 65536" prepare --input corpus.txt \
  --out x --tokenizer bpe
expect_error "a vocabulary size for bytes" "applies to --tokenizer bpe" prepare --input corpus.txt --out x \
  --vocab-size 512
check "failed prepares leave no directory" test ! -e x
head -c 300 corpus.txt > tiny.txt
"$LATTICE" prepare --input tiny.txt --out tiny --tokenizer bpe --vocab-size 60000 2> tiny.err
check "a vocabulary larger than the text holds: fewer pieces, said" grep -q "of 60000 asked: the text holds no more" tiny.err

# A text of one long line (SentencePiece skips a sentence past 4192 bytes: it trained on nothing and
# failed an internal check) is handed over in pieces; a text of more distinct characters than the
# vocabulary holds is said so, in lattice's flags, not SentencePiece's.
python3 -c "print(' '.join(['alpha', 'beta', 'gamma', 'delta'][i % 4] for i in range(100000)), end='')" > oneline.txt
"$LATTICE" prepare --input oneline.txt --out oneline --tokenizer bpe --vocab-size 300 > /dev/null 2> oneline.err
check "one line of 600 kB: prepared" test $? -eq 0 -a -s oneline/train.bin
head -c 100000 /dev/urandom > noise.bin
"$LATTICE" prepare --input noise.bin --out noise --tokenizer bpe --vocab-size 300 > /dev/null 2> noise.err
check "random bytes at 300 pieces: exit 1, one line naming --vocab-size" \
  bash -c "[ $? -eq 1 ] && [ \$(wc -l < noise.err) -eq 1 ] && grep -qE 'the 256 byte pieces \([0-9]+ in all\), and 300 pieces leave no room for them; raise --vocab-size above [0-9]+, or prepare it with --tokenizer bytes' noise.err"

# A bytes prepare over an earlier bpe one removes that one's tokenizer.model; a user's file it does not
# write stays, even under --overwrite (it was deleted, not replaced, before).
cp -r bpe rebytes && "$LATTICE" prepare --input corpus.txt --out rebytes 2> /dev/null
check "a bytes prepare over a bpe directory: its tokenizer.model removed" test $? -eq 0 -a ! -e rebytes/tokenizer.model
mkdir -p users && echo "my own sentencepiece model" > users/tokenizer.model
"$LATTICE" prepare --input corpus.txt --out users --overwrite 2> /dev/null
check "a bytes prepare --overwrite keeps the user's tokenizer.model" \
  bash -c "[ $? -eq 0 ] && [ \"\$(cat users/tokenizer.model)\" = 'my own sentencepiece model' ] && [ -s users/train.bin ]"

# Token files with no tokenizer (llm.c's) at a vocabulary above 256 are ids of a tokenizer not known:
# trained on and scored, recorded as such; never decoded as bytes (sample printed them as raw bytes,
# eval gave bits per byte of them, before), never held to another tokenizer.
mkdir -p ids && cp bpe/train.bin bpe/val.bin ids/
IDS=(--layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --threads 1 --vocab "$VOCAB")
"$LATTICE" train --data ids "${IDS[@]}" --steps 2 --save ck_ids > /dev/null 2>&1
check "train on token files without a tokenizer at vocabulary $VOCAB: exit 0" test $? -eq 0
check "... the checkpoint records no tokenizer, not bytes" "$PY" -c "
import json, sys
t = json.load(open('ck_ids/tokenizer.json'))
sys.exit(0 if t == {'kind': 'none', 'vocab': $VOCAB, 'fingerprint': 'none'} else 1)"
expect_error "sample of a checkpoint trained on ids" "was trained on token files without a tokenizer ($VOCAB ids" \
  sample --checkpoint ck_ids --prompt hi --tokens 5 --threads 1
"$LATTICE" eval --checkpoint ck_ids --data ids/val.bin --threads 1 > ids_eval.txt 2>&1
check "eval of it: exit 0, a loss and no bits per byte" \
  bash -c "[ $? -eq 0 ] && grep -q '^eval loss [0-9.]* over' ids_eval.txt && ! grep -q bits/byte ids_eval.txt"
"$LATTICE" train --data ids "${IDS[@]}" --steps 3 --resume ck_ids > /dev/null 2>&1
check "a resume of it on the same ids: exit 0" test $? -eq 0
# The bpe checkpoint scored on a copy of its val.bin without the tokenizer beside it: ids not known,
# scored (not refused as bytes), without bits per byte; a directory for --data is named as one.
mkdir -p loose && cp bpe/val.bin loose/v.bin
"$LATTICE" eval --checkpoint ck --data loose/v.bin --threads 1 > loose_eval.txt 2>&1
check "eval of a loose token file: exit 0, no bits per byte" \
  bash -c "[ $? -eq 0 ] && grep -q '^eval loss' loose_eval.txt && ! grep -q bits/byte loose_eval.txt"
expect_error "eval --data a directory" "--data bpe is a directory: eval scores one token file (bpe/val.bin)" \
  eval --checkpoint ck --data bpe --threads 1
expect_error "prepare --tokenizer-from a checkpoint of ids" "--tokenizer-from ck_ids records no tokenizer lattice has" \
  prepare --input corpus.txt --out from_ids --tokenizer-from ck_ids
echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
