#!/usr/bin/env bash
# Hostile use, classes "every parser validates every field", "numeric flags have bounds", "no flag
# is silently ignored" and sampling at the extremes: each case ends with one stderr line naming the
# cause, exit 1 (2 for usage), no signal, and no file of the user's touched.
set -u
LATTICE=$(realpath "$1")
SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$HERE/lib/check.sh"
. "$HERE/lib/hostile.sh"

hostile_corpus
MODEL=(--data data --layers 2 --hidden 32 --heads 4 --seq-len 32 --micro-batch 4 --threads 1)
"$LATTICE" train "${MODEL[@]}" --steps 2 --save ck --seed 7 2>/dev/null
PROTECT=ck

# trainer.json: every field it reads is checked (a copy of the checkpoint edited by python). Its sum is
# dropped from the manifest too (as by a hand-edit that mended the manifest, or a checkpoint saved
# before trainer.json was summed): the field checks are the line behind the sum.
edit() {  # edit NAME PYTHON-STATEMENT: a copy of ck with trainer.json changed
  rm -rf "$1" && cp -r ck "$1"
  python3 -c "import json; p='$1/trainer.json'; d=json.load(open(p)); $2; json.dump(d, open(p, 'w'))
p='$1/lattice-checkpoint.json'; m=json.load(open(p)); del m['sums']['trainer.json']; json.dump(m, open(p, 'w'))"
}
edit no_step "del d['step']"
hostile "trainer.json without step" 1 'no_step/trainer.json has no "step"' -- train "${MODEL[@]}" --steps 4 --resume no_step
edit wide "d['model']['hidden'] = 2**32 + 64"
hostile "trainer.json hidden 2^32+64" 1 '"hidden" = 4294967360 is outside' -- train "${MODEL[@]}" --steps 4 --resume wide
edit frac "d['model']['layers'] = 2.7"
hostile "trainer.json layers 2.7" 1 '"layers" must be an integer' -- train "${MODEL[@]}" --steps 4 --resume frac
edit huge "d['step'] = 1e20"
hostile "trainer.json step 1e20" 1 '"step" must be an integer' -- train "${MODEL[@]}" --steps 4 --resume huge
edit badseed "d['seed'] = -3"
hostile "trainer.json negative seed" 1 '"seed" must be a non-negative integer' -- train "${MODEL[@]}" --steps 4 --resume badseed
rm -rf notjson && cp -r ck notjson && echo "{ step: 3" > notjson/trainer.json
hostile "trainer.json not JSON" 1 "notjson/trainer.json is not valid JSON" -- train "${MODEL[@]}" --steps 4 --resume notjson
hostile "eval of a checkpoint with a bad trainer.json" 1 '"layers" must be an integer' -- \
  eval --checkpoint frac --data data/val.bin --batches 1

# llm.c .bin: a padded vocabulary below the vocabulary (Vp 0 and 1 with V 65536 read past a buffer).
for vp in 0 1; do
  hostile "llm.c .bin with Vp=$vp, V=65536" 1 "llm.c|padded vocab|Vp" -- \
    eval --checkpoint "$HERE/../fuzz/regressions/llmc/vp${vp}_vocab65536.bin" --data data/val.bin \
    --layers 1 --hidden 1 --heads 1 --seq-len 1 --vocab 65536 --batches 1
done

# TOML config files: strict. bad_config NAME FILE CONTENTS PATTERN: FILE holding CONTENTS (printf's
# format) is refused in one line, exit 2.
bad_config() {
  # shellcheck disable=SC2059
  printf "$3" > "$2"
  hostile "config: $1" 2 "$4" -- train "${MODEL[@]}" --steps 1 --config "$2"
}
bad_config "misspelt key" misspelt.toml 'layerz = 3\n' "misspelt.toml:1: layerz is not a flag of lattice train"
bad_config "keys under a table" table.toml '[model]\nlayers = 3\n' "table.toml:1: tables are not flags"
bad_config "duplicate key" dup.toml 'layers = 2\nlayers = 3\n' "dup.toml:2: layers is defined twice \(first on line 1\)"
bad_config "not TOML" prose.toml 'layers 3\n' "prose.toml:1:"
bad_config "wrong type" type.toml 'layers = "three"\n' "type.toml:1: layers takes an integer"
bad_config "bool for a number" type2.toml 'lr = true\n' "type2.toml:1: lr takes a number"
# A NUL byte after a bare value was passed on, and the flag's message cut at it ("... (got 2");
# a bare key was called a dotted key; dump-config = true made every run of the file print and stop.
bad_config "a NUL byte after a bare value" nulbare.toml 'layers = 2\0\n' "nulbare.toml:1: a NUL byte"
bad_config "a key alone" barekey.toml 'layers\n' "barekey.toml:1: layers: a key without a value"
bad_config "a comment for a value" commentvalue.toml 'layers = # two\n' "commentvalue.toml:1: layers: a key without a value"
bad_config "dump-config in the file" dumpkey.toml 'dump-config = true\n' \
  "dumpkey.toml:1: dump-config: --dump-config is given on the command line"
