#!/usr/bin/env bash
# lattice plan on MoE models (issue 13): parameters, model states under EP × ZeRO, the MoE layer's
# kept bytes, the all-to-all bytes, the search over e, --moe-paper, and bad input. Every expected value
# is computed here from the model's shape (docs/design.md §12), not read back from the program.
set -uo pipefail
LATTICE=$1; SCRATCH=$2
mkdir -p "$SCRATCH"
. "$(dirname "$0")/lib/subcommand.sh"

# L = 4, h = 128, a = 4, s = 64, vocabulary 256; E = 8 experts (f = 4h = 512) in layers 0 and 2,
# Switch router (k = 1, cf 1); 4 data-parallel GPUs, b = 2, bf16 (the planner's default).
MODEL=(--layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --num-experts 8 --moe-layer-freq 2
       --moe-router switch --gpus 4 --micro-batch 2 --global-batch 8)

plan_json() { "$LATTICE" plan "${MODEL[@]}" --json "$@"; }
for e in 1 2 4; do
  for z in 0 1 3; do
    plan_json --ep $e --zero $z > "$SCRATCH/e${e}z${z}.json" || fail "plan --ep $e --zero $z"
  done
done

python3 - "$SCRATCH" <<'PY' || fail "MoE plan JSON against the hand formulas"
import json, math, sys
d = sys.argv[1]
j = {(e, z): json.load(open(f"{d}/e{e}z{z}.json")) for e in (1, 2, 4) for z in (0, 1, 3)}
h, L, M, E, f, v, s, b, a, Nd = 128, 4, 2, 8, 512, 256, 64, 2, 4, 4
expert = 2 * h * f + f + h                    # FC1 and FC2 with biases
router = h * E                                 # Switch: W_g only
dense_mlp = 8 * h * h + 5 * h
per_layer = 12 * h * h + 13 * h
params = v * h + s * h + 2 * h + L * per_layer + M * (E * expert + router - dense_mlp)
active = params - M * (E - 1) * expert         # one expert a token
for k, x in j.items():
    assert x["parameters"] == params, (k, x["parameters"], params)
    assert x["active_parameters"] == active, (k, x["active_parameters"], active)
    assert x["layout"]["ep"] == k[0]
    assert x["moe"]["balanced_experts"] is True

