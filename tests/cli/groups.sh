#!/usr/bin/env bash
# lattice groups: Megatron's groups as text, one-line JSON and an SVG; bad layouts exit 1, bad
# flags exit 2, each with one stderr line.
set -uo pipefail
LATTICE=$1; SCRATCH=$2
mkdir -p "$SCRATCH"
. "$(dirname "$0")/lib/subcommand.sh"

want='{"event":"groups","tp":[[0,1],[2,3],[4,5],[6,7],[8,9],[10,11],[12,13],[14,15]],'
want+='"dp":[[0,2],[1,3],[4,6],[5,7],[8,10],[9,11],[12,14],[13,15]],'
want+='"pp":[[0,4,8,12],[1,5,9,13],[2,6,10,14],[3,7,11,15]],"embedding":[[0,12],[1,13],[2,14],[3,15]],'
want+='"ep":[[0],[1],[2],[3],[4],[5],[6],[7],[8],[9],[10],[11],[12],[13],[14],[15]],'
want+='"expert_dp":[[0,2],[1,3],[4,6],[5,7],[8,10],[9,11],[12,14],[13,15]],'
want+='"cp":[[0],[1],[2],[3],[4],[5],[6],[7],[8],[9],[10],[11],[12],[13],[14],[15]],'
want+='"dp_cp":[[0,2],[1,3],[4,6],[5,7],[8,10],[9,11],[12,14],[13,15]]}'
got=$("$LATTICE" groups --world 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --json)
[ "$got" = "$want" ] || fail "JSON of Megatron's 16-rank example: $got"

got=$("$LATTICE" groups --world 4 --json)
want='{"event":"groups","tp":[[0],[1],[2],[3]],"dp":[[0,1,2,3]],"pp":[[0],[1],[2],[3]],"embedding":[[0],[1],[2],[3]],'
want+='"ep":[[0],[1],[2],[3]],"expert_dp":[[0,1,2,3]],"cp":[[0],[1],[2],[3]],"dp_cp":[[0,1,2,3]]}'
[ "$got" = "$want" ] || fail "pure data parallelism: $got"

"$LATTICE" groups --world 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 > "$SCRATCH/text" ||
  fail "text output exits 0"
grep -q "^data-parallel groups (4): *\[0,2\] \[1,3\] \[4,6\] \[5,7\]$" "$SCRATCH/text" || fail "text lists DP groups"
grep -q "^embedding groups (4): *\[0,4\] \[1,5\] \[2,6\] \[3,7\]$" "$SCRATCH/text" || fail "text lists embedding groups"
grep -q "expert" "$SCRATCH/text" && fail "no expert groups in the text without --expert-model-parallel-size"

# Expert parallelism: world 16, t 2, p 2, e 2 (N_d = 4), the groups written out by hand.
"$LATTICE" groups --world 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --expert-model-parallel-size 2 > "$SCRATCH/text" || fail "text with --expert-model-parallel-size exits 0"
grep -q "^expert-parallel groups (8): *\[0,2\] \[1,3\] \[4,6\] \[5,7\] \[8,10\] \[9,11\] \[12,14\] \[13,15\]$" \
  "$SCRATCH/text" || fail "text lists EP groups: $(cat "$SCRATCH/text")"
grep -q "^expert-data-parallel groups (8): *\[0,4\] \[1,5\] \[2,6\] \[3,7\] \[8,12\] \[9,13\] \[10,14\] \[11,15\]$" \
  "$SCRATCH/text" || fail "text lists expert-DP groups: $(cat "$SCRATCH/text")"
grep -q "^data-parallel 4 = expert-model-parallel 2 x expert-data-parallel 2$" "$SCRATCH/text" || fail "EP x expert-DP = DP"
got=$("$LATTICE" groups --world 8 --ep 4 --json)  # the short alias; N_d = 8, two EP blocks
[ "$got" = '{"event":"groups","tp":[[0],[1],[2],[3],[4],[5],[6],[7]],"dp":[[0,1,2,3,4,5,6,7]],"pp":[[0],[1],[2],[3],[4],[5],[6],[7]],"embedding":[[0],[1],[2],[3],[4],[5],[6],[7]],"ep":[[0,1,2,3],[4,5,6,7]],"expert_dp":[[0,4],[1,5],[2,6],[3,7]],"cp":[[0],[1],[2],[3],[4],[5],[6],[7]],"dp_cp":[[0,1,2,3,4,5,6,7]]}' ] ||
  fail "--ep 4 JSON: $got"

