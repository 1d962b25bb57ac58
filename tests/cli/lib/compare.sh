# compare NAME [REFERENCE]: NAME.jsonl's per-step losses and ck_NAME's final weights against
# REFERENCE's (default one) — losses (and --eval-every's validation losses, when either has them)
# within LOSS_TOL relative, weights within WEIGHT_TOL absolute
# (both default 1e-5; WEIGHT_GAP_REF scales the weight bound, below). Sourced by the layout tests; needs PY and the current directory set.
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
# --eval-every's validation losses, when either run has them: the same steps, the same bound.
evals = lambda f: [(e["step"], e["loss"]) for e in (json.loads(l) for l in open(f) if '"event":"eval"' in l)]
ea, eb = evals(ref + ".jsonl"), evals(name + ".jsonl")
assert [s for s, _ in ea] == [s for s, _ in eb], (ea, eb)
if ea:
    eworst = max(abs(x - y) / abs(x) for (_, x), (_, y) in zip(ea, eb))
    print("%s: %d validation losses within %.2e relative" % (name, len(ea), eworst))
    worst = max(worst, eworst)
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
loss_tol = float(os.environ.get("LOSS_TOL", "1e-5")); weight_tol = float(os.environ.get("WEIGHT_TOL", "1e-5"))
# WEIGHT_GAP_REF=R: the weight bound is E/10, E = how far the reference's precision moved its weights
# from run R's (the same model in fp32): see compare_fp8 below for why a tenth separates a few
# flipped roundings from a layout that rounds differently everywhere.
if os.environ.get("WEIGHT_GAP_REF"):
    wr = tensors("ck_" + os.environ["WEIGHT_GAP_REF"])
    E = max(abs(x - y) for k in wa for x, y in zip(part(k, wa[k]), part(k, wr[k])))
    weight_tol = E / 10
    print("%s: the weight bound is E/10 = %.2e (%s from %s)" % (name, weight_tol, ref, os.environ["WEIGHT_GAP_REF"]))
sys.exit(0 if worst <= loss_tol and wworst <= weight_tol else 1)
PYEOF
}

# continues FULL RESUMED [TOL]: a run resumed from step 2's checkpoint (RESUMED.jsonl, two steps)
# repeats steps 3-4 of the uninterrupted run (FULL.jsonl): losses within TOL relative (default 0:
# equal).
continues() {
  "$PY" - "$1" "$2" "${3:-0}" <<'PYEOF'
import json, sys
full, resumed, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '"event":"step"' in x]
a, b = l(full)[2:], l(resumed)
print(a, b)
sys.exit(0 if len(b) == 2 and all(abs(x - y) <= tol * abs(x) for x, y in zip(a, b)) else 1)
PYEOF
}

# same_bits NAME REFERENCE: the per-step losses equal and the saved weights byte for byte (a layout
# whose every sum runs in the reference's order, docs/design.md §17).
same_bits() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
name, ref = sys.argv[1], sys.argv[2]
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '"event":"step"' in x]
a, b = l(ref + ".jsonl"), l(name + ".jsonl")
same = open('ck_%s/model.safetensors' % ref, 'rb').read() == open('ck_%s/model.safetensors' % name, 'rb').read()
print("%s: %d losses %s, weights %s" % (name, len(a), "equal" if a == b else "differ", "equal" if same else "differ"))
sys.exit(0 if len(a) == 4 and a == b and same else 1)
PYEOF
}

# compare_fp8 NAME REF8 REF32: an 8-bit-stash layout against the one-rank 8-bit run REF8. Losses within
# 1e-5 relative (the forward computes at full precision: the loss moves only through the weights).
# Weights within E/10, E being how far 8-bit kept tensors move the one-rank weights from REF32's: a
# last-bit difference upstream flips a few roundings (each one 8-bit step of one element, moving the
# weights by about E/80 here), while a layout that quantized differently (a block across two ranks, another
# scale) would change every stashed element by up to that step and move the weights by ~E (docs/design.md §4).
compare_fp8() {
  "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, struct, sys
name, ref8, ref32 = sys.argv[1:4]
def tensors(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__": continue
        b, e = v["data_offsets"]
        v = struct.unpack("<%df" % ((e - b) // 4), raw[8 + n + b:8 + n + e])
        if k.endswith('attn.c_attn.bias'): v = v[:len(v) // 3] + v[2 * len(v) // 3:]  # the key bias: noise (compare.sh)
        out[k] = v
    return out
l = lambda f: [json.loads(x)['loss'] for x in open(f) if '"event":"step"' in x]
a, b = l(ref8 + ".jsonl"), l(name + ".jsonl")
assert len(a) == len(b) == 4, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
w8, w32, wn = tensors("ck_" + ref8), tensors("ck_" + ref32), tensors("ck_" + name)
E = max(abs(x - y) for k in w8 for x, y in zip(w8[k], w32[k]))
wworst = max(abs(x - y) for k in w8 for x, y in zip(w8[k], wn[k]))
print("%s: losses within %.2e relative, weights within %.2e; 8 bits moved one rank by E = %.2e" % (name, worst, wworst, E))
sys.exit(0 if worst <= 1e-5 and wworst <= E / 10 else 1)
PYEOF
}
