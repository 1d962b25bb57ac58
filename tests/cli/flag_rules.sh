#!/usr/bin/env bash
# The flag rules (docs/design.md §14, "Flag rules"), a case of each class: a value outside the bounds
# table, one flag given twice with two values, flags that contradict or are ignored, --vocab against
# the data's tokenizer, --dump-config read back by --config, config.json checked against the
# checkpoint, messages that name the cause, sizes that overflowed, and eval of a bf16 run.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
. "$HERE/lib/hostile.sh"

hostile_corpus
MODEL=(--data data --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --threads 1)
"$LATTICE" train "${MODEL[@]}" --steps 2 --save ck --seed 7 2>/dev/null
check "a checkpoint to check against" test -f ck/model.safetensors
PROTECT=ck

# Bounds, from the one table, at parse time.
hostile "--moe-router-topk 0" 1 "--moe-router-topk must be between 1 and 65536 \(got 0\)" -- \
  train "${MODEL[@]}" --steps 1 --num-experts 4 --moe-router-topk 0
hostile "--moe-router-topk -1" 1 "--moe-router-topk must be between 1 and 65536 \(got -1\)" -- \
  train "${MODEL[@]}" --steps 1 --num-experts 4 --moe-router-topk -1
hostile "--moe-ffn-hidden-size 0" 1 "--moe-ffn-hidden-size must be between 1 and" -- \
  train "${MODEL[@]}" --steps 1 --num-experts 4 --moe-ffn-hidden-size 0
hostile "--comm-timeout 0.0001" 1 "--comm-timeout must be 0 \(off\) or a finite number in \[0.001, 1000000\]" -- \
  train "${MODEL[@]}" --steps 1 --comm-timeout 0.0001
hostile "--peak-flops 1e-300" 1 "--peak-flops must be a finite number in \[1000000, 1e18\] \(got 1e-300\)" -- \
  train "${MODEL[@]}" --steps 1 --peak-flops 1e-300
hostile "--peak-flops inf" 1 "--peak-flops must be a finite number" -- train "${MODEL[@]}" --steps 1 --peak-flops inf
hostile "--peak-flops 0" 1 "--peak-flops must be" -- train "${MODEL[@]}" --steps 1 --peak-flops 0
printf 'dropout = 1\n' > dropout.toml
hostile "--dropout 1 from a config file" 1 "--dropout must be a finite number in \[0, 1\) \(got 1\)" -- \
  train "${MODEL[@]}" --steps 1 --config dropout.toml
hostile "plan --top 0" 1 "--top must be between 1 and 10000" -- plan --layers 2 --hidden 64 --heads 4 --top 0
hostile "sample --top-k -1" 1 "--top-k must be between 0 and 65536" -- sample --checkpoint ck --top-k -1
"$LATTICE" train "${MODEL[@]}" --steps 1 --comm-timeout 0 2>/dev/null
check "--comm-timeout 0 (off) is accepted" test $? -eq 0

# One flag twice with two values (or by two names); a TOML key and its alias.
hostile "--save a --save b" 2 "--save given twice: --save a and --save b" -- train "${MODEL[@]}" --steps 1 --save a --save b
hostile "--init and its alias --load" 2 "--load given twice: --init ck and --load bf" -- train "${MODEL[@]}" --steps 1 --init ck --load bf
hostile "--num-layers and its alias --layers" 2 "--num-layers given twice: --layers 1 and --num-layers 2" -- \
  train "${MODEL[@]}" --steps 1 --num-layers 2
printf 'lr = 0.5\n' > lr.toml
"$LATTICE" train "${MODEL[@]}" --config lr.toml --lr 0.01 --dump-config 2>/dev/null > lr.dump
"$LATTICE" train "${MODEL[@]}" --lr 0.1 --lr 0.01 --dump-config 2>/dev/null > lr2.dump
check "one name twice: the last one wins (a script's setting overridden by hand)" grep -qx 'lr = 0.01' lr2.dump
check "a config file's value is overridden on the command line" grep -qx 'lr = 0.01' lr.dump
hostile "an unknown flag: named as typed, the nearest flag suggested" 2 \
  "arguments it does not take: --layrs 3 \(did you mean --layers\?\); lattice train --help lists its flags" -- \
  train "${MODEL[@]}" --steps 1 --layrs 3
# --device: the backend seam (docs/design.md §18). A build without CUDA says so in one line, for
# every command that runs a model; an unknown device is a usage error.
for cmd in "train ${MODEL[*]} --steps 1" "eval --checkpoint ck --data data/val.bin" "sample --checkpoint ck" "bench"; do
  # shellcheck disable=SC2086
  hostile "${cmd%% *} --device cuda, not yet served" 1 "--device cuda: (this lattice was built without CUDA|no CUDA device)" -- $cmd --device cuda