rm -f "$SCRATCH/grid.svg"
"$LATTICE" groups --world 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --svg "$SCRATCH/grid.svg" \
  --json > /dev/null || fail "--svg exits 0"
svg_complete "$SCRATCH/grid.svg"
[ "$(grep -o "class='cell'" "$SCRATCH/grid.svg" | wc -l)" -eq 64 ] || fail "4 panels of 16 ranks"
rm -f "$SCRATCH/ep.svg"
"$LATTICE" groups --world 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --ep 2 \
  --svg "$SCRATCH/ep.svg" > /dev/null || fail "--svg with --ep exits 0"
svg_complete "$SCRATCH/ep.svg"
[ "$(grep -o "class='cell'" "$SCRATCH/ep.svg" | wc -l)" -eq 96 ] || fail "6 panels of 16 ranks with EP"
grep -q "Expert-parallel groups (8)" "$SCRATCH/ep.svg" || fail "the SVG has an EP panel"
grep -q "Expert-data-parallel groups (8)" "$SCRATCH/ep.svg" || fail "the SVG has an expert-DP panel"

# Context parallelism in Megatron-Core's order (tp, cp, dp, pp): world 16, t 2, c 2, p 2 (N_d = 2), by hand.
"$LATTICE" groups --world 16 --tensor-model-parallel-size 2 --context-parallel-size 2 --pipeline-model-parallel-size 2 \
  > "$SCRATCH/text" || fail "text with --context-parallel-size exits 0"
grep -q "^rank = tp_rank + 2\*cp_rank + 4\*dp_rank + 8\*pp_rank$" "$SCRATCH/text" || fail "CP's rank formula"
grep -q "^context-parallel groups (8): *\[0,2\] \[1,3\] \[4,6\] \[5,7\] \[8,10\] \[9,11\] \[12,14\] \[13,15\]$" \
  "$SCRATCH/text" || fail "text lists CP groups: $(cat "$SCRATCH/text")"
grep -q "^data-parallel groups (8): *\[0,4\] \[1,5\] \[2,6\] \[3,7\] \[8,12\] \[9,13\] \[10,14\] \[11,15\]$" \
  "$SCRATCH/text" || fail "DP groups stride t·c under CP: $(cat "$SCRATCH/text")"
grep -q "^data-parallel-with-cp groups (4): *\[0,2,4,6\] \[1,3,5,7\] \[8,10,12,14\] \[9,11,13,15\]$" \
  "$SCRATCH/text" || fail "gradients reduce over DP x CP: $(cat "$SCRATCH/text")"
grep -q "^pipeline-parallel groups (8): *\[0,8\] \[1,9\] \[2,10\] \[3,11\] \[4,12\] \[5,13\] \[6,14\] \[7,15\]$" \
  "$SCRATCH/text" || fail "PP stride t·c·N_d: $(cat "$SCRATCH/text")"
grep -q "context" <("$LATTICE" groups --world 8 --tensor-model-parallel-size 2) && fail "no CP groups in text without --cp"
got=$("$LATTICE" groups --world 4 --cp 2 --json)  # the short alias: N_d = 2
[ "$got" = '{"event":"groups","tp":[[0],[1],[2],[3]],"dp":[[0,2],[1,3]],"pp":[[0],[1],[2],[3]],"embedding":[[0],[1],[2],[3]],"ep":[[0],[1],[2],[3]],"expert_dp":[[0,1,2,3]],"cp":[[0,1],[2,3]],"dp_cp":[[0,1,2,3]]}' ] ||
  fail "--cp 2 JSON (with e = 1 expert gradients reduce over DP x CP): $got"
# Expert parallelism folds over DP x CP (Megatron-Core): CP 2 x EP 2 on 2 ranks is one EP group of the
# two CP ranks, each its own expert-DP group; world 8, t 2, c 2, e 2 (N_d = 2): EP spans the CP pair.
"$LATTICE" groups --world 2 --cp 2 --ep 2 > "$SCRATCH/text" || fail "--cp 2 --ep 2 on 2 ranks exits 0"
grep -q "^expert-parallel groups (1): *\[0,1\]$" "$SCRATCH/text" || fail "EP over the CP ranks: $(cat "$SCRATCH/text")"
grep -q "^expert-data-parallel groups (2): *\[0\] \[1\]$" "$SCRATCH/text" || fail "expert-DP: $(cat "$SCRATCH/text")"
grep -q "^data-parallel 1 x context-parallel 2 = expert-model-parallel 2 x expert-data-parallel 1$" "$SCRATCH/text" ||
  fail "the folding in words: $(cat "$SCRATCH/text")"