# TOML's number grammar (a digit on each side of the point; strtod read .5 and 5.), and a quoted key
# that is no flag's name (quoted keys were all refused as "expected key = value").
bad_config "a point without a digit before it" point.toml 'lr = .5\n' "point.toml:1: lr: '.5' is not a TOML number"
bad_config "a point without a digit after it" point2.toml 'lr = 5.\n' "point2.toml:1: lr: '5.' is not a TOML number"
bad_config "a quoted key that is no flag" qkey.toml '"lay ers" = 2\n' 'qkey.toml:1: the quoted key "lay ers" is not a flag'
bad_config "a quoted key twice" qdup.toml '"layers" = 1\nlayers = 2\n' "qdup.toml:2: layers is defined twice"
hostile "config: missing file" 2 "config nowhere.toml" -- train "${MODEL[@]}" --steps 1 --config nowhere.toml
printf 'layers = 1\n"hidden" = 16\n\x27heads\x27 = 2\nsequence-parallel = false\nlr-schedule = "constant"\nlr = 1e-3\n' > good.toml
"$LATTICE" train --data data --seq-len 16 --micro-batch 2 --steps 1 --config good.toml --json > good.jsonl 2>/dev/null
check "config: a valid file of every kind of value (and key) trains" grep -q '"event":"summary"' good.jsonl

# Numeric flags have bounds in every command.
hostile "train --threads 100000" 1 "--threads must be between 0" -- train "${MODEL[@]}" --steps 1 --threads 100000
hostile "train --hidden 2000000000" 1 "--hidden must be between 1 and" -- train "${MODEL[@]}" --steps 1 --hidden 2000000000
hostile "train --micro-batch 100000000" 1 "--micro-batch must be between 1 and" -- train "${MODEL[@]}" --steps 1 --micro-batch 100000000
# plan sizes vocabularies up to 2^20; a model lattice runs reads uint16 token ids: one line says which.
hostile "train --vocab 70000" 1 "a vocabulary of 70000 pieces: lattice trains, evaluates and samples models of at most 65536 \(its token files hold uint16 ids\); lattice plan sizes up to 1048576" -- \
  train "${MODEL[@]}" --steps 1 --vocab 70000
hostile "eval of llm.c weights at vocabulary 70000" 1 "a vocabulary of 70000 pieces: lattice trains, evaluates and samples" -- \
  eval --checkpoint "$HERE/../fuzz/regressions/llmc/vp0_vocab65536.bin" --data data/val.bin \
  --layers 1 --hidden 1 --heads 1 --seq-len 1 --vocab 70000 --batches 1
hostile "train at 100k wide" 1 "needs at least .* GiB, more than this machine" -- train "${MODEL[@]}" --steps 1 --hidden 131072 --heads 1
hostile "train --lr nan" 1 "--lr must be a finite" -- train "${MODEL[@]}" --steps 1 --lr nan
hostile "eval --micro-batch 100000000" 1 "--micro-batch must be between 1 and" -- eval --checkpoint ck --data data/val.bin --micro-batch 100000000
hostile "eval --micro-batch 1000000" 1 "needs at least .* GiB" -- eval --checkpoint ck --data data/val.bin --micro-batch 1000000
hostile "sample --temperature inf" 1 "--temperature must be a finite number" -- sample --checkpoint ck --temperature inf
hostile "sample --tokens 2^30" 1 "--tokens must be between 0 and" -- sample --checkpoint ck --tokens 1073741824
hostile "plan --gpus 1073741824" 1 "--gpus must be between 1 and" -- plan --layers 2 --hidden 64 --heads 4 --gpus 1073741824
hostile "plan --hidden 2000000000" 1 "--hidden must be between 1 and" -- plan --layers 2 --hidden 2000000000 --heads 4
hostile "plan --search --gpus 1073741824" 1 "--gpus must be between 1 and" -- plan --search --layers 2 --hidden 64 --heads 4 --gpus 1073741824
hostile "schedule --p2p-latency inf" 1 "--p2p-latency must be a finite" -- schedule --pipeline-model-parallel-size 2 --micro-batches 4 --p2p-latency inf
hostile "schedule -p 1000000" 1 "between 1 and" -- schedule --pipeline-model-parallel-size 1000000 --micro-batches 4

