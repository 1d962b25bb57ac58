#!/usr/bin/env bash
# `lattice train / eval / sample` end to end on a tiny corpus: JSON contract, checkpoints,
# bit-exact resume, config files, and every bad input ending with one stderr line and exit 1/2.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1

. "$(dirname "$0")/lib/check.sh"
json_field() { python3 -c "import json,sys; d=[x for x in (json.loads(l) for l in open(sys.argv[1])) if x.get('event') != 'start']; print(eval(sys.argv[2]))" "$@"; }  # the records after the start record

for i in $(seq 1 400); do echo "In the beginning $i the word was with the text, and the text was good."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
SMALL=(--data data --layers 2 --hidden 32 --heads 4 --seq-len 32 --micro-batch 4 --threads 1)

# JSON Lines contract.
"$LATTICE" train "${SMALL[@]}" --steps 5 --global-batch 8 --json > run.jsonl 2> run.err
check "train exits 0" test $? -eq 0
check "5 step events" test "$(grep -c '"event":"step"' run.jsonl)" -eq 5
check "one summary" test "$(grep -c '"event":"summary"' run.jsonl)" -eq 1
check "step fields" test "$(json_field run.jsonl "sorted(set(['step','loss','lr','step_s','tokens_per_s']) - set(d[0]))")" = "[]"
check "summary fields" test "$(json_field run.jsonl "sorted({'steps','first_loss','final_loss','tokens_per_s','mfu','parameters','memory','comm'} - set(d[-1]))")" = "[]"
check "summary memory per rank" test "$(json_field run.jsonl "sorted({'rank','tp_rank','pp_rank','dp_rank','activation_bytes_per_layer','activation_bytes_per_layer_formula','activation_peak_bytes','model_state_bytes','model_state_bytes_formula','transient_peak_bytes'} - set(d[-1]['memory']['ranks'][0]))")" = "[]"
check "two layers measured" test "$(json_field run.jsonl "len(d[-1]['memory']['ranks'][0]['activation_bytes_per_layer'])")" -eq 2
check "model states = 4+4+8 bytes/param" test "$(json_field run.jsonl \
  "(lambda m, n: m['params'] == 4*n and m['grads'] == 4*n and m['optimizer'] == 8*n)(d[-1]['memory']['ranks'][0]['model_state_bytes'], d[-1]['parameters'])")" = True
check "loss falls over 5 steps" test "$(json_field run.jsonl "d[4]['loss'] < d[0]['loss']")" = True

# Checkpoints and bit-exact resume: 6 straight steps vs 3 + resume to 6.
"$LATTICE" train "${SMALL[@]}" --dropout 0.1 --steps 6 --json > straight.jsonl 2>/dev/null
"$LATTICE" train "${SMALL[@]}" --dropout 0.1 --steps 6 --save-every 3 --save ck --json > first.jsonl 2>/dev/null
check "checkpoint files (with the manifest listing them)" test "$(ls ck | tr '\n' ' ')" = "config.json lattice-checkpoint.json model.safetensors optimizer.safetensors tokenizer.json trainer.json "
check "no temporary dirs left" test -z "$(ls | grep -e '\.tmp' -e '\.old')"
"$LATTICE" train "${SMALL[@]}" --dropout 0.1 --steps 3 --save half --json > half.jsonl 2>/dev/null
check "trainer.json step 3" test "$(python3 -c "import json; print(json.load(open('half/trainer.json'))['step'])")" -eq 3
"$LATTICE" train "${SMALL[@]}" --dropout 0.1 --steps 6 --resume half --json > resumed.jsonl 2>/dev/null
check "resumed run does steps 4..6" test "$(json_field resumed.jsonl "[x['step'] for x in d if x['event']=='step']")" = "[4, 5, 6]"
check "resume is bit-exact" test "$(json_field straight.jsonl "[x['loss'] for x in d[3:6]]")" = \
  "$(json_field resumed.jsonl "[x['loss'] for x in d[0:3]]")"
