# Corrupt checkpoints: flipped bytes, truncations, empty files, in each file a checkpoint holds.
if want checkpoints; then
corrupt() {  # corrupt FILE MODE: a copy c of $F/ck with FILE damaged
  echo "cp -r \$F/ck c && python3 -c \"
import os,sys,random
p='c/$1'; m='$2'; b=bytearray(open(p,'rb').read()); random.seed(len(m)*7+len(p))
if m=='empty': b=b''
elif m.startswith('trunc'): b=b[:int(len(b)*float(m[5:]))]
elif m=='flip': 
  for _ in range(8): i=random.randrange(len(b)); b[i]^=0xff
elif m=='flip-head': b[3]^=0x7f
elif m=='flip-json': b[min(20,len(b)-1)]^=0x40
elif m=='grow': b=b+b'\\\\0'*4096
elif m=='rm': os.remove(p); sys.exit(0)
open(p,'wb').write(b)\" && "
}
for file in model.safetensors optimizer.safetensors trainer.json config.json tokenizer.json lattice-checkpoint.json; do
  for mode in empty trunc0.5 trunc0.999 flip flip-head grow rm; do
    [ "$file" != model.safetensors ] && [ "$mode" = flip ] && continue
    S=$(corrupt $file $mode)
    H "eval: $file $mode" any "$S \$L eval --checkpoint c --data \$F/data/val.bin --batches 1"
    H "resume: $file $mode" any "$S \$L train $T --steps 3 --resume c --save c"
  done
done
for mode in flip-json trunc0.3; do
  for file in trainer.json config.json tokenizer.json; do S=$(corrupt $file $mode); H "sample: $file $mode" any "$S \$L sample --checkpoint c --tokens 3"; done
