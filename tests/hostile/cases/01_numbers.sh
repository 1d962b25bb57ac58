# Numbers at and past every bound, in odd spellings.
if want numbers; then
VALS=(0 -1 1e309 nan inf 2147483648 9223372036854775808 0x10 1e3 4x "٤" 010 "4 " "+4")
# train (parse only: --dump-config shows what was accepted)
for flag in layers hidden steps micro-batch warmup save-every eval-every threads loss-scale-window; do
  Tx=$(echo " $T " | sed "s/ --$flag [^ ]*//")
  for v in "${VALS[@]}"; do H "train --$flag '$v'" any "\$L train $Tx --$flag '$v' --dump-config | grep -E '^${flag//-/.} ='"; done
done
for flag in lr dropout beta2 eps clip-grad comm-timeout peak-flops weight-decay; do
  for v in 0 -1 1e309 nan -inf 0x10 1e-400 "1e-3x" "٠.١" 1,5; do H "train --$flag '$v'" any "\$L train $T --$flag '$v' --dump-config | grep -E '^${flag//-/.} ='"; done
done
for v in 0 -1 010 0x10 18446744073709551615 18446744073709551616 1e3 " 7"; do H "train --seed '$v'" any "\$L train $T --seed '$v' --dump-config | grep '^seed'"; done
# eval / sample
for v in 0 -1 010 0x10 1e3 2147483648 4x; do H "eval --batches '$v'" any "\$L eval --checkpoint \$F/ck --data \$F/data/val.bin --batches '$v' --json"; done
for v in 0 -1 010 1e3 2147483648; do H "eval --micro-batch '$v'" any "\$L eval --checkpoint \$F/ck --data \$F/data/val.bin --micro-batch '$v' --batches 1"; done
for v in 0 -1 010 0x10 16777217 1e3; do H "sample --tokens '$v'" any "\$L sample --checkpoint \$F/ck --tokens '$v' | head -c 100"; done
for v in 0 -1 nan inf 1e-300 1e309 0x1p-3 1e6 1e7; do H "sample --temperature '$v'" any "\$L sample --checkpoint \$F/ck --tokens 5 --temperature '$v'"; done
for v in 0 1 255 256 257 65536 65537 010; do H "sample --top-k '$v'" any "\$L sample --checkpoint \$F/ck --tokens 5 --top-k '$v'"; done
for v in -1 010 0x10 18446744073709551616; do H "sample --seed '$v'" any "\$L sample --checkpoint \$F/ck --tokens 5 --seed '$v'"; done
# plan
for flag in layers hidden heads seq-len vocab micro-batch global-batch gpus threads top; do
  for v in 0 -1 010 0x10 2147483648 1e3; do H "plan --$flag '$v'" any "\$L plan --layers 2 --hidden 64 --heads 2 --$flag '$v' --json | head -c 200"; done
done
for v in 0 -1 nan inf 1e-300 0x10; do H "plan --iteration-time '$v'" any "\$L plan --layers 2 --hidden 64 --heads 2 --iteration-time '$v' | head -3"; done
for v in 0 -1 abc 1e400 312T 312t 1.5E 0x10T nanT inf; do H "plan --peak-flops '$v'" any "\$L plan --layers 2 --hidden 64 --heads 2 --peak-flops '$v' | head -3"; done
for v in 0 -1 80 80GB 80GiB 1.5GiB 1e400 80XB nan 18446744073709551616 9223372036854775807 80gb " 80GB" 80GB_; do H "plan --gpu-memory '$v'" any "\$L plan --layers 2 --hidden 64 --heads 2 --gpu-memory '$v' | head -3"; done
# groups / schedule / bench / prepare
for v in 0 -1 010 0x10 1048577 2147483648 1e3; do H "groups --world '$v'" any "\$L groups --world '$v' | head -3"; done
for v in 0 -1 3 010; do H "groups -t '$v'" any "\$L groups --world 4 --tensor-model-parallel-size '$v' | head -3"; done
for v in 0 -1 010 0x10 1e3 1048577; do H "schedule --micro-batches '$v'" any "\$L schedule --pipeline-model-parallel-size 2 --micro-batches '$v' | head -3"; done
for flag in forward-time backward-time weight-time p2p-latency head-time; do
  for v in -1 nan inf 1e309 0x10; do H "schedule --$flag '$v'" any "\$L schedule --pipeline-model-parallel-size 2 --micro-batches 4 --$flag '$v' | head -3"; done
done
for v in 0 1001 -1 010; do H "schedule --steps '$v'" any "\$L schedule --pipeline-model-parallel-size 2 --micro-batches 4 --schedule pipedream-2bw --steps '$v' | head -3"; done
for v in -1 nan inf 61 0x10; do H "bench --seconds '$v'" any "\$L bench --seconds '$v' --json"; done
for v in 0 -1 abc 1e400 16QiB 64KiB 1 nan; do H "bench --max-bytes '$v'" any "\$L bench --seconds 0.01 --max-bytes '$v' --json | head -c 100"; done
for v in 299 300 65537 010 0x200 1e3; do H "prepare --vocab-size '$v'" any "\$L prepare --input \$F/corpus.txt --out out --tokenizer bpe --vocab-size '$v'"; done
for v in 0 -1 1e400 abc 1GiB 1.5Q nan 1B; do H "train --memory-budget '$v'" any "\$L train $T --steps 1 --recompute auto --memory-budget '$v'"; done
fi