# Flags that used to be silently ignored are errors, or honoured.
hostile "--init with --resume" 1 "--init and --resume both given" -- train "${MODEL[@]}" --steps 4 --resume ck --init ck
hostile "--seed that differs on resume" 1 "--seed 8 differs from the seed of checkpoint ck \(7\)" -- train "${MODEL[@]}" --steps 4 --resume ck --seed 8
"$LATTICE" train "${MODEL[@]}" --steps 3 --resume ck --seed 7 --save ck_same 2>/dev/null
check "--seed equal to the checkpoint's is accepted" test -s ck_same/model.safetensors
hostile "--steps below the checkpoint's step" 1 "--steps 1 is below the step of checkpoint ck \(2\)" -- train "${MODEL[@]}" --steps 1 --resume ck
"$LATTICE" train --data data --layers 3 --hidden 32 --heads 4 --seq-len 32 --micro-batch 4 --threads 1 --steps 1 --save ck3 2>/dev/null
hostile "--init from another shape" 1 "checkpoint ck3 holds another model \(layers 3, this run 2\)" -- train "${MODEL[@]}" --steps 1 --init ck3
# Without the shape's flags, --init takes the checkpoint's shape (the weights fix it), not the defaults.
"$LATTICE" train --data data --threads 1 --micro-batch 4 --steps 1 --init ck3 > init3.out 2> init3.err
check "--init without the model's flags: the checkpoint's shape, named" \
  grep -q "the model's shape from --init ck3: --layers 3 --hidden 32 --heads 4 --seq-len 32 (" init3.err
hostile "--init with two sizes of another shape: both named" 1 \
  "checkpoint ck3 holds another model \(layers 3, this run 2; hidden 32, this run 64\)" -- \
  train "${MODEL[@]}" --steps 1 --init ck3 --hidden 64
hostile "--init from another shape's safetensors" 1 "holds h.2.* which this model \(2 layers\) does not have" -- \
  train "${MODEL[@]}" --steps 1 --init ck3/model.safetensors