done
S=$(corrupt model.safetensors flip); H "init: model.safetensors flip" any "$S \$L train $T --steps 1 --init c"
S=$(corrupt model.safetensors trunc0.7); H "init file: model.safetensors trunc" fail "$S \$L train $T --steps 1 --init c/model.safetensors"
H "init /dev/zero" fail "\$L train $T --steps 1 --init /dev/zero"
H "init /proc/self/mem" fail "\$L train $T --steps 1 --init /proc/self/mem"
H "safetensors header length huge" fail "python3 -c \"import struct; open('m.safetensors','wb').write(struct.pack('<Q', 2**63) + b'{}')\"; \$L train $T --steps 1 --init m.safetensors"
H "safetensors header length 2^64-1" fail "python3 -c \"import struct; open('m.safetensors','wb').write(struct.pack('<Q', 2**64-1) + b'{}')\"; \$L eval --checkpoint m.safetensors --data \$F/data/val.bin --layers 1 --hidden 32 --heads 2 --seq-len 16"
H "safetensors header {}" fail "python3 -c \"import struct; h=b'{}'; open('m.safetensors','wb').write(struct.pack('<Q', len(h)) + h)\"; \$L train $T --steps 1 --init m.safetensors"
H "safetensors offsets past file" fail "python3 -c \"import struct,json; h=json.dumps({'wte.weight':{'dtype':'F32','shape':[256,32],'data_offsets':[0,32768]}}).encode(); open('m.safetensors','wb').write(struct.pack('<Q', len(h)) + h)\"; \$L train $T --steps 1 --init m.safetensors"
H "safetensors negative shape" fail "python3 -c \"import struct,json; h=json.dumps({'wte.weight':{'dtype':'F32','shape':[-256,32],'data_offsets':[0,4]}}).encode(); open('m.safetensors','wb').write(struct.pack('<Q', len(h)) + h + b'xxxx')\"; \$L train $T --steps 1 --init m.safetensors"
H "safetensors dtype F64" fail "python3 -c \"import struct,json; h=json.dumps({'wte.weight':{'dtype':'F64','shape':[1],'data_offsets':[0,8]}}).encode(); open('m.safetensors','wb').write(struct.pack('<Q', len(h)) + h + b'x'*8)\"; \$L train $T --steps 1 --init m.safetensors"
H "safetensors shape overflow" fail "python3 -c \"import struct,json; h=json.dumps({'wte.weight':{'dtype':'F32','shape':[2**62,2**62],'data_offsets':[0,4]}}).encode(); open('m.safetensors','wb').write(struct.pack('<Q', len(h)) + h + b'x'*4)\"; \$L train $T --steps 1 --init m.safetensors"
H "safetensors duplicate keys" fail "python3 -c \"import struct; h=b'{\\\"a\\\":{\\\"dtype\\\":\\\"F32\\\",\\\"shape\\\":[1],\\\"data_offsets\\\":[0,4]},\\\"a\\\":{\\\"dtype\\\":\\\"F32\\\",\\\"shape\\\":[1],\\\"data_offsets\\\":[0,4]}}'; open('m.safetensors','wb').write(struct.pack('<Q', len(h)) + h + b'x'*4)\"; \$L train $T --steps 1 --init m.safetensors"
H "llm.c .bin empty" fail ": > m.bin; \$L train $T --steps 1 --init m.bin"
H "llm.c .bin junk header" fail "head -c 2048 /dev/urandom > m.bin; \$L train $T --steps 1 --init m.bin"
H "eval --checkpoint a token file" fail "\$L eval --checkpoint \$F/data/val.bin --data \$F/data/val.bin --layers 1 --hidden 32 --heads 2 --seq-len 16"
H "sample --checkpoint model.safetensors file" any "\$L sample --checkpoint \$F/ck/model.safetensors --tokens 3 --layers 1 --hidden 32 --heads 2 --seq-len 16"
H "sample --checkpoint the report dir" fail "\$L sample --checkpoint \$F/rep --tokens 3"
H "sample --checkpoint the data dir" fail "\$L sample --checkpoint \$F/data --tokens 3"
H "eval --checkpoint the data dir" fail "\$L eval --checkpoint \$F/data --data \$F/data/val.bin"
H "resume a data dir" fail "\$L train $T --steps 3 --resume \$F/data"
H "resume a file" fail "\$L train $T --steps 3 --resume \$F/ck/model.safetensors"
H "trainer.json step negative" fail "cp -r \$F/ck c && sed -i 's/\"step\": 2/\"step\": -2/' c/trainer.json && \$L train $T --steps 3 --resume c"
H "trainer.json step above --steps-huge" any "cp -r \$F/ck c && sed -i 's/\"step\": 2/\"step\": 1099511627776/' c/trainer.json && \$L train $T --steps 3 --resume c"
H "trainer.json 100MB" fail "cp -r \$F/ck c && python3 -c \"open('c/trainer.json','a').write(' '*100000000)\" && \$L eval --checkpoint c --data \$F/data/val.bin --batches 1"
H "trainer.json deep nesting" fail "cp -r \$F/ck c && python3 -c \"open('c/trainer.json','w').write('['*100000 + ']'*100000)\" && \$L eval --checkpoint c --data \$F/data/val.bin --batches 1"
H "config.json deep nesting" fail "cp -r \$F/ck c && python3 -c \"open('c/config.json','w').write('{\\\"a\\\":'*50000 + '1' + '}'*50000)\" && \$L eval --checkpoint c --data \$F/data/val.bin --batches 1"
H "tokenizer.json deep nesting" fail "cp -r \$F/ck c && python3 -c \"open('c/tokenizer.json','w').write('['*100000 + ']'*100000)\" && \$L sample --checkpoint c --tokens 2"
H "manifest deep nesting" fail "cp -r \$F/ck c && python3 -c \"open('c/lattice-checkpoint.json','w').write('['*100000 + ']'*100000)\" && \$L train $T --steps 1 --save c"
H "run.jsonl deep nesting" any "cp -r \$F/rep r && python3 -c \"open('r/run.jsonl','a').write('['*100000 + ']'*100000 + '\\n')\" && \$L report r --html r.html"
H "trace.json deep nesting" fail "python3 -c \"open('t.json','w').write('['*100000 + ']'*100000)\" && \$L schedule --pipeline-model-parallel-size 2 --micro-batches 2 --from-trace t.json"
H "bench json deep nesting" fail "python3 -c \"open('b.json','w').write('{\\\"a\\\":'*50000 + '1' + '}'*50000)\" && \$L plan --layers 2 --hidden 64 --heads 2 --hardware b.json"
H "data.json deep nesting" fail "cp -r \$F/bpe d && python3 -c \"open('d/data.json','w').write('['*100000 + ']'*100000)\" && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
# Token files.
for n in 0 1 2 3 511 1023 1025 1027; do
  H "eval token file of $n bytes" fail "head -c $n \$F/data/val.bin > v.bin; \$L eval --checkpoint \$F/ck --data v.bin --batches 1"
