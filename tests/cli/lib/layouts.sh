# Shared by the layout tests (sourced): a corpus, the small model, run NAME NP FLAGS... and
# compare NAME [REFERENCE] (per-step losses to 1e-5 relative, final weights to 1e-5).
# Needs LATTICE and the current directory set; exports the MPI/OpenMP settings for oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Ranks oversubscribe the 2 cores: one thread each, and threads that sleep instead of spinning.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3

. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

for i in $(seq 1 300); do echo "And it came to pass $i that the layouts agreed, every one of them."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
MODEL=(--data data --layers 2 --hidden 64 --heads 4 --seq-len 32 --micro-batch 2 --global-batch 8 --steps 4
       --dropout 0.1 --threads 1 --json)

run() {  # run NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then
    "$LATTICE" train "${MODEL[@]}" --save "ck_$name" "$@" > "$name.jsonl" 2> "$name.err"
  else
    timeout 300 mpirun --oversubscribe -np "$np" "$LATTICE" train "${MODEL[@]}" --save "ck_$name" "$@" \
      > "$name.jsonl" 2> "$name.err"
  fi
  check "$name: exit 0" test $? -eq 0
}

compare() {  # compare NAME [REFERENCE]: losses and weights against the one-rank run
  "$PY" - "$1" "${2:-one}" <<'PYEOF'
import json, struct, sys
name, ref = sys.argv[1], sys.argv[2]
def losses(f):
    return [json.loads(l)["loss"] for l in open(f) if '"event":"step"' in l]
def tensors(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - b) // 4), raw[8 + n + b:8 + n + e])
    return out
a, b = losses(ref + ".jsonl"), losses(name + ".jsonl")
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
wa, wb = tensors("ck_" + ref), tensors("ck_" + name)
assert wa.keys() == wb.keys()
# The key bias's gradient is zero in exact arithmetic (softmax ignores a constant added to every
# key's score), so it is rounding noise; normalising optimizers (Adafactor, SM3) scale that noise
# to full-size steps that differ by layout. With SKIP_KEY_BIAS=1 the K third is left out.
import os
def part(k, v):
    if os.environ.get('SKIP_KEY_BIAS') == '1' and k.endswith('attn.c_attn.bias'):
        third = len(v) // 3
        return v[:third] + v[2 * third:]
    return v
wworst = max(abs(x - y) for k in wa for x, y in zip(part(k, wa[k]), part(k, wb[k])))
print("%s: losses within %.2e relative, weights within %.2e" % (name, worst, wworst))
sys.exit(0 if worst <= 1e-5 and wworst <= 1e-5 else 1)
PYEOF
}