hostile "--eval-batches 0" 1 "--eval-batches must be between 1" -- train "${MODEL[@]}" --steps 2 --eval-every 1 --eval-batches 0
hostile "--min-lr above --lr" 1 "--min-lr .* is above --lr" -- train "${MODEL[@]}" --steps 2 --lr 1e-4 --min-lr 1e-3
hostile "--recompute-layers -1" 2 "--recompute-layers" -- train "${MODEL[@]}" --steps 1 --recompute full --recompute-layers -1
hostile "--schedule foo with one stage" 1 "schedule" -- train "${MODEL[@]}" --steps 1 --schedule foo
"$LATTICE" train "${MODEL[@]}" --steps 4 --eval-every 2 --eval-batches 1 --json > evals.jsonl 2>/dev/null
check "--eval-every under --json prints eval events" test "$(grep -c '"event":"eval"' evals.jsonl)" -eq 2
# eval of weights that are NaN: a checkpoint whose model.safetensors holds NaNs.
rm -rf nanck && cp -r ck nanck
python3 - <<'PYEOF'
import json, struct
p = "nanck/model.safetensors"
raw = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
b, e = header["ln_f.weight"]["data_offsets"]
for i in range(8 + n + b, 8 + n + e, 4): raw[i:i + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(raw)
m = json.load(open("nanck/lattice-checkpoint.json"))  # as a checkpoint from before the manifest's sums
m.pop("sums"); json.dump(m, open("nanck/lattice-checkpoint.json", "w"))
t = json.load(open("nanck/trainer.json"))  # (and before lattice_version, which came with them)
t.pop("lattice_version"); json.dump(t, open("nanck/trainer.json", "w"))
PYEOF
hostile "eval of NaN weights" 1 "give a NaN loss" -- eval --checkpoint nanck --data data/val.bin --batches 1

# Sampling at the extremes: temperature -> 0 is greedy, and top-k 1 is greedy.
"$LATTICE" sample --checkpoint ck --prompt "In the" --tokens 30 --temperature 0.0001 > cold.txt 2>/dev/null
"$LATTICE" sample --checkpoint ck --prompt "In the" --tokens 30 --top-k 1 --seed 5 > greedy.txt 2>/dev/null
"$LATTICE" sample --checkpoint ck --prompt "In the" --tokens 30 --temperature 0.0001 --top-k 1 --seed 9 > both.txt 2>/dev/null
check "temperature 1e-4 decodes greedily (= top-k 1)" cmp -s cold.txt greedy.txt
check "top-k 1 is greedy whatever the seed" cmp -s greedy.txt both.txt
check "greedy text is the prompt plus 30 bytes" test "$(head -c 6 greedy.txt)" = "In the" -a "$(wc -c < greedy.txt)" -ge 36

# Found by the hostile pass of this issue (each once silent, unclear or a hang).
hostile "--seed -1" 2 "a seed is a non-negative integer" -- train "${MODEL[@]}" --steps 1 --seed -1
hostile "--seed 2^64" 2 "a seed is below 2\^64" -- train "${MODEL[@]}" --steps 1 --seed 18446744073709551616
hostile "--steps ''" 2 "an empty value for --steps" -- train "${MODEL[@]}" --steps ''
hostile "--steps 1e20" 1 "--steps must be between 0 and 2\^40" -- train "${MODEL[@]}" --steps 99999999999999999999
hostile "resume with another --shuffle" 1 "--shuffle off differs from checkpoint ck" -- train "${MODEL[@]}" --steps 4 --resume ck --shuffle off
hostile "resume with another --global-batch" 1 "--global-batch 8 differs from checkpoint ck" -- train "${MODEL[@]}" --steps 4 --resume ck --global-batch 8
hostile "eval --dropout" 1 "--dropout does not apply here" -- eval --checkpoint ck --data data/val.bin --dropout 5
hostile "--zero-prefetch without --zero 3" 1 "--zero-prefetch applies to --zero 3 only" -- train "${MODEL[@]}" --steps 1 --zero-prefetch off --zero 1
printf 'steps = 2\n' > a.toml
hostile "--config twice" 2 "--config given twice" -- train "${MODEL[@]}" --steps 1 --config a.toml --config misspelt.toml
printf '\xef\xbb\xbflayers = 1\nsave = "ck_\\u00e9"\n' > bom.toml
"$LATTICE" train "${MODEL[@]}" --steps 1 --config bom.toml 2>/dev/null
check "config: a byte-order mark and a \\u escape are TOML" test -s "ck_é/model.safetensors"
hostile "plan --sequence-parallel with t = 1" 1 "--sequence-parallel needs tensor parallelism" -- plan --layers 2 --hidden 64 --heads 4 --sequence-parallel
hostile "schedule --trace-step without a trace" 1 "--trace-step needs --from-trace" -- schedule --pipeline-model-parallel-size 2 --micro-batches 4 --trace-step 5
echo '{"traceEvents": [{"cat":"forward","args":{"step":1},"tid":"zero","ts":1,"dur":5}]}' > bad_trace.json
hostile "schedule --from-trace of a foreign JSON" 1 "trace bad_trace.json is not a lattice trace" -- \
  schedule --pipeline-model-parallel-size 2 --micro-batches 4 --from-trace bad_trace.json
hostile "schedule 4096 x 2^20" 1 "must be at most .*: the schedule would not fit" -- schedule --pipeline-model-parallel-size 4096 --micro-batches 1048576
mkfifo pipe.txt
hostile "prepare from a FIFO" 1 "input pipe.txt is not a regular file" -- prepare --input pipe.txt --out fifo_out
hostile "--config from a FIFO" 2 "config pipe.txt is not a regular file" -- train "${MODEL[@]}" --steps 1 --config pipe.txt
hostile "a newline in a path" 1 "^lattice train: error: .*" -- train --data $'bad\npath' --steps 1

# The second hostile pass: a library's wording never reaches the user's line.
rm -rf emptyjson && cp -r ck emptyjson && : > emptyjson/trainer.json
hostile "an empty trainer.json" 1 "emptyjson/trainer.json is not valid JSON: parse error at line 1" -- \
  eval --checkpoint emptyjson --data data/val.bin --batches 1
check "... without nlohmann's tag" sh -c "! grep -q 'json.exception' hostile.err"
: > empty_bench.json
hostile "plan --hardware of an empty file" 1 "empty_bench.json is not a lattice bench result: parse error" -- \
  plan --layers 2 --hidden 64 --heads 4 --hardware empty_bench.json
check "... without nlohmann's tag" sh -c "! grep -q 'json.exception' hostile.err"
long=$(printf 'n%.0s' $(seq 1 300))
hostile "--data with a 300-byte name" 1 "$long/.*: File name too long" -- train --data "$long" --steps 1
check "... told as the path and why, not std::filesystem's words" sh -c "! grep -q 'filesystem error' hostile.err"
# A byte of a tensor's data changed after the save (no parser can see it: it reads as a weight) is
# named by the manifest's sum, for eval, sample, --resume and --init alike.
rm -rf flipped && cp -r ck flipped
python3 -c "
p = 'flipped/model.safetensors'; b = bytearray(open(p, 'rb').read()); b[-100] ^= 1; open(p, 'wb').write(b)"
for use in "eval --checkpoint flipped --data data/val.bin --batches 1" "sample --checkpoint flipped --tokens 2" \
           "train ${MODEL[*]} --steps 4 --resume flipped" "train ${MODEL[*]} --steps 1 --init flipped"; do
  # shellcheck disable=SC2086
  hostile "a flipped bit in model.safetensors: ${use%% *}" 1 "checkpoint flipped: model.safetensors is not the file the save wrote \(its sum differs" -- $use
done
check "the manifest records a sum of every file but itself, the save's marker and config.json" python3 -c "
import json; m = json.load(open('ck/lattice-checkpoint.json'))
assert sorted(m['sums']) == sorted(set(m['files']) - {'lattice-checkpoint.json', '.lattice-save', 'config.json'}) and 'trainer.json' in m['sums'], m"
# A one-bit edit of trainer.json that leaves a valid value (lr 0.003 -> 0.007: 3 is 0x33, 7 0x37) passes
# every field check; its sum names it on resume.
rm -rf lr_bit && cp -r ck lr_bit && python3 -c "
p = 'lr_bit/trainer.json'; t = open(p).read(); assert '\"lr\": 0.003' in t; open(p, 'w').write(t.replace('\"lr\": 0.003', '\"lr\": 0.007'))"
for use in "train ${MODEL[*]} --steps 4 --resume lr_bit" "eval --checkpoint lr_bit --data data/val.bin --batches 1"; do
  # shellcheck disable=SC2086
  hostile "a one-bit valid edit of trainer.json: ${use%% *}" 1 "checkpoint lr_bit: trainer.json is not the file the save wrote \(its sum differs" -- $use
done
# A manifest edited so that nothing would be checked: refused, not taken as a checkpoint of no sums.
manifest_edit() {  # manifest_edit NAME PYTHON-EXPRESSION-OF-m: a copy of ck whose manifest is replaced
  rm -rf "$1" && cp -r ck "$1" && python3 -c "
import json; p = '$1/lattice-checkpoint.json'; m = json.load(open(p)); json.dump($2, open(p, 'w'))"
}
manifest_edit no_sums "{k: v for k, v in m.items() if k != 'sums'}"
manifest_edit empty_sums "dict(m, sums={})"
manifest_edit list_manifest "[]"
manifest_edit ghost "dict(m, sums=dict(m['sums'], ghost=m['sums']['trainer.json']))"
hostile "a manifest without sums" 1 'no_sums/lattice-checkpoint.json has no "sums": its files cannot be checked' -- \
  eval --checkpoint no_sums --data data/val.bin --batches 1
hostile "a manifest with empty sums" 1 "empty_sums/lattice-checkpoint.json records no sum of [a-z]+.safetensors" -- \
  eval --checkpoint empty_sums --data data/val.bin --batches 1
hostile "a manifest that is a list" 1 "list_manifest/lattice-checkpoint.json is not a checkpoint manifest \(not a JSON object\)" -- \
  train "${MODEL[@]}" --steps 4 --resume list_manifest
hostile "a summed file gone: resume" 1 "checkpoint ghost: ghost, which lattice-checkpoint.json lists with its sum, is missing" -- \
  train "${MODEL[@]}" --steps 4 --resume ghost
# config.json, the Hugging Face export, may gain keys for other tools: not summed, its keys checked.
rm -rf hf_key && cp -r ck hf_key && python3 -c "
import json; p = 'hf_key/config.json'; d = json.load(open(p)); d['eos_token_id'] = 0; json.dump(d, open(p, 'w'))"
"$LATTICE" train "${MODEL[@]}" --steps 4 --resume hf_key --save hf_key > /dev/null 2> hf_key.err
check "a config.json with a key added for another tool resumes ($(tail -1 hf_key.err))" test $? -eq 0
# Without its manifest a checkpoint's files cannot be checked: refused, not loaded unchecked.
rm -rf no_manifest && cp -r ck no_manifest && rm no_manifest/lattice-checkpoint.json
for use in "eval --checkpoint no_manifest --data data/val.bin --batches 1" "train ${MODEL[*]} --steps 4 --resume no_manifest"; do
  # shellcheck disable=SC2086
  hostile "a checkpoint without its manifest: ${use%% *}" 1 "checkpoint no_manifest has no lattice-checkpoint.json, which the lattice that saved it writes" -- $use
done
# SentencePiece's own words (its source file and line, a damaged model's raw bytes) are not the line.
"$LATTICE" prepare --input corpus.txt --out bpe_data --tokenizer bpe --vocab-size 300 2>/dev/null
rm -rf bad_model && cp -r bpe_data bad_model && head -c 100 /dev/urandom > bad_model/tokenizer.model
hostile "a tokenizer.model of random bytes" 1 "bad_model/tokenizer.model is not a SentencePiece model: it does not parse" -- \
  train --data bad_model --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1
check "... without SentencePiece's source line" sh -c "! grep -q '\.cc(' hostile.err"
# The environment: an OMP_NUM_THREADS libgomp cannot start (100000 died of SIGSEGV inside it).
OMP_NUM_THREADS=100000 hostile "OMP_NUM_THREADS=100000" 1 "OMP_NUM_THREADS=100000 asks for more threads than lattice runs \(at most 4096" -- \
  train "${MODEL[@]}" --steps 1
# Not a count: libgomp warned (its own two lines, before main) and took every core; now exit 1 as well.
for v in 0 abc 1.5 "2,x"; do
  OMP_NUM_THREADS=$v "$LATTICE" train "${MODEL[@]}" --steps 1 > /dev/null 2> omp.err
  check "OMP_NUM_THREADS=$v: exit 1, lattice's line naming it" \
    bash -c "[ $? -eq 1 ] && grep -q 'lattice: error: OMP_NUM_THREADS=$v is not a thread count' omp.err"
done
# A test hook naming a FIFO (or a device) is not read: the run goes on, its MFU n/a (it hung on the FIFO).
rm -f cpuinfo.fifo && mkfifo cpuinfo.fifo
LATTICE_CPUINFO=cpuinfo.fifo timeout 60 "$LATTICE" train "${MODEL[@]}" --steps 1 > /dev/null 2> fifo_cpuinfo.err
check "LATTICE_CPUINFO naming a FIFO: the run ends (exit $?), MFU n/a" grep -q "MFU n/a" fifo_cpuinfo.err
# The GEMM A/B switch misspelt: refused, not silently the default.
LATTICE_GEMM=Whole hostile "LATTICE_GEMM=Whole" 1 "LATTICE_GEMM=Whole is neither whole nor parts" -- \
  train "${MODEL[@]}" --steps 1
LATTICE_GEMM_BF16=wide hostile "LATTICE_GEMM_BF16=wide" 1 "LATTICE_GEMM_BF16=wide is neither native nor widened" -- \
  train "${MODEL[@]}" --steps 1
# The GPU's epilogue switch misspelt: refused on any build, not silently on.
LATTICE_CUDA_GEMM_EPILOGUES=off hostile "LATTICE_CUDA_GEMM_EPILOGUES=off" 1 \
  "LATTICE_CUDA_GEMM_EPILOGUES=off is neither 0 nor 1" -- train "${MODEL[@]}" --steps 1
LATTICE_CUDA_GEMM_TUNE=repotr hostile "LATTICE_CUDA_GEMM_TUNE=repotr" 1 \
  "LATTICE_CUDA_GEMM_TUNE=repotr is none of 0, 1 and report" -- train "${MODEL[@]}" --steps 1
LATTICE_CUDA_ATTENTION_DENSE=no hostile "LATTICE_CUDA_ATTENTION_DENSE=no" 1 \
  "LATTICE_CUDA_ATTENTION_DENSE=no is neither 0 nor 1" -- train "${MODEL[@]}" --steps 1
# lattice --help into a full disk is an error, as every command's output is.
"$LATTICE" --help > /dev/full 2> help.err
status=$?
check "lattice --help > /dev/full exits 1 (got $status)" test "$status" -eq 1
check "... saying so once" test "$(grep -c 'cannot write standard output' help.err)" -eq 1

hostile_summary
echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
