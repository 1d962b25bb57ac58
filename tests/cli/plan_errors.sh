#!/usr/bin/env bash
# lattice plan: bad layouts exit 1, bad flags exit 2, each with one stderr line naming the cause.
set -uo pipefail
LATTICE=$1; SCRATCH=$2
mkdir -p "$SCRATCH"
. "$(dirname "$0")/lib/subcommand.sh"

expect() { expect_status plan "$@"; }  # expect <status> <text in stderr> <args...>

expect 1 "t·p·DP must equal --gpus" --tensor-model-parallel-size 4 --gpus 6
expect 1 "divisible by the tensor-parallel size" --heads 4 --hidden 128 --tensor-model-parallel-size 8 --gpus 8
expect 1 "must be divisible by p·m" --layers 6 --pipeline-model-parallel-size 4 --gpus 4
expect 1 "multiple of p" --layers 8 --pipeline-model-parallel-size 2 --virtual-stages 2 --global-batch 3 --gpus 2
expect 1 "multiple of micro-batch" --micro-batch 4 --global-batch 6
expect 1 "--recompute must be" --recompute sometimes
# A size or rate that does not parse as one is a usage error, as "--layers abc" (exit 2); one that
# parses but is out of bounds is 1, as "--layers 0".
expect 2 "--gpu-memory has an unknown unit 'xb'" --gpu-memory 80XB
expect 2 "--gpu-memory must be a positive number with an optional unit (got 'abc')" --gpu-memory abc
expect 1 "--gpu-memory must be a positive number with an optional unit (got '0')" --gpu-memory 0
expect 2 "--peak-flops has an unknown suffix 'q'" --peak-flops 312Q
expect 1 "--hardware must be one of" --hardware TPU
expect 1 "--svg needs --paper" --svg "$SCRATCH/figs"
# A model whose bytes would pass int64 (experts: 5.8e17 parameters) is refused, not counted negative as
# "fits"; the largest dense shape the flags allow (1.3e17) is planned (it does not fit).
expect 1 "the model would have 5.76e+17 parameters, past the 2^57" --layers 64 --hidden 65536 --heads 64 \
  --num-experts 65536 --moe-ffn-hidden-size 1048576
expect 1 "the model would have 5.76e+17 parameters" --search --gpus 8 --layers 64 --hidden 65536 --heads 64 \
  --num-experts 65536 --moe-ffn-hidden-size 1048576
if "$LATTICE" plan --layers 10000 --hidden 1048576 --heads 1024 --vocab 65536 --seq-len 65536 2>&1 |
   grep -q "total .* GB of 80.00 GB  (DOES NOT FIT)"; then :; else
  echo "FAIL: the largest dense shape is not planned as not fitting"; fails=$((fails + 1)); fi
expect 1 "--sequence-parallel needs --seq-len (31) divisible by --tensor-model-parallel-size (2)" \
  --sequence-parallel --tensor-model-parallel-size 2 --seq-len 31 --gpus 2  # as train refuses it
expect 1 "--decoder-first/last-pipeline-num-layers (5 + 0) are more than --layers 4" \
  --pipeline-model-parallel-size 2 --gpus 2 --decoder-first-pipeline-num-layers 5 --layers 4
# --search chooses the layout: a layout flag beside it, or --top without it, would be silently dropped.
expect 1 "--zero does not apply to --search, which chooses the layout" --search --gpus 8 --zero 3
expect 1 "--tensor-model-parallel-size does not apply to --search" --search --gpus 8 --tensor-model-parallel-size 2
expect 1 "--top applies to --search" --top 3
# Utilisation against absurd times and peaks (a 300-digit MFU, "inf%" before).
expect 1 "--iteration-time must be 0 (off) or a finite number in \[1e-6, 1e9\]" --iteration-time 1e-300
expect 1 "--peak-flops must be a rate from 1000000 to 1e18" --peak-flops 1e-30T
# An MFU above 100% from a measured time, and a --data of no token files (each printed as if right).
expect 1 "--iteration-time 1e-06 s is shorter than the" --iteration-time 1e-6
mkdir -p "$SCRATCH/empty" && expect 1 "holds no train.bin or val.bin" --data "$SCRATCH/empty"
expect 2 "--no-such-flag" --no-such-flag
# Shapes whose int64 products would overflow before the formulas divide (a·s²·b at 2^20 heads, sequence
# and batch; UBSan saw the signed overflow) are refused in double first, naming the bytes.
expect 1 "the activations of a rank would be 1.09e+25 bytes, past the 2^62" --layers 1 --hidden 1048576 \
  --heads 1048576 --tensor-model-parallel-size 1048576 --gpus 1048576 --seq-len 1048576 --micro-batch 1048576 \
  --global-batch 1048576 --vocab 1048576
# The planner sizes today's large vocabularies (Llama 3's 128,256 pieces; token files, and so train,
# stop at 65,536): planned, not refused, and counted, not clamped: the parameters grow by the padded
# vocabulary's extra rows times h (128,256 pads to 128,256 at t = 1; 65,536 is a multiple of 128).
params_at() { "$LATTICE" plan --layers 2 --hidden 64 --heads 2 --vocab "$1" --json 2> "$SCRATCH/err" |
  python3 -c "import json, sys; print(json.load(sys.stdin)['parameters'])"; }
p_small=$(params_at 65536) p_large=$(params_at 128256)
[ -n "$p_small" ] && [ -n "$p_large" ] && [ $((p_large - p_small)) -eq $(((128256 - 65536) * 64)) ] ||
  fail "plan --vocab 128256: parameters $p_large against $p_small at 65536 ($(cat "$SCRATCH/err"))"
"$LATTICE" plan --layers 80 --hidden 8192 --heads 64 --seq-len 8192 --vocab 128256 --gpus 512 --search --top 1 \
  > "$SCRATCH/out" 2> "$SCRATCH/err" || fail "plan --search at vocabulary 128256: $(cat "$SCRATCH/err")"
expect 1 "--vocab must be between 2 and 2^20 (got 1048577)" --vocab 1048577
expect 2 "--layers" --layers many

"$LATTICE" plan --help > /dev/null || { echo "FAIL: --help"; fails=$((fails + 1)); }
test "$fails" -eq 0 && echo ok