done
hostile "--device tpu" 2 "--device: tpu not in \{cpu,cuda,cpu-guarded\}" -- train "${MODEL[@]}" --steps 1 --device tpu
printf 'layers = 1\nnum-layers = 2\n' > alias.toml
hostile "a TOML key and its alias" 2 "alias.toml:2: num-layers and layers \(line 1\) are one flag" -- \
  train "${MODEL[@]}" --steps 1 --config alias.toml
"$LATTICE" train "${MODEL[@]}" --steps 1 --threads 1 2>/dev/null
check "the same value twice is harmless" test $? -eq 0

# Flags that contradict, or that the rest of the line ignores.
hostile "--recompute full --recompute-plan sn" 1 "--recompute full and --recompute-plan c both given" -- \
  train "${MODEL[@]}" --steps 1 --recompute full --recompute-plan c
hostile "--use-distributed-optimizer --zero 3" 1 "--use-distributed-optimizer \(ZeRO 1\) and --zero 3 contradict" -- \
  train "${MODEL[@]}" --steps 1 --use-distributed-optimizer --zero 3
hostile "--moe-no-drop with a capacity factor" 1 "--moe-no-drop .* and --moe-expert-capacity-factor 2 contradict" -- \
  train "${MODEL[@]}" --steps 1 --num-experts 4 --moe-no-drop --moe-expert-capacity-factor 2
# A flag given as false says what leaving it out says: no contradiction (these were refused).
"$LATTICE" train "${MODEL[@]}" --steps 1 --use-distributed-optimizer=false --zero 0 2>/dev/null
check "--use-distributed-optimizer=false --zero 0 is accepted" test $? -eq 0
"$LATTICE" plan --layers 2 --hidden 64 --heads 4 --seq-len 16 --micro-batch 1 --use-distributed-optimizer=false \
  --zero 2 >/dev/null 2>&1
check "plan --use-distributed-optimizer=false --zero 2 is accepted" test $? -eq 0
"$LATTICE" train "${MODEL[@]}" --steps 1 --num-experts 4 --moe-no-drop=false --moe-expert-capacity-factor 2 2>/dev/null
check "--moe-no-drop=false with a capacity factor is accepted" test $? -eq 0
# Another optimizer's hyperparameters, a validation size with no validation, a CP comm type on one
# rank: each ran without them, its losses the same bits (third hostile pass).
hostile "--beta1 with adafactor" 1 "--beta1 0.1 does not apply to --optimizer adafactor \(Adafactor reads --lr and --weight-decay" -- \
  train "${MODEL[@]}" --steps 1 --optimizer adafactor --beta1 0.1
hostile "--adam-beta2 with sm3" 1 "--beta2 0.2 does not apply to --optimizer sm3 \(SM3 reads --beta1, its momentum" -- \
  train "${MODEL[@]}" --steps 1 --optimizer sm3 --adam-beta2 0.2
hostile "--eps with sm3" 1 "--eps 0.5 does not apply to --optimizer sm3" -- train "${MODEL[@]}" --steps 1 --optimizer sm3 --eps 0.5
hostile "--eval-batches without --eval-every" 1 "--eval-batches 3 applies with --eval-every N only" -- \
  train "${MODEL[@]}" --steps 1 --eval-batches 3
hostile "--cp-comm-type on one rank" 1 "--cp-comm-type a2a applies to --context-parallel-size > 1 \(got 1\)" -- \
  train "${MODEL[@]}" --steps 1 --cp-comm-type a2a
"$LATTICE" train "${MODEL[@]}" --steps 1 --optimizer sm3 --beta1 0.5 > /dev/null 2>&1
check "... while --beta1 with sm3 (its momentum) trains" test $? -eq 0
for schedule in interleaved zb-h1; do
  hostile "--schedule $schedule without a pipeline" 1 "--schedule $schedule needs a pipeline" -- \
    train "${MODEL[@]}" --steps 1 --schedule "$schedule"
done
hostile "--virtual-stages without a pipeline" 1 "--virtual-stages needs --pipeline-model-parallel-size > 1" -- \
  train "${MODEL[@]}" --steps 1 --virtual-stages 2
hostile "--min-lr with a constant schedule" 1 "--min-lr 1e-4 applies to --lr-schedule cosine only" -- \
  train "${MODEL[@]}" --steps 1 --lr-schedule constant --min-lr 1e-4