# The model too: a resume with none of its flags takes the checkpoint's model, not the flags' defaults.
"$LATTICE" train --data data --threads 1 --steps 6 --resume half --json > bare.jsonl 2>/dev/null
check "a resume without the model flags trains the run's model (the same losses)" \
  test "$(json_field bare.jsonl "[x['loss'] for x in d if x['event'] == 'step']")" = \
  "$(json_field resumed.jsonl "[x['loss'] for x in d if x['event'] == 'step']")"
"$LATTICE" train --data data --threads 1 --steps 6 --resume half > /dev/null 2> bare.err
check "the start names the model values taken" grep -q "resumed with checkpoint half's .*--layers 2 --hidden 32 --seq-len 32 (" bare.err
"$LATTICE" train --data data --resume half --dump-config > bare.toml 2>/dev/null
check "--dump-config of a resume shows the run's model" grep -qx '# hidden = 32  (from checkpoint half)' bare.toml
expect_error "an MoE flag on a dense run's resume" \
  "--moe-router: the --moe-\* and --expert-dropout flags need a Mixture-of-Experts model, and checkpoint half holds a dense one" \
  train --data data --resume half --moe-router switch
expect_error "an MoE flag beside --num-experts 0 on a resume" \
  "--moe-router topk: the --moe-\* and --expert-dropout flags need a Mixture-of-Experts model (--num-experts E; got --num-experts 0)" \
  train --data data --resume half --num-experts 0 --moe-router topk
check "saving does not change training" test "$(json_field straight.jsonl "[x['loss'] for x in d[:6]]")" = \
  "$(json_field first.jsonl "[x['loss'] for x in d[:6]]")"

# A resume continues the run's own settings: a flag not given takes the checkpoint's value (not the
# flag's default), one given otherwise is refused unless --override-schedule says so, and the
# cosine keeps the run's horizon (a longer --steps holds --min-lr past it).
"$LATTICE" train "${SMALL[@]}" --steps 3 --lr 0.01 --warmup 1 --save sched 2>/dev/null
"$LATTICE" train "${SMALL[@]}" --steps 5 --resume sched --json > kept.jsonl 2> kept.err
check "resume without --lr: steps 4 and 5 at the run's --min-lr (its cosine ended at step 3)" \
  test "$(json_field kept.jsonl "[x['lr'] for x in d if x['event'] == 'step']")" = "[0.0003, 0.0003]"
"$LATTICE" train "${SMALL[@]}" --steps 5 --resume sched > /dev/null 2> kept.err
check "the start names what the resume took from the checkpoint" grep -q "resumed with checkpoint sched's --lr 0.01 --warmup 1 (" kept.err
"$LATTICE" train "${SMALL[@]}" --resume sched > /dev/null 2> kept.err
check "resume without --steps: the run's own end" grep -q "no step trained (the run is at step 3 of --steps 3)" kept.err
"$LATTICE" train "${SMALL[@]}" --resume sched --dump-config > resumed.toml 2>/dev/null
check "--dump-config of a resume shows the run's --lr, not the default" grep -qx '# lr = 0.01  (from checkpoint sched)' resumed.toml
"$LATTICE" train --config resumed.toml --steps 5 --json > dumped.jsonl 2>/dev/null
check "... and reads back as the same resume" \
  test "$(json_field dumped.jsonl "[x['lr'] for x in d if x['event'] == 'step']")" = "[0.0003, 0.0003]"
expect_error "a resume with another --lr" "--lr 0.02 differs from checkpoint sched's 0.01: a resume continues the run's schedule" \
  train "${SMALL[@]}" --steps 5 --resume sched --lr 0.02
expect_error "a resume with another --beta2" "--beta2 0.99 differs from checkpoint sched's 0.95" \
  train "${SMALL[@]}" --steps 5 --resume sched --beta2 0.99
expect_error "--override-schedule on a new run" "--override-schedule applies to --resume only" \
  train "${SMALL[@]}" --steps 5 --override-schedule