done
H "train token file odd size" fail "cp -r \$F/data d && truncate -s -1 d/train.bin && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "train token header lies about count" fail "cp -r \$F/data d && python3 -c \"import struct; b=bytearray(open('d/train.bin','rb').read()); b[8:16]=struct.pack('<q', 2**40); open('d/train.bin','wb').write(b)\" && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "train token header negative count" fail "cp -r \$F/data d && python3 -c \"import struct; b=bytearray(open('d/train.bin','rb').read()); b[8:16]=struct.pack('<q', -5); open('d/train.bin','wb').write(b)\" && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "train token magic wrong" fail "cp -r \$F/data d && printf 'XXXX' | dd of=d/train.bin conv=notrunc 2>/dev/null && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "train tokens above vocab" fail "cp -r \$F/data d && python3 -c \"b=bytearray(open('d/train.bin','rb').read()); b[1024:1030]=b'\\xff\\xff'*3; open('d/train.bin','wb').write(b)\" && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "eval tokens above vocab" fail "python3 -c \"b=bytearray(open('\$F/data/val.bin','rb').read()); b[1024:1030]=b'\\xff\\xff'*3; open('v.bin','wb').write(b)\" && \$L eval --checkpoint \$F/ck --data v.bin --batches 1"
H "train val.bin missing" any "cp -r \$F/data d && rm d/val.bin && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --eval-every 1"
H "train train.bin missing" fail "cp -r \$F/data d && rm d/train.bin && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "train tokenizer.json missing" any "cp -r \$F/bpe d && rm d/tokenizer.json && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "train tokenizer.model corrupt" fail "cp -r \$F/bpe d && head -c 100 /dev/urandom > d/tokenizer.model && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --vocab 300"
H "train tokenizer.model empty" fail "cp -r \$F/bpe d && : > d/tokenizer.model && \$L train --data d --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1"
H "sample bpe ckpt tokenizer.model flipped" fail "\$L train --data \$F/bpe --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --save c 2>/dev/null; python3 -c \"b=bytearray(open('c/tokenizer.model','rb').read()); b[len(b)//2]^=0xff; b[10]^=0xff; open('c/tokenizer.model','wb').write(b)\"; \$L sample --checkpoint c --tokens 3 --prompt hello"
H "sample bpe ckpt tokenizer.model truncated" fail "\$L train --data \$F/bpe --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --save c 2>/dev/null; truncate -s 50 c/tokenizer.model; \$L sample --checkpoint c --tokens 3 --prompt hello"
H "sample bpe ckpt tokenizer.model missing" fail "\$L train --data \$F/bpe --layers 1 --hidden 32 --heads 2 --seq-len 16 --steps 1 --save c 2>/dev/null; rm c/tokenizer.model; \$L sample --checkpoint c --tokens 3 --prompt hello"
H "eval bytes ckpt on bpe data" fail "\$L eval --checkpoint \$F/ck --data \$F/bpe/val.bin --batches 1"
fi
