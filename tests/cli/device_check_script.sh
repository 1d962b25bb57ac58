#!/usr/bin/env bash
# scripts/device-check.sh's own logic, with stand-in programs (no GPU here): the kernels phase's
# fallbacks (a form's failing lines or a check stopped in its section make the later phases train
# without that form, and say so), their environment reaching every training run of the speed phase,
# and the speed phase's lines, the largest micro-batch that both lattice and PyTorch run included.
# The stand-ins print what a run would; what is checked is the script's reading of it.
set -u
SCRATCH=$2
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
LATTICE=unused
. "$ROOT/tests/cli/lib/check.sh"
mkdir -p kbin full debs/gpt2-data && touch debs/gpt2-data/train.bin

# The trainer: `prepare` makes a data folder; `train` refuses micro-batches past 64 (out of memory) and
# writes JSON step lines that carry the environment it ran under.
cat > full/lattice <<'SH'
#!/usr/bin/env bash
cmd=$1; shift
if [ "$cmd" = prepare ]; then
  while [ $# -gt 0 ]; do [ "$1" = --out ] && { mkdir -p "$2"; touch "$2/train.bin"; }; shift; done; exit 0
fi
mb=0 steps=0 prof=0 attn=unfused
while [ $# -gt 0 ]; do case $1 in --micro-batch) mb=$2 ;; --steps) steps=$2 ;; --profile-ops) prof=1 ;; --attention) attn=$2 ;; esac; shift; done
if [ "$cmd" = plan ]; then  # the planner: 60 ms unfused, 50 fused, a 20 GB accounted peak
  echo "{\"predicted_iteration_s\":0.0$([ "$attn" = fused ] && echo 5 || echo 6),\"memory_by_stage\":[{\"accounted_peak_bytes\":20000000000}]}"; exit 0
fi
[ "$mb" -le 64 ] || { echo "lattice train: error: out of memory (stand-in)" >&2; exit 1; }
[ "${LATTICE_CUDA_GEMM_TUNE:-}" != report ] || echo "cuBLASLt tuner: bf16 NN 1x2x3x4: algorithm 2 of 3 offered (2 with the first's bits), 0.200 -> 0.100 ms" >&2
# A step: 70 ms unfused, 80 fused, 10 more without the epilogues (the plan lines must not mix the rows).
t=$([ "$attn" = fused ] && echo 8 || echo 7); [ "${LATTICE_CUDA_GEMM_EPILOGUES:-}" != 0 ] || t=$((t + 1))
for i in $(seq 1 "$steps"); do
  echo "{\"event\":\"step\",\"step_s\":0.0$t,\"mfu\":0.36,\"env\":\"tune=${LATTICE_CUDA_GEMM_TUNE:-} epi=${LATTICE_CUDA_GEMM_EPILOGUES:-} dense=${LATTICE_CUDA_ATTENTION_DENSE:-}\"}"
done
if [ "$prof" = 0 ]; then echo '{"event":"summary","memory":{"ranks":[{"accounted_peak_bytes":21000000000}]}}'
else echo "{\"event\":\"summary\",\"steps\":$steps,\"op_profile\":[{\"op\":\"gemm\",\"calls\":1,\"seconds\":0.1}]}"; fi
SH
# Python: the PyTorch peer refuses micro-batches past 32 here (so 64 runs in lattice only); anything
# else is the real interpreter.
cat > python <<'SH'
#!/usr/bin/env bash
case "$1" in
  *pytorch_peer.py)
    mb=0; for ((i = 2; i < $#; ++i)); do j=$((i + 1)); [ "${!i}" = --micro-batch ] && mb=${!j}; done
    [ "$mb" -le "${PEER_MAX:-32}" ] || { echo "torch.OutOfMemoryError: CUDA out of memory (stand-in)" >&2; exit 1; }
    echo '{"mode":"eager","attention":"sdpa","median_step_s":0.09,"tokens_per_s":1,"mfu":0.33,"torch":"stand-in"}' ;;
  *) exec python3 "$@" ;;
esac
SH
# nvidia-smi: the card's name when GPU_NAME is set (the peak the MFU lines divide by comes from it).
mkdir -p sbin
printf '#!/usr/bin/env bash\n[ -n "${GPU_NAME:-}" ] || exit 1\necho "$GPU_NAME"\n' > sbin/nvidia-smi
chmod +x full/lattice python sbin/nvidia-smi

check_script() {  # check_script NAME BODY: the kernel check stand-in prints BODY, then exits as it says
  printf '#!/usr/bin/env bash\n%s\n' "$2" > kbin/lattice_cuda_check && chmod +x kbin/lattice_cuda_check
}
run() {  # run OUTDIR PHASES...: the script with the stand-ins, its results in OUTDIR
  local out=$1; shift
  rm -rf "$out" && mkdir -p "$out"
  PATH=$PWD/sbin:$PATH OUT=$PWD/$out DEVICE_WORK=$PWD/work DEVICE_BUILD_DIR=$PWD/kbin DEVICE_FULL_BUILD_DIR=$PWD/full DEVICE_DEBS=$PWD/debs \
    PYTHON=$PWD/python DEVICE_CHECK_SPEED_ROUNDS=1 DEVICE_CHECK_SPEED_PEERS=eager:sdpa \
    DEVICE_CHECK_PLAN_PRESET=${DEVICE_CHECK_PLAN_PRESET-H200} \
    bash "$ROOT/scripts/device-check.sh" "$@" > "$out/stdout" 2>&1
}
ok_line='kernel x fwd max_abs_diff=0 rel=0 tol=0 ok'

# 1. Every line passes: no fallback.
check_script ok "echo 'lattice_cuda_check: section gemm_tuner'; echo '$ok_line'; echo 'lattice_cuda_check: 0 FAIL'"
run r1 kernels
check "a passing check: exit 0" test $? -eq 0
check "a passing check: the phase ok" grep -q '^phase kernels: ok (1 comparisons, 0 FAIL)' r1/device-check-results.txt
check "a passing check: no fallback" test "$(grep -c fallback r1/device-check-results.txt)" -eq 0

# 2. The check dies in the tuner's section, after the epilogues' last line: the tuner is blamed, not them.
check_script crash "echo 'lattice_cuda_check: section gemm_epilogues'
echo 'kernel gemm bf16 DGELU g16 [repeat] fwd max_abs_diff=0 rel=0 tol=0 ok'
echo 'lattice_cuda_check: section gemm_tuner'; kill -SEGV \$\$"
run r2 kernels speed
check "a check stopped in the tuner: exit 1" test $? -eq 1
check "a check stopped in the tuner: the tuner's fallback" grep -q "fallback: the GEMM tuner's lines failed" r2/device-check-results.txt
check "a check stopped in the tuner: not the epilogues'" test "$(grep -c "fallback: the GEMM epilogues" r2/device-check-results.txt)" -eq 0
check "a check stopped in the tuner: where it stopped" grep -q "stopped in its section 'gemm_tuner'" r2/device-check-results.txt
check "every speed run trains without the tuner" \
  test "$(cat work/speed_lattice_*.jsonl | grep -c 'tune=0 ')" -eq "$(cat work/speed_lattice_*.jsonl | grep -c '"step"')"
check "the fused_noepi row still drops the epilogues" grep -q 'tune=0 epi=0' work/speed_lattice_fused_noepi_1.jsonl
check "the speed lines" test "$(grep -c '^  speed lattice fused.* attention: median step 80.0 ms' r2/device-check-results.txt)" -eq 2
check "the plan's lines: the unfused rows" \
  grep -q '^  speed plan unfused: predicted 60.0 ms a step (H200 preset), measured 70.0 ms, 1.17× the prediction; accounted peak predicted 20.00 GB, measured 21.00 GB (+5.0%)$' r2/device-check-results.txt
check "the plan's lines: the fused rows alone (not fused_noepi's 90 ms)" \
  grep -q '^  speed plan fused: predicted 50.0 ms a step (H200 preset), measured 80.0 ms, 1.60× ' r2/device-check-results.txt
check "64 runs in lattice, not in PyTorch: said, and no rows at 64" \
  grep -q 'speed: micro-batch 64 runs in lattice, not in PyTorch (torch.OutOfMemoryError' r2/device-check-results.txt
check "no rows at 64" test "$(grep -c '(micro-batch 64)' r2/device-check-results.txt)" -eq 0

# 3. Failing lines of the dense attention forms and of the epilogues, an exception in the timings; the
# tuner's lines pass. The largest batch both run is 64 (PyTorch allowed it): its rows, twice each.
check_script fails "echo 'lattice_cuda_check: section gemm_epilogues'
echo 'kernel gemm bf16 GELU_AUX_BIAS act16 [bf16] fwd max_abs_diff=1 rel=1 tol=0.0078 FAIL'
echo 'lattice_cuda_check: section flash'
echo 'kernel tc rows fwd, 64-row query tiles, 96 registers [bits] fwd max_abs_diff=1 rel=1 tol=0 FAIL'
echo 'lattice_cuda_check: 2 FAIL'; exit 1"
PEER_MAX=64 DEVICE_CHECK_SPEED_LARGEST="128 64" DEVICE_CHECK_PLAN_PRESET= run r3 kernels speed
check "failing lines: the epilogues' fallback" grep -q "fallback: the GEMM epilogues' lines failed" r3/device-check-results.txt
check "failing lines: the dense forms' fallback" grep -q "fallback: the attention's dense forms' lines failed" r3/device-check-results.txt
check "failing lines: not the tuner's" test "$(grep -c "fallback: the GEMM tuner" r3/device-check-results.txt)" -eq 0
check "the fused row reports the tuner" grep -q '^  speed cuBLASLt tuner: ' r3/device-check-results.txt
check "the fused row trains with the tuner reporting, without epilogues and dense forms" \
  grep -q 'tune=report epi=0 dense=0' work/speed_lattice_fused_1.jsonl
check "128 refused by lattice, said" grep -q 'speed: micro-batch 128 does not run in lattice' r3/device-check-results.txt
check "64 taken" grep -q 'speed: micro-batch 64, the largest of 128 64 at which both ran' r3/device-check-results.txt
check "a card with no preset: said" grep -q '^  speed plan: no preset for this card' r3/device-check-results.txt
check "two rounds at 64, lattice and PyTorch" test "$(grep -c ' attention (micro-batch 64): median step' r3/device-check-results.txt)" -eq 4

# 4. The peak the MFU lines divide by, from the card's name (run 2's had none: the unknown card's line).
check "no name: H100 SXM's figure, said not to be the card's" \
  grep -q "^phase speed: .*peak unnamed card: 989 TFLOP/s dense bf16 (a card not in this script's list" r2/device-check-results.txt
check_script ok "echo 'lattice_cuda_check: 0 FAIL'"
peak_line() {  # peak_line NAME [TFLOPS]: the speed phase's peak for a card of that name
  GPU_NAME=$1 DEVICE_CHECK_PEAK_TFLOPS=${2:-} DEVICE_CHECK_PLAN_PRESET= run r4 speed
  grep -o 'peak .*' r4/device-check-results.txt | head -1
}
check "H100 SXM: 989" test "$(peak_line 'NVIDIA H100 80GB HBM3')" = "peak NVIDIA H100 80GB HBM3: 989 TFLOP/s dense bf16 (SXM)"
check "H100 PCIe: 756" test "$(peak_line 'NVIDIA H100 PCIe')" = "peak NVIDIA H100 PCIe: 756 TFLOP/s dense bf16 (PCIe)"
check "H100 NVL: 835" test "$(peak_line 'NVIDIA H100 NVL')" = "peak NVIDIA H100 NVL: 835 TFLOP/s dense bf16 (NVL)"
check "H200: 989" test "$(peak_line 'NVIDIA H200')" = "peak NVIDIA H200: 989 TFLOP/s dense bf16 (SXM)"
check "A100: 312" test "$(peak_line 'NVIDIA A100-SXM4-80GB')" = "peak NVIDIA A100-SXM4-80GB: 312 TFLOP/s dense bf16 (A100)"
check "the MFU lines divide by it" grep -q 'MFU 36.0% (of 312 TFLOP/s)' r4/device-check-results.txt
check "an override" test "$(peak_line 'NVIDIA L40S' 362)" = "peak NVIDIA L40S: 362 TFLOP/s dense bf16 (DEVICE_CHECK_PEAK_TFLOPS)"

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
