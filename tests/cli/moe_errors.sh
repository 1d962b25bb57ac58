#!/usr/bin/env bash
# Bad Mixture-of-Experts input: one line on stderr naming the cause, exit 1 (2 for usage), before any
# training work — on one process and under mpirun (where rank 0 alone reports it).
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH" || exit 1
. "$(dirname "$0")/lib/check.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
for i in $(seq 1 100); do echo "Experts $i route the tokens."; done > corpus.txt
"$LATTICE" prepare --input corpus.txt --out data 2>/dev/null
B=(train --data data --layers 2 --hidden 32 --heads 2 --seq-len 16 --micro-batch 2 --steps 1 --threads 1)

expect_error "top-k above E" "--moe-router-topk must be between 1 and 4" "${B[@]}" --num-experts 4 --moe-router-topk 5
expect_error "the router's default top-k above E: named as the default, not as a flag given" \
  "--num-experts 1 is fewer than the 2 experts a token goes to by default under this --moe-router: give --moe-router-topk 1, or more experts" \
  "${B[@]}" --num-experts 1
expect_error "negative capacity factor" "--moe-expert-capacity-factor" "${B[@]}" --num-experts 4 --moe-expert-capacity-factor -1
expect_error "unknown router" "--moe-router" "${B[@]}" --num-experts 4 --moe-router sinkhorn
expect_error "unknown drop policy" "--moe-token-drop-policy" "${B[@]}" --num-experts 4 --moe-token-drop-policy random
expect_error "expert choice without capacity" "expert-choice needs a capacity" "${B[@]}" --num-experts 4 \
  --moe-router expert-choice --moe-no-drop
expect_error "groups not dividing the micro-batch" "--moe-groups 3 does not divide" "${B[@]}" --num-experts 4 --moe-groups 3
expect_error "MoE flags on a dense model" "need a Mixture-of-Experts model" "${B[@]}" --moe-router switch
# Given at their default values they were accepted (the check compared values): a dense model trained
# where the line asked for experts.
expect_error "--moe-router topk (the default) on a dense model" "--moe-router topk: the --moe-\* and --expert-dropout flags need a Mixture-of-Experts model (--num-experts E; got none)" "${B[@]}" --moe-router topk
expect_error "--moe-no-drop on a dense model" "--moe-no-drop: the --moe-" "${B[@]}" --moe-no-drop
expect_error "--expert-dropout 0 with --num-experts 0" "--expert-dropout 0: .*(--num-experts E; got --num-experts 0)" "${B[@]}" --num-experts 0 --expert-dropout 0
expect_error "negative expert count" "--num-experts must be between 0 and" "${B[@]}" --num-experts -2
expect_error "expert dropout 1" "--expert-dropout must be a finite number in \[0, 1)" "${B[@]}" --num-experts 4 --expert-dropout 1
expect_error "EP on one process" "expert-model-parallel-size 2 does not divide" "${B[@]}" --num-experts 4 --ep 2

# mpirun: E not divisible by e, and an EP size the world cannot hold, from rank 0 only.
mpi_error() {  # mpi_error NAME PATTERN NP ARGS...
  local name=$1 pattern=$2 np=$3; shift 3
  timeout 120 mpirun --oversubscribe -np "$np" "$LATTICE" "$@" > err.out 2> err.txt
  local status=$?
  check "$name: exit 1 (got $status)" test "$status" -eq 1
  check "$name: one lattice line" test "$(grep -c '^lattice' err.txt)" -eq 1
  check "$name: names the cause" grep -q -- "$pattern" err.txt
}
mpi_error "E not divisible by e" "--num-experts 3 is not divisible by --expert-model-parallel-size 2" 2 "${B[@]}" \
  --num-experts 3 --ep 2
mpi_error "EP larger than DP" "--expert-model-parallel-size 4 does not divide the data-parallel size 2" 2 "${B[@]}" \
  --num-experts 4 --ep 4
mpi_error "EP on a dense model" "needs a Mixture-of-Experts model" 2 "${B[@]}" --ep 2
mpi_error "EP with Adafactor" "--optimizer adafactor" 2 "${B[@]}" --num-experts 4 --ep 2 --optimizer adafactor

# An expert-choice model is not causal: sampling refuses it; eval scores it.
"$LATTICE" "${B[@]}" --num-experts 4 --moe-router expert-choice --save ck_ec > /dev/null 2>&1
check "expert-choice model trains and saves" test -f ck_ec/model.safetensors
expect_error "sample refuses expert choice" "routing sees future tokens" sample --checkpoint ck_ec --prompt "Experts" --tokens 4
"$LATTICE" eval --checkpoint ck_ec --data data/val.bin > eval.out 2> eval.err
check "eval scores an expert-choice model" test $? -eq 0
expect_error "eval with --moe-no-drop against a dropping checkpoint: named as typed" \
  "--moe-no-drop disagrees with checkpoint ck_ec, which holds moe-expert-capacity-factor" \
  eval --checkpoint ck_ec --data data/val.bin --moe-no-drop
"$LATTICE" "${B[@]}" --num-experts 4 --moe-router gshard --save ck_gs > /dev/null 2>&1
"$LATTICE" sample --checkpoint ck_gs --prompt "Experts" --tokens 8 > sample.out 2> sample.err
check "sample generates with a token-choice MoE model" test $? -eq 0 -a -s sample.out
# A resume takes the run's MoE model where its flags are not given, and names a given one that differs.
"$LATTICE" train --data data --threads 1 --steps 2 --resume ck_gs > gs.out 2> gs.err
check "an MoE run resumes without its flags" grep -q "resumed with checkpoint ck_gs's .*--num-experts 4 --moe-router gshard (" gs.err
expect_error "an MoE resume with another expert count: named alone" "its experts 4 where the flags ask for 8 (a resume" \
  train --data data --threads 1 --steps 2 --resume ck_gs --num-experts 8
expect_error "an MoE resume with another router" "its moe router \"gshard\" where the flags ask for \"switch\"" \
  train --data data --threads 1 --steps 2 --resume ck_gs --moe-router switch
# --init takes the MoE shape (count, router) the weights fix; another router is named, not a missing tensor.
"$LATTICE" train --data data --threads 1 --steps 1 --init ck_gs > init_gs.out 2> init_gs.err
check "--init of an MoE checkpoint without its flags" grep -q "shape from --init ck_gs: .*--num-experts 4 .*--moe-router gshard (" init_gs.err
expect_error "--init of an MoE checkpoint under another router" "holds another model (router \"gshard\", this run \"switch\")" \
  train --data data --threads 1 --steps 1 --init ck_gs --moe-router switch
"$LATTICE" train --data data --threads 1 --steps 1 --init ck_gs --moe-no-drop > init_nodrop.out 2> init_nodrop.err
check "--init of an MoE checkpoint takes a routing flag without --num-experts (the new run's)" test $? -eq 0
# On more data-parallel ranks a dense run's micro-batch is split to fit; an MoE model routes each
# micro-batch on its own (another split trains another model: its losses differed), so it asks.
mpi_error "an MoE resume on more DP ranks without --micro-batch" \
  "an MoE model routes each micro-batch on its own (capacity, groups, auxiliary losses): give --micro-batch" 2 \
  train --data data --threads 1 --steps 2 --resume ck_gs
expect_error "an MoE resume made dense" "experts (MoE) where the flags ask for a dense model" \
  train --data data --threads 1 --steps 2 --resume ck_gs --num-experts 0

echo "$((failures == 0 ? 1 : 0)) passed, $failures failed"
[ "$failures" -eq 0 ]