"$LATTICE" train "${SMALL[@]}" --steps 5 --resume sched --lr 0.02 --override-schedule --json > over.jsonl 2>/dev/null
check "--override-schedule: the given --lr's cosine over the new --steps (warmup 1, the run's)" python3 -c "
import json, math, sys
lr = [x['lr'] for x in map(json.loads, open('over.jsonl')) if x.get('event') == 'step']
want = [3e-4 + 0.5 * (0.02 - 3e-4) * (1 + math.cos(math.pi * (t - 1) / 4)) for t in (4, 5)]
sys.exit(not (len(lr) == 2 and all(abs(a - b) <= 1e-12 * b for a, b in zip(lr, want))))"
# The batch comes back before anything is planned from it: a run of micro-batch 2 and global batch 8
# resumed with neither flag trains 2 x 4 (the defaults, 16 x 1, would size memory and its recompute
# choice), and a flag the resumed optimizer would ignore is refused.
NOBATCH=(--data data --layers 2 --hidden 32 --heads 4 --seq-len 32 --threads 1)
"$LATTICE" train "${NOBATCH[@]}" --micro-batch 2 --global-batch 8 --optimizer adafactor --steps 2 --save adaf 2>/dev/null
# 3 MiB: a recompute plan fits micro-batch 2 here, none fits 16 (measured: 16 needs 6 MiB).
"$LATTICE" train "${NOBATCH[@]}" --steps 3 --resume adaf --recompute auto --memory-budget 3MiB > /dev/null 2> batch.err
check "resume without batch flags: the run's 2 x 4, its recompute chosen for micro-batch 2" grep -q "batch 2 x 4 x 1" batch.err
expect_error "--beta2 on a resumed Adafactor run" "--beta2 does not apply to checkpoint adaf's --optimizer adafactor" \
  train "${NOBATCH[@]}" --steps 3 --resume adaf --beta2 0.99 --override-schedule
# On more data-parallel ranks the run's micro-batch is split to fit without --micro-batch: a global
# batch of 2 at micro-batch 2 over 2 ranks is micro-batch 1 (it was refused, naming flags never given).
"$LATTICE" train "${NOBATCH[@]}" --steps 2 --micro-batch 2 --global-batch 2 --save g2 > /dev/null 2>&1
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
  mpirun --allow-run-as-root --oversubscribe -np 2 "$LATTICE" train "${NOBATCH[@]}" --steps 3 --resume g2 --json \
  > g2.jsonl 2> /dev/null
check "resume on 2 data-parallel ranks without --micro-batch: micro-batch 1, named in the start record" python3 -c "
import json; s = [json.loads(l) for l in open('g2.jsonl')][0]
assert s['micro_batch'] == 1 and s['train_settings']['lr'] == 0.003 and '--micro-batch 1' in s['resumed_settings'], s
assert '--micro-batch 2 ' not in s['resumed_settings'], s  # in the checkpoint's value's place, not beside it"
# Token files without a tokenizer (llm.c's) do not say the vocabulary: a resume takes the run's.
mkdir -p tokens_only && cp data/train.bin data/val.bin tokens_only/
"$LATTICE" train --data tokens_only --layers 2 --hidden 32 --heads 4 --seq-len 32 --threads 1 --vocab 300 --steps 2 \
  --save v300 > /dev/null 2>&1
"$LATTICE" train --data tokens_only --threads 1 --steps 3 --resume v300 > /dev/null 2> v300.err
check "a resume on token files without a tokenizer takes the run's --vocab" grep -q "resumed with checkpoint v300's .*--vocab 300" v300.err
expect_error "--dump-config of a resume from nothing" "checkpoint nothing does not exist: nothing to dump from" \
  train "${NOBATCH[@]}" --resume nothing --dump-config
mkdir -p not_a_checkpoint
expect_error "--dump-config of a resume from a directory of no checkpoint" "--resume not_a_checkpoint holds no trainer.json" \
  train "${NOBATCH[@]}" --resume not_a_checkpoint --dump-config
