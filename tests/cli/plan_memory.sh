#!/usr/bin/env bash
# `lattice plan` predicts each rank's memory by category (issue 15): bench/memory.sh on a small model
# for one rank, a recompute mode, 8-bit kept activations, offloaded moments, TP 2 + SP, PP 2 (1F1B, GPipe,
# interleaved, ZB-H1, and uneven stages), DP 2 with ZeRO 1, 2 (also under full recompute) and 3, a ZeRO-3 save,
# ZeRO-3 with its shards offloaded, context parallelism c = 2 (Ulysses alone and with ZeRO-1 sharded over DP x CP,
# the ring with fused attention and full recompute), and MoE on one rank (a bound: the capacity-capped rows; with EP 2 a
# rank receiving fewer rows sat 5.0% under the bound at this size, so that row is bench/memory.sh's); it
# fails if any rank's accounted peak is off by more than 5% or its RSS, with the runtime's measured
# constant, by more than 10%.
set -u
LATTICE=$1
SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LAYERS=4 HIDDEN=128 SEQ=128 TMPDIR="$SCRATCH" \
  ROWS="one one_full one_fp8 one_offload tp2_sp pp2_1f1b pp2_gpipe pp2_interleaved pp2_zb pp2_uneven dp2_zero1 dp2_zero2 dp2_zero2_full dp2_zero3 dp2_zero3_save dp2_zero3_offload cp2 cp2_zero1 cp2_fused_full one_moe" \
  "$ROOT/bench/memory.sh" "$(dirname "$LATTICE")"