got=$("$LATTICE" groups --world 8 --tensor-model-parallel-size 2 --cp 2 --ep 2 --json)
[ "$got" = '{"event":"groups","tp":[[0,1],[2,3],[4,5],[6,7]],"dp":[[0,4],[1,5],[2,6],[3,7]],"pp":[[0],[1],[2],[3],[4],[5],[6],[7]],"embedding":[[0],[1],[2],[3],[4],[5],[6],[7]],"ep":[[0,2],[1,3],[4,6],[5,7]],"expert_dp":[[0,4],[1,5],[2,6],[3,7]],"cp":[[0,2],[1,3],[4,6],[5,7]],"dp_cp":[[0,2,4,6],[1,3,5,7]]}' ] ||
  fail "--cp 2 --ep 2 JSON: $got"
rm -f "$SCRATCH/cpep.svg"
"$LATTICE" groups --world 2 --cp 2 --ep 2 --svg "$SCRATCH/cpep.svg" > /dev/null || fail "--svg with --cp --ep exits 0"
svg_complete "$SCRATCH/cpep.svg"
grep -q "Expert-parallel groups (1)" "$SCRATCH/cpep.svg" || fail "the SVG draws the folded EP group"
grep -q "e consecutive (cp, dp) ranks, cp first" "$SCRATCH/cpep.svg" || fail "the SVG names the folding"
rm -f "$SCRATCH/cp.svg"
"$LATTICE" groups --world 8 --tensor-model-parallel-size 2 --cp 2 --svg "$SCRATCH/cp.svg" > /dev/null ||
  fail "--svg with --cp exits 0"
svg_complete "$SCRATCH/cp.svg"
[ "$(grep -o "class='cell'" "$SCRATCH/cp.svg" | wc -l)" -eq 48 ] || fail "6 panels of 8 ranks with CP"
grep -q "Context-parallel groups (4)" "$SCRATCH/cp.svg" || fail "the SVG has a CP panel"
# With a pipeline too: two stages side by side, the PP groups' stride named with c.
rm -f "$SCRATCH/cp_pp.svg"
"$LATTICE" groups --world 8 --cp 2 --pipeline-model-parallel-size 2 --svg "$SCRATCH/cp_pp.svg" > /dev/null ||
  fail "--svg with --cp and a pipeline exits 0"
svg_complete "$SCRATCH/cp_pp.svg"
[ "$(grep -o "class='cell'" "$SCRATCH/cp_pp.svg" | wc -l)" -eq 48 ] || fail "6 panels of 8 ranks with CP x PP"
[ "$(grep -o ">stage 1<" "$SCRATCH/cp_pp.svg" | wc -l)" -eq 6 ] || fail "every CP x PP panel draws stage 1"
grep -q "stride t·c·dp, one rank per stage" "$SCRATCH/cp_pp.svg" || fail "PP stride t·c·dp under CP in the SVG"

expect() { expect_status groups "$@"; }  # expect <status> <text in stderr> <args...>
expect 1 "world size 6 is not divisible by t·p = 4" --world 6 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
expect 1 "needs at least 8 ranks but the world size is 4" --world 4 --tensor-model-parallel-size 8
expect 1 "--tensor-model-parallel-size must be between 1 and" --world 4 --tensor-model-parallel-size 0
expect 1 "--world must be between 1 and" --world 0
expect 1 "--expert-model-parallel-size 4 does not divide the data-parallel size 2 (world 4 / t·p = 2)" \
  --world 4 --tensor-model-parallel-size 2 --expert-model-parallel-size 4
expect 1 "--expert-model-parallel-size must be between 1 and .* (got 0)" --world 4 --ep 0
expect 2 "--expert-model-parallel-size takes a whole number between 1 and 1048576 (got two)" --world 4 --ep two
expect 1 "world size 6 is not divisible by t·c·p = 4" --world 6 --cp 2 --tensor-model-parallel-size 2
expect 1 "--expert-model-parallel-size 4 does not divide the data-parallel × context-parallel size N_d·c = 2" \
  --world 2 --cp 2 --ep 4
expect 2 "--context-parallel-size takes a whole number between 1 and 1048576 (got two)" --world 4 --cp two
expect 1 "--svg draws at most" --world 8192 --svg "$SCRATCH/big.svg"
expect 2 "--world" --tensor-model-parallel-size 2
expect 2 "--world" --world lots
expect 2 "--no-such-flag" --world 4 --no-such-flag
[ -e "$SCRATCH/big.svg" ] && fail "a refused --svg writes nothing"

"$LATTICE" groups --help > /dev/null || fail "--help"
test "$fails" -eq 0 && echo ok