# A damaged value in trainer.json is named as the checkpoint's, not as a flag nobody gave.
cp -r adaf damaged
python3 -c "
import json; t = json.load(open('damaged/trainer.json')); t['train']['micro_batch'] = 0
json.dump(t, open('damaged/trainer.json', 'w'))
m = json.load(open('damaged/lattice-checkpoint.json')); del m['sums']['trainer.json']  # past the sum, to the field check
json.dump(m, open('damaged/lattice-checkpoint.json', 'w'))"
expect_error "a damaged micro_batch in trainer.json" 'damaged/trainer.json: "train": "micro_batch" = 0 is not a value of --micro-batch' \
  train "${NOBATCH[@]}" --steps 3 --resume damaged
"$LATTICE" train "${NOBATCH[@]}" --steps 2 --optimizer sm3 --beta1 0 --save sm0 > /dev/null 2>&1
expect_error "an SM3 run without momentum given --beta1" "checkpoint sm0's SM3 run kept no momentum (--beta1 0)" \
  train "${NOBATCH[@]}" --steps 3 --resume sm0 --override-schedule --beta1 0.5

# eval and sample.
"$LATTICE" eval --checkpoint ck --data data/val.bin --batches 2 --micro-batch 2 --json > eval.jsonl 2>/dev/null
check "eval event" test "$(json_field eval.jsonl "d[0]['event'] == 'eval' and d[0]['tokens'] == 2*2*32 and d[0]['loss'] > 0")" = True
"$LATTICE" sample --checkpoint ck --prompt "In the" --tokens 20 > sample.txt 2>/dev/null
check "sample prints prompt + 20 bytes" test "$(head -c 6 sample.txt)" = "In the"
check "sample length" test "$(wc -c < sample.txt)" -ge 26
"$LATTICE" sample --checkpoint ck --prompt "In the" --tokens 20 --threads 1 > sample1.txt 2>/dev/null
check "sample --threads 1: the same text (threads change no draw)" cmp sample.txt sample1.txt
"$LATTICE" eval --checkpoint ck --data data/val.bin --threads 1 > eval1.txt 2>&1
check "eval --threads 1 runs" grep -q "eval loss" eval1.txt
# A flag given twice takes the last value in every command, as in train (sample refused it in CLI11's words).
"$LATTICE" sample --checkpoint ck --prompt "In the" --tokens 5 --tokens 20 > twice.txt 2>/dev/null
check "sample --tokens twice: the last one" cmp sample.txt twice.txt
# A byte model's text may hold NUL bytes: sample prints them (fputs stopped at each, dropping them).
for _ in $(seq 1 2000); do printf 'ab\000cd efg\n'; done > nul.txt
"$LATTICE" prepare --input nul.txt --out nul_data > /dev/null 2>&1
"$LATTICE" train --data nul_data --layers 2 --hidden 64 --heads 4 --seq-len 64 --micro-batch 4 --steps 150 \
  --threads 2 --save nul_ck > /dev/null 2>&1
"$LATTICE" sample --checkpoint nul_ck --prompt ab --tokens 30 --top-k 1 > nul_sample.txt 2>/dev/null
check "sample prints NUL bytes: 2 + 30 + a newline" test "$(wc -c < nul_sample.txt)" -eq 33
check "sample prints NUL bytes: the corpus's pattern" \
  bash -c "head -c 11 nul_sample.txt | od -An -c | tr -s ' ' | grep -q 'a b \\\\0 c d e f g \\\\n'"

# --config FILE.toml; flags on the command line win.
printf 'layers = 1\nhidden = 16\nheads = 2\n' > small.toml
"$LATTICE" train --data data --seq-len 16 --micro-batch 2 --steps 1 --config small.toml --hidden 32 --json > cfg.jsonl 2>/dev/null
check "config file + flag override" test "$(json_field cfg.jsonl "len(d[-1]['memory']['ranks'][0]['activation_bytes_per_layer'])")" -eq 1
check "flag wins over config" test "$(json_field cfg.jsonl "d[-1]['parameters']")" -eq $((256*32 + 16*32 + 12*32*32 + 13*32 + 2*32))

