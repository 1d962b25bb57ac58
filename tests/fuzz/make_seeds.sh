#!/usr/bin/env bash
# Regenerates the seed corpora tests/fuzz/seeds/*/ : valid files as lattice writes them (a tiny
# `lattice prepare` and `lattice train --save`), llm.c checkpoints written by make_llmc.py, and a
# few hand-made edge cases of each format. The seeds are committed; run this only to remake them.
#
#   tests/fuzz/make_seeds.sh [LATTICE_BINARY]     (default: build/lattice)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LATTICE=$(realpath "${1:-$HERE/../../build/lattice}")
SEEDS=$HERE/seeds
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
rm -rf "$SEEDS"
mkdir -p "$SEEDS"/{safetensors,token_file,llmc,trainer_json,toml_config}
cd "$WORK"

# Token files and a checkpoint of a tiny model (kilobytes, so libFuzzer mutates them quickly).
printf 'In the beginning God created the heaven and the earth. And the earth was without form,\nand void; and darkness was upon the face of the deep.\n' > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data >/dev/null 2>&1
cp data/train.bin "$SEEDS/token_file/train.bin"
cp data/val.bin "$SEEDS/token_file/val.bin"
TINY=(--layers 1 --hidden 4 --heads 2 --seq-len 4 --vocab 256 --micro-batch 1 --steps 1 --threads 1)
"$LATTICE" train --data data "${TINY[@]}" --save ck >/dev/null 2>&1
cp ck/model.safetensors "$SEEDS/safetensors/model.safetensors"
cp ck/trainer.json "$SEEDS/trainer_json/trainer.json"
"$LATTICE" train --data data "${TINY[@]}" --optimizer adafactor --params-dtype bf16 --save ck2 >/dev/null 2>&1
cp ck2/trainer.json "$SEEDS/trainer_json/trainer_adafactor_bf16.json"
cp ck2/optimizer.safetensors "$SEEDS/safetensors/optimizer_adafactor.safetensors"

python3 - "$SEEDS" <<'EOF'
import json, struct, sys
seeds = sys.argv[1]

def safetensors(path, tensors, metadata=None, pad=True):
    """tensors: (name, dtype, shape, raw bytes, offset or None); offsets as given (may be unaligned)."""
    header, data, at = {}, b"", 0
    for name, dtype, shape, raw, offset in tensors:
        begin = at if offset is None else offset
        data = data.ljust(begin, b"\0") + raw
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + len(raw)]}
        at = begin + len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)

S = seeds + "/safetensors/"
f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
safetensors(S + "every_dtype.safetensors", [
    ("f64", "F64", [2], struct.pack("<2d", 1.5, -2), None), ("i64", "I64", [1], struct.pack("<q", -7), None),
    ("u64", "U64", [1], struct.pack("<Q", 7), None), ("f32", "F32", [2, 3], f32, None),
    ("i32", "I32", [1], struct.pack("<i", -3), None), ("u32", "U32", [1], struct.pack("<I", 3), None),
    ("f16", "F16", [2], b"\x00\x3c\x00\xc0", None), ("bf16", "BF16", [2], b"\x80\x3f\x00\xc0", None),
    ("i16", "I16", [1], b"\xff\xff", None), ("u16", "U16", [1], b"\x01\x00", None),
    ("i8", "I8", [1], b"\xff", None), ("u8", "U8", [3], b"abc", None), ("bool", "BOOL", [1], b"\x01", None),
], {"format": "pt", "note": "every dtype"})
# F32 and F64 at offsets that are not multiples of 4 or 8 (the format allows it): read aligned.
safetensors(S + "unaligned.safetensors", [
    ("u8", "U8", [3], b"xyz", None), ("f32", "F32", [2, 3], f32, None),
    ("f64", "F64", [1], struct.pack("<d", 0.25), None)], pad=False)
safetensors(S + "scalar_and_empty.safetensors", [
    ("scalar", "F32", [], struct.pack("<f", 9), None), ("empty", "F32", [0, 4], b"", None),
    ("none", "U8", [0], b"", None)], {})
safetensors(S + "no_tensors.safetensors", [], {"optimizer": "adamw"})

# llm.c token files: one without tokens, one with every byte value.
T = seeds + "/token_file/"
def token_file(path, tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    open(path, "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens))
token_file(T + "empty.bin", [])
token_file(T + "every_byte.bin", list(range(256)) + [65535, 50256])

J = seeds + "/trainer_json/"
json.dump({"model": {"layers": 2, "hidden": 8, "heads": 2, "seq_len": 16, "vocab": 65536, "dropout": 0.0}},
          open(J + "model_only.json", "w"))
json.dump({"step": 7, "seed": 1337, "updates_applied": 6, "loss_scale": {"scale": 1024.0, "clean_steps": 3},
           "model": {"layers": 1, "hidden": 4, "heads": 1, "seq_len": 4, "vocab": 2, "dropout": 0.5}},
          open(J + "fp16.json", "w"), indent=2)
EOF

for spec in "2 3 1 1 2 4" "4 5 2 2 4 8" "8 256 1 2 4 256" "1 1 1 1 1 1"; do
  python3 "$HERE/make_llmc.py" "$SEEDS/llmc/gpt2_${spec// /_}.bin" $spec
done

T=$SEEDS/toml_config
cat > "$T/model.toml" <<'EOF'
# the model and layout (long flag names as keys)
layers = 2
hidden = 64
heads = 4
seq-len = 32
vocab = 256
dropout = 0.1
recompute = "selective"
activation-dtype = "bf16"
params-dtype = "fp32"
tensor-model-parallel-size = 1
sequence-parallel = false
EOF
cat > "$T/train.toml" <<'EOF'
data = "data/corpus"
steps = 600
micro-batch = 4
global-batch = 8
lr = 3e-3
min-lr = 3e-4
lr-schedule = 'cosine'
warmup = 20
optimizer = "adamw"
beta1 = 0.9
beta2 = 0.95
eps = 1e-8
weight-decay = 0.1
clip-grad = 1.0
shuffle = "on"
seed = 1337
save = "ckpt"
save-every = 100
json = true
zero = 1
zero-prefetch = "off"
comm-timeout = 300
EOF
cat > "$T/megatron_names.toml" <<'EOF'
num-layers = 4
hidden-size = 128
num-attention-heads = 4
seq-length = 64
micro-batch-size = 2
train-iters = 10
recompute-granularity = "full"
recompute-method = "block"
recompute-num-layers = 2
use-distributed-optimizer = true
adam-beta1 = 0.8
lr-decay-style = "constant"
EOF
cat > "$T/sections_and_quoting.toml" <<'EOF'
# comments, sections, arrays and quoting that CLI11's reader has to get through
[train]
steps = 5
"layers" = 1
trace = 'trace.json'  # a comment after a value
init = """multi
line"""
schedule = "1f1b"

[other.section]
values = [1, 2, 3]
names = ["a", 'b', "c,d"]
EOF
printf 'layers=1\r\nhidden=8\r\nheads=2\r\n\r\n' > "$T/crlf.toml"
: > "$T/empty.toml"
echo "seeds written to $SEEDS: $(find "$SEEDS" -type f | wc -l) files"