# Model states: dense parameters over N_d, each rank's E/e experts over N_d/e (mixed: 2 + 2 + 12 bytes).
dense = v * h + s * h + 2 * h + L * (4 * h * h + 3 * h + h + 4 * h) + (L - M) * (8 * h * h + 4 * h + h) + M * router
def experts(e): return M * (E // e) * expert
def states(psi, n, zero):
    w, g, o = 2 * psi, 2 * psi, 12 * psi
    if zero >= 1: o = -(-o // n)
    if zero >= 2: g = -(-g // n)
    if zero >= 3: w = -(-w // n)
    return w + g + o
for (e, z), x in j.items():
    want = states(dense, Nd, z) + states(experts(e), Nd // e, z)
    assert x["model_state_bytes"] == want, ((e, z), x["model_state_bytes"], want)
    assert x["moe"]["expert_parameters"] == experts(e) and x["moe"]["dense_parameters"] == dense
# e = 1 against e = 2, as the formula says: without ZeRO e = 2 keeps 16 bytes fewer for each expert it
# gave away; under ZeRO-3 the experts' 16X/N_d does not depend on e.
assert j[(1, 0)]["model_state_bytes"] - j[(2, 0)]["model_state_bytes"] == 16 * experts(1) // 2
assert j[(1, 3)]["model_state_bytes"] == j[(2, 3)]["model_state_bytes"] == j[(4, 3)]["model_state_bytes"]
assert j[(1, 1)]["model_state_bytes"] > j[(2, 1)]["model_state_bytes"] > j[(4, 1)]["model_state_bytes"]

# One MoE layer's kept bytes, bf16 (d = 2), dropout on, balanced experts. 128 tokens, C = ceil(128/8)
# = 16, E·C = 128: A = R = 128 rows.
d2, N, A = 2, s * b, 128
sbh, as2b = s * b * h, a * s * s * b
attention_half = sbh * (6 * d2 + 1) + as2b * (2 * d2 + 1)   # Table 2's row less the MLP's sbh(10d + 1)
block = (N * h * (2 * d2 + 1)            # LN2 input, router input, residual mask
         + N * E * 4                     # fp32 router probabilities
         + (2 * A + 2 * E) * 4           # int32 token, expert, send and receive counts
         + A * 4 + A * h * d2            # gates, expert outputs back at the source
         + A * (h * d2 + 2 * f * d2))    # FC1, GeLU, FC2 inputs (no expert dropout)
for k, x in j.items():
    assert x["moe"]["assignments_per_micro_batch"] == A
    assert x["moe"]["activation_bytes_per_moe_layer"] == attention_half + block, (x["moe"], attention_half + block)
    assert x["activation_bytes_per_layer"] == sbh * (16 * d2 + 2) + as2b * (2 * d2 + 1)   # Table 2, dense
    # All-to-all: (e−1)/e of A rows of h fp32 values, each way.
    e = k[0]
    assert x["moe"]["all_to_all_bytes"] == (e - 1) / e * A * h * 4, x["moe"]["all_to_all_bytes"]
    assert (x["time_breakdown_s"]["ep_comm"] > 0) == (e > 1)
    assert x["moe"]["all_to_alls_per_step"] == 4 * M   # one micro-batch a rank
# FLOPs: 3 × forward FLOPs per token × 8·64 tokens; per token 2 per active matrix parameter, attention 4sh.
fwd = L * (8 * h * h + 4 * s * h) + (L - M) * 16 * h * h + M * (2 * 2 * h * f + 2 * router) + 2 * h * v
assert j[(1, 0)]["forward_flops_per_token"] == fwd
assert math.isclose(j[(1, 0)]["model_flops"], 3 * 8 * s * fwd, rel_tol=1e-12)
PY

# The readable report names the parameters, the split and the balanced-experts assumption.
"$LATTICE" plan "${MODEL[@]}" --ep 2 > "$SCRATCH/moe.txt" || fail "plan text"
params=$(python3 -c "h,L,M,E,f,v,s=128,4,2,8,512,256,64; e=2*h*f+f+h; print(f'{v*h+s*h+2*h+L*(12*h*h+13*h)+M*(E*e+h*E-8*h*h-5*h):.4g}')")
grep -q "parameters: $params = " "$SCRATCH/moe.txt" || fail "the text prints the parameter count $params"
grep -q "layout  t=1 p=1 m=1 dp=4 ep=2 b=2" "$SCRATCH/moe.txt" || fail "the layout names ep"
grep -q "activations per MoE layer (balanced)" "$SCRATCH/moe.txt" || fail "the MoE layer's activations"
grep -q "expert all-to-all (EP 2, pairwise)" "$SCRATCH/moe.txt" || fail "the all-to-all time"
grep -q "assume balanced experts" "$SCRATCH/moe.txt" || fail "the balanced-experts note"
grep -q "most loaded rank" "$SCRATCH/moe.txt" || fail "the note on the most loaded rank"
# Without dropping, one rank's experts may receive both ranks' A = 128 rows: 256.
"$LATTICE" plan "${MODEL[@]}" --ep 2 --moe-no-drop > "$SCRATCH/nodrop.txt" || fail "plan --moe-no-drop"
grep -q "can receive more, up to 256 rows" "$SCRATCH/nodrop.txt" || fail "the unbalanced bound without dropping"

# --search tries e: 8 GPUs, experts that make a difference; every candidate's e divides E and N_d·c
# (EP folds over DP × CP).
"$LATTICE" plan --search --layers 4 --hidden 1024 --heads 16 --seq-len 1024 --vocab 32000 --num-experts 64 \
  --moe-ffn-hidden-size 8192 --moe-router switch --gpus 8 --gpu-memory 40GB --top 50 --json > "$SCRATCH/search.json" ||
  fail "plan --search on an MoE model"
python3 - "$SCRATCH/search.json" <<'PY' || fail "search over e"
import json, sys
j = json.load(open(sys.argv[1]))
c = j["candidates"]
assert c, "no candidates"
for x in c:
    l = x["layout"]
    assert 64 % l["ep"] == 0 and l["dp"] * l["cp"] % l["ep"] == 0 and l["tp"] * l["cp"] * l["pp"] * l["dp"] == 8, l
    assert x["fits"]
assert len({x["layout"]["ep"] for x in c}) > 1, "only one e among the candidates"
assert c[0]["layout"]["ep"] > 1, c[0]["layout"]
PY
"$LATTICE" plan --search --layers 4 --hidden 1024 --heads 16 --seq-len 1024 --vocab 32000 --num-experts 64 \
  --moe-ffn-hidden-size 8192 --moe-router switch --gpus 8 --gpu-memory 40GB --top 3 > "$SCRATCH/search.txt"
grep -Eq "^1 +t=[0-9]+ p=[0-9]+ m=[0-9]+ dp=[0-9]+ ep=[0-9]+ " "$SCRATCH/search.txt" || fail "the chosen layout shows ep"

# --moe-paper: published against computed, within the stated bounds (Switch-Base 1%, GShard 5%).
"$LATTICE" plan --moe-paper > "$SCRATCH/moe_paper.txt" || fail "--moe-paper"
for t in "Switch-Base" "GShard 600B" "published" "computed" "compared:"; do
  grep -q "$t" "$SCRATCH/moe_paper.txt" || fail "--moe-paper prints $t"
done
"$LATTICE" plan --moe-paper --json > "$SCRATCH/moe_paper.json" || fail "--moe-paper --json"
python3 - "$SCRATCH/moe_paper.json" <<'PY' || fail "--moe-paper within the bounds"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["event"] == "moe_paper"
rows = {r["model"]: r for r in j["models"]}
bounds = {"Switch-Base": (7.4e9, 0.01), "GShard 600B": (600e9, 0.05)}   # the published figures
assert set(rows) == set(bounds)
for name, (published, bound) in bounds.items():
    r = rows[name]
    assert r["published_parameters"] == published and r["bound"] == bound, r
    rel = r["computed_parameters"] / published - 1
    assert abs(rel - r["relative_difference"]) < 1e-12 and abs(rel) <= bound, (name, rel)
# GShard: 18 MoE layers of 2048 experts (the paper's 36,864), each 2hf + f + h at h 1024, f 8192.
g = rows["GShard 600B"]
assert g["experts_total"] == 36864 and g["expert_parameters"] == 36864 * (2 * 1024 * 8192 + 8192 + 1024)
PY

# Bad input: one line on stderr, exit 1 (2 for usage errors).
expect() { expect_status plan "$@"; }
expect 1 "must be divisible by the expert-parallel size" --num-experts 6 --ep 4 --gpus 8
expect 1 "--moe-router-topk must be between 1 and 4" --num-experts 4 --moe-router-topk 5
expect 1 "--moe-expert-capacity-factor must be a finite number in" --num-experts 4 --moe-expert-capacity-factor=-0.5
expect 1 "must divide the data-parallel size" --num-experts 8 --ep 8 --gpus 4
expect 1 "must divide the data-parallel size" --num-experts 8 --ep 2 --gpus 3
expect 1 "needs an MoE model" --ep 2 --gpus 2
expect 1 "--moe-groups" --num-experts 4 --moe-groups 3 --seq-len 64
expect 1 "--paper and --moe-paper" --paper --moe-paper
expect 2 "--moe-router" --num-experts 4 --moe-router bogus
expect 2 "--num-experts" --num-experts many
test "$fails" -eq 0 && echo ok