# A config key or value no flag could take is refused as such, not echoed whole (a 200 MB key once
# made a 200 MB error line).
head -c 300000 /dev/zero | tr '\0' k > long_key.toml && echo " = 1" >> long_key.toml
expect_error "a config key of 300000 characters" "a key of 300000 characters is not a flag" train --config long_key.toml
check "... in a short line" test "$(wc -c < err.txt)" -lt 200
printf 'data = "%s"\n' "$(head -c 100000 /dev/zero | tr '\0' x)" > long_value.toml
expect_error "a config value of 100000 bytes" "data: a value of 100000 bytes (no flag takes more than 65536)" \
  train --config long_value.toml
check "... in a short line" test "$(wc -c < err.txt)" -lt 200

# Bad inputs: status 1 or 2, exactly one stderr line naming the cause.
expect_error "unknown flag" "--bogus" train "${SMALL[@]}" --bogus 3
expect_error "unknown command" "unknown command" frobnicate
expect_error "heads not dividing hidden" "must divide --hidden" train "${SMALL[@]}" --heads 5
expect_error "negative layers" "--layers" train "${SMALL[@]}" --layers 0
expect_error "bad recompute mode" "none, selective, full or auto" train "${SMALL[@]}" --recompute sometimes
expect_error "bad dtype" "fp32 or bf16" train "${SMALL[@]}" --activation-dtype fp8
expect_error "global batch not a multiple" "multiple of --micro-batch" train "${SMALL[@]}" --global-batch 6
expect_error "seq-len longer than data" "seq-len" train "${SMALL[@]}" --seq-len 100000
expect_error "missing data" "train.bin" train --data nowhere --steps 1
expect_error "token >= vocab" "vocab" train "${SMALL[@]}" --vocab 64 --steps 1
mkdir -p badmagic && head -c 2048 /dev/urandom > badmagic/train.bin
expect_error "bad magic" "magic" train --data badmagic --steps 1
mkdir -p short && head -c 100 data/train.bin > short/train.bin
expect_error "truncated token file" "train.bin" train --data short --steps 1
expect_error "more ranks asked than exist" "mpirun" train "${SMALL[@]}" --tensor-model-parallel-size 2
expect_error "unknown ZeRO stage" "--zero must be between 0 and 3" train "${SMALL[@]}" --zero 4
for stage in 1 2 3; do
  "$LATTICE" train "${SMALL[@]}" --steps 1 --zero $stage > zero.out 2> zero.err
  check "ZeRO-$stage on one rank runs and says it shards nothing" grep -q "shards nothing" zero.err
done
expect_error "recompute-layers without full" "recompute full" train "${SMALL[@]}" --recompute-layers 1
expect_error "mismatched checkpoint" "holds another model: its hidden 32 where the flags ask for 64 (a resume takes the run's model" train "${SMALL[@]}" --hidden 64 --steps 4 --resume half
cp -r half trunc && head -c 500 half/model.safetensors > trunc/model.safetensors
expect_error "truncated checkpoint" "model.safetensors" train "${SMALL[@]}" --steps 4 --resume trunc
expect_error "resume from nothing" "does not exist" train "${SMALL[@]}" --steps 4 --resume nothing
expect_error "NaN loss names the step" "at step" train "${SMALL[@]}" --lr 1e12 --clip-grad 0 --warmup 0 --steps 20 --json
# Weights that give a NaN loss from the start: the first loss precedes any update, so the message
# names the weights, not the learning rate.
"$LATTICE" train "${SMALL[@]}" --steps 1 --save ck_nan_src > /dev/null 2>&1
python3 - ck_nan_src/model.safetensors nan.safetensors <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
header = json.loads(b[8:8 + n])
name, t = next((k, v) for k, v in header.items() if k != '__metadata__' and v['dtype'] == 'F32')
lo, hi = t['data_offsets']
b[8 + n + lo:8 + n + hi] = struct.pack('<f', float('nan')) * ((hi - lo) // 4)
open(sys.argv[2], 'wb').write(b)
PY
expect_error "NaN weights from --init name the weights" \
  "loss is NaN at step 1: training stopped (before any update: the weights of nan.safetensors give it (check them, and the data))" \
  train "${SMALL[@]}" --steps 2 --init nan.safetensors --json
expect_error "eval without checkpoint" "checkpoint" eval --checkpoint missing --data data/val.bin

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