hostile "--initial-loss-scale without fp16" 1 "--initial-loss-scale 1024 applies to --params-dtype fp16 only" -- \
  train "${MODEL[@]}" --steps 1 --params-dtype bf16 --initial-loss-scale 1024
hostile "eval of a dense checkpoint with --num-experts" 1 "--num-experts 4 disagrees with checkpoint ck, which holds num-experts 0 \(a dense model\)" -- \
  eval --checkpoint ck --data data/val.bin --batches 1 --num-experts 4
hostile "sample of a dense checkpoint with --moe-router" 1 "--moe-router switch disagrees with checkpoint ck" -- \
  sample --checkpoint ck --tokens 2 --moe-router switch
hostile "eval with another --hidden" 1 "--hidden 64 disagrees with checkpoint ck, which holds hidden 32" -- \
  eval --checkpoint ck --data data/val.bin --batches 1 --hidden 64
"$LATTICE" eval --checkpoint ck --data data/val.bin --batches 1 --hidden 32 --layers 1 2> /dev/null
check "eval with the checkpoint's own shape flags" test $? -eq 0

# Found by the second hostile pass: flags the rest of the line silently ignored.
hostile "plan --paper --layers 3" 1 "--layers does not apply to --paper" -- plan --paper --layers 3
hostile "plan --paper --search" 1 "--search does not apply to --paper" -- plan --paper --search
hostile "plan --moe-paper --top 3" 1 "--top does not apply to --moe-paper" -- plan --moe-paper --top 3
hostile "schedule --weight-time with 1f1b" 1 "--weight-time applies to --schedule zb-h1 only \(its weight-gradient pass; got --schedule 1f1b\)" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --weight-time 1
"$LATTICE" train "${MODEL[@]}" --steps 1 --trace tr.json 2>/dev/null
hostile "schedule --from-trace with --forward-time" 1 "--forward-time does not apply with --from-trace" -- \
  schedule --pipeline-model-parallel-size 1 --micro-batches 1 --from-trace tr.json --forward-time 3
printf 'save = ""\n' > empty.toml
hostile "config: an empty string" 2 "empty.toml:1: save: an empty value" -- train "${MODEL[@]}" --steps 1 --config empty.toml
printf 'save = "a\\u0000b"\n' > nul.toml
hostile "config: a NUL in a path" 2 "nul.toml:1: save: a NUL character" -- train "${MODEL[@]}" --steps 1 --config nul.toml
check "... and nothing saved at the cut path" test ! -e a

# --vocab is the data's tokenizer's.
hostile "--vocab 300 on byte data" 1 "--vocab 300 does not match the bytes tokenizer of data \(vocab 256" -- \
  train "${MODEL[@]}" --steps 1 --vocab 300

# --dump-config reads back with --config: the second dump is the first, byte for byte.
MANY=(--layers 2 --hidden 48 --heads 3 --seq-len 24 --dropout 0.05 --recompute selective --activation-dtype bf16
  --params-dtype bf16 --attention fused --pack-masks --steps 7 --micro-batch 3 --global-batch 6
  --lr 0.002 --min-lr 1e-05 --warmup 3 --beta1 0.8 --beta2 0.99 --eps 1e-07 --weight-decay 0.05 --clip-grad 0.5
  --shuffle off --seed 18446744073709551615 --save $'odd "dir"\nname' --eval-every 2 --eval-batches 3
  --peak-flops 2.5e12 --comm-timeout 0.5 --json --optimizer adamw --lr-schedule cosine --zero-prefetch on)
"$LATTICE" train --data data "${MANY[@]}" --zero 3 --dump-config > dump1.toml 2> dump.err
check "--dump-config of many values: exit 0" test $? -eq 0
"$LATTICE" train --config dump1.toml --dump-config > dump2.toml 2>> dump.err
check "--dump-config reads back" test $? -eq 0
check "the second dump is the first, byte for byte" cmp -s dump1.toml dump2.toml
check "a newline in a value is escaped" grep -q 'save = "odd \\"dir\\"\\nname"' dump1.toml

# config.json, the checkpoint's Hugging Face export, is read and checked.
rm -rf hf && cp -r ck hf
python3 -c "import json; p='hf/config.json'; d=json.load(open(p)); d['n_embd'] = 64; json.dump(d, open(p, 'w'))"
hostile "eval with a hand-edited config.json" 1 'hf/config.json: "n_embd" is 64, but trainer.json and the weights hold 32' -- \
  eval --checkpoint hf --data data/val.bin --batches 1
