# --config TOML files and --dump-config round trips.
if want config; then
cfg() { printf "$1" > "$2"; }
C="--data \$F/data --steps 1 --threads 1"
for body in 'layers = 1.0\n' 'layers = 1e0\n' 'layers = 0x1\n' 'layers = +1\n' 'layers = 01\n' 'layers = 1_0\n' 'layers = [1]\n' 'layers = {a=1}\n' \
  'layers = 9223372036854775808\n' 'layers = -9223372036854775809\n' 'lr = nan\n' 'lr = inf\n' 'lr = -inf\n' 'lr = 1e999\n' 'lr = .5\n' 'lr = 5.\n' 'lr = 1__0\n' \
  'seed = 18446744073709551615\n' 'seed = 18446744073709551616\n' 'seed = -1\n' 'json = "true"\n' 'json = 1\n' 'json = false\n' 'json = TRUE\n' 'dump-config = true\n' 'config = "x.toml"\n' \
  'help = true\n' 'save = ""\n' 'save = 1\n' 'data = "/dev/null"\n' "save = 'lit'\n" 'save = """x"""\n' 'save = "a\\\\qb"\n' 'save = "a\\\\u0000b"\n' 'save = "\\\\uD800"\n' \
  'layers = 1 # comment\n' 'layers = 1 junk\n' '= 1\n' 'layers =\n' 'layers\n' '"layers" = 1\n' 'a.b = 1\n' '[table]\n' '[[arr]]\n' 'LAYERS = 1\n' 'layers= 1\r\n' \
  'num_layers = 1\n' 'hidden-size = 32\nhidden = 32\n' 'heads = 2\nheads = 2\n' 'zero = 3\nuse-distributed-optimizer = true\n' 'use-distributed-optimizer = false\n' \
  'moe-no-drop = false\nmoe-expert-capacity-factor = 2\n' 'overwrite = true\n' 'recompute = "full"\nrecompute-plan = "c"\n' 'schedule = "zb-h1"\n' \
  'steps = 1\n\0\n' '\xff\xfe\n' 'layers = 1\n\xc3\x28 = 2\n' "$(printf 'x%.0s' $(seq 1 5000)) = 1\n"; do
  N1=$((N + 1))
  H "config: $(printf '%s' "$body" | head -c 60)" any "printf '$body' > c.toml; \$L train $C --config c.toml --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 2>&1 >/dev/null | head -5 >&2; exit \${PIPESTATUS[0]}"
done
H "config: 50 MB of comments" any "python3 -c \"open('c.toml','w').write('# x\\n'*12000000 + 'layers = 1\\n')\"; \$L train $C --config c.toml --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --dump-config | grep '^layers'"
H "config: one 20 MB line" fail "python3 -c \"open('c.toml','w').write('save = \\\"' + 'a'*20000000 + '\\\"\\n')\"; \$L train $C --config c.toml --layers 1 --hidden 32 --heads 2 --seq-len 16"
H "config: 1 GB sparse file" fail "truncate -s 1G c.toml; \$L train $C --config c.toml"
H "config: /dev/zero" fail "\$L train $C --config /dev/zero"
H "config: a directory" fail "\$L train $C --config \$F"
H "config: for eval (has no --config?)" any "\$L eval --checkpoint \$F/ck --data \$F/data/val.bin --config \$F/good.toml"
H "config: plan --config" any "\$L plan --config \$F/good.toml"
H "config: = form" ok "\$L train $C --config=\$F/good.toml --micro-batch 2 --dump-config"
H "config: overridden on the line" ok "\$L train $C --config \$F/good.toml --layers 2 --micro-batch 2 --dump-config | grep -q '^layers = 2'"
H "dump-config to /dev/full" fail "\$L train $C --dump-config > /dev/full"
H "dump-config closed stdout" any "\$L train $C --dump-config | head -1"
H "dump-config with a bad value" fail "\$L train $C --dump-config --layers 0"
H "dump-config with --resume" any "\$L train $C --resume \$F/ck --dump-config | grep -q resume"
H "dump-config of an alias" any "\$L train $C --num-layers 3 --dump-config | grep -E '^(num-)?layers'"
H "dump-config round trip: odd save path" ok "\$L train $C --save \"\$(printf 'a\\tb')\" --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: 0x10 steps" ok "\$L train $C --warmup 0x10 --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: +4" ok "\$L train $C --warmup +4 --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: ' 4'" ok "\$L train $C --warmup ' 4' --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: lr 1e-400" ok "\$L train $C --lr 1e-400 --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: lr 0x10" ok "\$L train $C --lr 0x1p-10 --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: seed 010" ok "\$L train $C --seed 010 --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: empty prompt-like flags" ok "\$L train $C --memory-budget 1GiB --recompute auto --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config round trip: pipeline-layers" ok "\$L train $C --layers 4 --pipeline-layers 1,1,1,1 --pipeline-model-parallel-size 4 --dump-config > 1.toml && \$L train --config 1.toml --dump-config > 2.toml && cmp 1.toml 2.toml"
H "dump-config: does it contain what trains" ok "\$L train $C --layers 1 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --dump-config > 1.toml && \$L train --config 1.toml --json | grep -q summary"
H "config + --dump-config + --help" any "\$L train --config \$F/good.toml --help | head -2"
fi