hostile "--init with a hand-edited config.json" 1 '"n_embd" is 64' -- train "${MODEL[@]}" --steps 1 --init hf
hostile "--resume with a hand-edited config.json" 1 '"n_embd" is 64' -- train "${MODEL[@]}" --steps 4 --resume hf
echo '{"n_embd": ' > hf/config.json
hostile "sample with a broken config.json" 1 "hf/config.json is not valid JSON" -- sample --checkpoint hf --tokens 2

# Messages that name the cause.
hostile "--init of a text file" 1 "checkpoint corpus.txt is not a safetensors file" -- train "${MODEL[@]}" --steps 1 --init corpus.txt
hostile "--resume of a missing path" 1 "checkpoint nowhere does not exist" -- train "${MODEL[@]}" --steps 1 --resume nowhere
hostile "--init of a missing path" 1 "checkpoint nowhere does not exist" -- train "${MODEL[@]}" --steps 1 --init nowhere
# A file named with a trailing slash (or as a directory on the way) is not "missing": it is a file.
hostile "--init of a file named as a directory" 1 "checkpoint ck/model.safetensors/: Not a directory" -- \
  train "${MODEL[@]}" --steps 1 --init ck/model.safetensors/
hostile "--resume of a file named as a directory" 1 "checkpoint ck/trainer.json/: Not a directory" -- \
  train "${MODEL[@]}" --steps 1 --resume ck/trainer.json/
hostile "eval of a path through a file" 1 "checkpoint ck/model.safetensors/x: Not a directory" -- \
  eval --checkpoint ck/model.safetensors/x --data data/val.bin --batches 1
hostile "--dump-config of a --resume through a file" 1 "checkpoint ck/trainer.json/: Not a directory" -- \
  train "${MODEL[@]}" --dump-config --resume ck/trainer.json/
# A missing --init is said before the token files are checked against the vocabulary it would have
# given (tokens past the bytes' 256, llm.c's format: no tokenizer).
python3 - <<'PY'
import os, struct
os.makedirs("llmc_tokens", exist_ok=True)
with open("llmc_tokens/train.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 4000, *([0] * 253)))
    f.write(struct.pack("<4000H", *((i * 7) % 1000 for i in range(4000))))
PY
hostile "--init of a missing path, over tokens it would have sized" 1 "checkpoint nowhere/ does not exist" -- \
  train --data llmc_tokens --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --init nowhere/
hostile "--data naming a token file" 1 "--data data/train.bin is not a directory \(lattice prepare --out DIR makes one" -- \
  train --data data/train.bin --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --vocab 256
hostile "--data through a token file" 1 "--data data/train.bin/ is not a directory" -- \
  train --data data/train.bin/ --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --vocab 256
mkdir -p empty_dir
hostile "--resume of an empty directory" 1 "has no trainer.json: it is not a lattice checkpoint directory \(it is empty\)" -- \
  train "${MODEL[@]}" --steps 1 --resume empty_dir
rm -rf tok && cp -r data tok
python3 -c "import json; p='tok/tokenizer.json'; d=json.load(open(p)); d['vocab'] = 300; json.dump(d, open(p, 'w'))"
hostile "a tokenizer.json with an edited vocab" 1 "records a vocabulary of 300 but its bytes tokenizer has 256 tokens" -- \
  train --data tok --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1

# Sizes: a plan past any machine is refused in one line (it printed -9223372036854775808 B, and a
# wider one died of SIGFPE in oneDNN).
hostile "plan of a 1e21-byte model" 1 "past the 2\^62 a size is counted in" -- \
  plan --layers 10000 --hidden 1048576 --heads 16 --seq-len 1048576 --micro-batch 1024
hostile "plan of a 2^20-wide model at 2^20 sequences" 1 "past the 2\^62 a size is counted in" -- \
  plan --layers 10000 --hidden 1048576 --heads 1048576 --seq-len 1048576 --micro-batch 1048576

# eval of a bf16-weights checkpoint reproduces the run's own final eval exactly (fp32 masters rounded).
"$LATTICE" train "${MODEL[@]}" --steps 3 --params-dtype bf16 --eval-every 3 --eval-batches 2 --save bf --json \
  > bf.jsonl 2>/dev/null
run_loss=$(python3 -c "import json; print(repr([json.loads(l) for l in open('bf.jsonl') if '\"eval\"' in l][-1]['loss']))")
"$LATTICE" eval --checkpoint bf --data data/val.bin --batches 2 --micro-batch 2 --json > bf_eval.json 2>/dev/null
eval_loss=$(python3 -c "import json; print(repr(json.load(open('bf_eval.json'))['loss']))")
check "eval of a bf16 run: $eval_loss is the run's $run_loss" test "$eval_loss" = "$run_loss"

# Numbers as a person writes them (second hostile pass): an integer is decimal whatever its spelling.
# CLI11 alone read 010 as octal 8 (bounds-checked as 10), and --dump-config wrote 0x10 and ' 4' as
# values --config refused or read back differently.
SHAPE=(--data data --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --threads 1)  # MODEL without --layers
dumped() { "$LATTICE" train "${SHAPE[@]}" "$@" --dump-config 2>/dev/null; }
check "--layers 010 is 10 layers, not octal 8" test "$(dumped --layers 010 | grep '^layers')" = "layers = 10"
check "--steps 0x10 is written as 16" test "$(dumped --steps 0x10 | grep '^steps')" = "steps = 16"
check "--warmup +4 and ' 4' are written as 4" test "$(dumped --warmup +4 | grep '^warmup')" = "warmup = 4" -a \
  "$(dumped --warmup ' 4' | grep '^warmup')" = "warmup = 4"
check "--seed 010 is seed 10" test "$(dumped --seed 010 | grep '^seed')" = "seed = 10"
check "--lr 0x1p-10 is written in decimal" test "$(dumped --lr 0x1p-10 | grep '^lr')" = "lr = 0.0009765625"
"$LATTICE" eval --checkpoint ck --data data/val.bin --batches 010 --micro-batch 2 --json > octal.json 2>/dev/null
check "eval --batches 010 evaluates 10 batches" grep -q '"batches":10' octal.json
printf 'layers = 010\n' > octal.toml
check "a config file's 010 is 10 too" sh -c "'$LATTICE' train --data data --config octal.toml --dump-config | grep -qx 'layers = 10'"
# A flag given false is written false: --dump-config wrote any given flag as true, so its file turned
# --sequence-parallel=false into sequence parallelism (and the run's settings line said --sequence-parallel).
check "--sequence-parallel=false is written false" test "$(dumped --layers 1 --sequence-parallel=false | grep '^sequence-parallel')" = "sequence-parallel = false"
check "--json --json=false is written false (the last wins)" test "$(dumped --layers 1 --json --json=false | grep '^json')" = "json = false"
check "--json=false --json is written true" test "$(dumped --layers 1 --json=false --json | grep '^json')" = "json = true"
"$LATTICE" train "${MODEL[@]}" --steps 1 --json=false > json_false.out 2>/dev/null
check "... and --json=false prints no JSON" sh -c "! grep -q '\"event\"' json_false.out"
for spelling in "--warmup 0x10" "--warmup +4" "--lr 0x1p-10" "--seed 010"; do
  # shellcheck disable=SC2086
  dumped $spelling > round1.toml && "$LATTICE" train --config round1.toml --dump-config > round2.toml 2>/dev/null
  check "--dump-config of $spelling reads back the same" cmp -s round1.toml round2.toml
done
hostile "--layers 1e3" 2 "--layers takes a whole number between 1 and 10000 \(got 1e3\)" -- train "${SHAPE[@]}" --steps 1 --layers 1e3
hostile "--steps 4x" 2 "--steps takes a whole number between 0 and 2\^40 \(got 4x\)" -- train "${MODEL[@]}" --steps 4x
hostile "--batches 2^31" 1 "--batches must be between 1 and 2\^30 \(got 2147483648\)" -- eval --checkpoint ck --data data/val.bin --batches 2147483648
hostile "--world 2^63" 1 "--world must be between 1 and 2\^20 \(got 9223372036854775808\)" -- groups --world 9223372036854775808
hostile "--lr 1,5" 2 "--lr takes a number in \[0, 1e12\] \(got 1,5\)" -- train "${MODEL[@]}" --steps 1 --lr 1,5
hostile "--temperature with an Arabic digit" 2 "--temperature takes a number" -- sample --checkpoint ck --temperature $'\xd9\xa1'
# A flag that would be meaningless: masks packed where dropout keeps none.
hostile "--pack-masks --dropout 0" 1 "--pack-masks keeps dropout masks at one bit an element, and this model keeps none \(--dropout 0\)" -- \
  train "${MODEL[@]}" --steps 1 --dropout 0 --pack-masks
# Inference refuses --dropout: its help does not offer it.
for cmd in eval sample; do
  check "$cmd --help does not offer --dropout" sh -c "! '$LATTICE' $cmd --help | grep -q -- ' --dropout'"
done

hostile_summary
[ "$failures" -eq 0 ] && echo "all flag-rule checks passed" || { echo "$failures failed"; exit 1; }
