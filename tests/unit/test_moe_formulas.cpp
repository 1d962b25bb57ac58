// The MoE formulas (src/analysis/moe_formulas.*, docs/design.md §12) against counts made by hand:
// parameters of a small MoE model (whole, per expert-parallel rank, per pipeline stage, active),
// expert capacity and its rounding, the routed-assignment bound of every router with and without
// dropping and with routing groups, the bytes an MoE block keeps, and the planner's additions
// (all-to-all bytes, model states under EP × ZeRO, FLOPs).
#include <gtest/gtest.h>

#include <cstdint>

#include "analysis/formulas.hpp"
#include "analysis/moe_formulas.hpp"
#include "core/stage_partition.hpp"
#include "core/config.hpp"

using namespace lattice;
using namespace lattice::analysis;

namespace {

// L = 4, h = 8, a = 2, s = 16, vocabulary 100 (stored padded to 128), E = 4 experts of f = 16 in
// layers 0 and 2 (F = 2), noisy top-k router (k = 2; W_g and W_noise).
ModelConfig small_moe() {
  ModelConfig c;
  c.layers = 4;
  c.hidden = 8;
  c.heads = 2;
  c.seq_len = 16;
  c.vocab = 100;
  c.moe.experts = 4;
  c.moe.layer_freq = 2;
  c.moe.ffn_hidden = 16;
  c.moe.router = MoERouter::topk;
  return c;
}

MoEConfig router(MoERouter kind, int experts, double capacity_factor, int groups = 1, int topk = 0) {
  MoEConfig m;
  m.router = kind;
  m.experts = experts;
  m.capacity_factor = capacity_factor;
  m.groups = groups;
  m.topk = topk;
  return m;
}

}  // namespace

// ---- Parameters -------------------------------------------------------------------------------

// By hand, h = 8:
//   token embedding 128·8 = 1024, position embedding 16·8 = 128, final LayerNorm 16     → 1168
//   every layer: LN1 16 + QKV 8·24 + 24 = 216 + proj 8·8 + 8 = 72 + LN2 16 = 320     × 4 → 1280
//   dense MLP (layers 1, 3): FC1 8·32 + 32 = 288, FC2 32·8 + 8 = 264 → 552           × 2 → 1104
//   MoE MLP (layers 0, 2): 4 experts of FC1 8·16 + 16 = 144, FC2 16·8 + 8 = 136 → 280
//                          = 1120, router W_g + W_noise 2·8·4 = 64 → 1184           × 2 → 2368
//   total 1168 + 1280 + 1104 + 2368 = 5920
TEST(MoEFormulas, ParametersOfASmallModelByHand) {
  const ModelConfig c = small_moe();
  EXPECT_EQ(c.moe_layers(), 2);
  EXPECT_EQ(moe_expert_params(c), 280);
  EXPECT_EQ(moe_router_params(c), 64);
  EXPECT_EQ(c.num_params(), 5920);
  EXPECT_EQ(all_expert_parameters(c), 2 * 4 * 280);
  // One rank of tensor size 1: everything, with E/e experts of each MoE layer.
  EXPECT_EQ(moe_rank_parameters(c, 1, 1), 5920);
  EXPECT_EQ(moe_rank_parameters(c, 1, 2), 5920 - 2 * 2 * 280);  // two experts fewer in each MoE layer
  // Tensor size 2: vocabulary padded to 256, 128 rows a rank (1024) + positions 128 + final LN 16 = 1168;
  // a layer: QKV 96 + bias 12, proj 32 + bias 8 (replicated), two LNs 32 = 180;
  // dense MLP: FC1 64·2 + bias 16, FC2 128 + bias 8 = 280; expert: FC1 64 + 8, FC2 64 + 8 (replicated) = 144.
  EXPECT_EQ(moe_rank_parameters(c, 2, 1), 1168 + 4 * 180 + 2 * 280 + 2 * (4 * 144 + 64));  // 3728
  EXPECT_EQ(moe_rank_parameters(c, 2, 4), 1168 + 4 * 180 + 2 * 280 + 2 * (1 * 144 + 64));  // 2864
}

TEST(MoEFormulas, ActiveParametersCountKExpertsAndTheSwitchRouterIsOneMatrix) {
  ModelConfig c = small_moe();
  c.moe.router = MoERouter::switch_;  // k = 1, W_g only: the router is 8·4 = 32 per MoE layer
  EXPECT_EQ(c.num_params(), 5920 - 2 * 32);
  EXPECT_EQ(active_parameters(c), 5856 - 2 * 3 * 280);  // 3 of the 4 experts idle for a token, two layers
  c.moe.router = MoERouter::topk;                       // k = 2
  EXPECT_EQ(active_parameters(c), 5920 - 2 * 2 * 280);
}

// The planner's split of a shard: dense (reduced over N_d) and experts (over N_d/e).
namespace {
LayoutConfig pipeline(int tp, int pp, int m, int ep) {
  LayoutConfig l;
  l.tp = tp, l.pp = pp, l.virtual_stages = m, l.ep = ep;
  return l;
}
}  // namespace

TEST(MoEFormulas, ShardParametersSplitDenseFromExpertsPerPipelineStage) {
  const ModelConfig c = small_moe();
  const MoEShardParameters one = moe_shard_parameters(c, pipeline(1, 1, 1, 2));
  EXPECT_EQ(one.dense, 1168 + 1280 + 1104 + 2 * 64);  // routers are dense
  EXPECT_EQ(one.experts, 2 * 2 * 280);
  EXPECT_EQ(one.total(), moe_rank_parameters(c, 1, 2));
  // p = 2: the first stage holds layers 0 and 1 (one MoE layer) and no final LayerNorm.
  const MoEShardParameters stage = moe_shard_parameters(c, pipeline(1, 2, 1, 1));
  EXPECT_EQ(stage.dense, 1024 + 128 + 2 * 320 + 552 + 64);
  EXPECT_EQ(stage.experts, 4 * 280);
  // p = 2, m = 2: chunks of one layer; pipeline rank 0 holds layers 0 and 2, both MoE layers.
  const MoEShardParameters interleaved = moe_shard_parameters(c, pipeline(1, 2, 2, 1));
  EXPECT_EQ(interleaved.dense, 1024 + 128 + 2 * 320 + 2 * 64);
  EXPECT_EQ(interleaved.experts, 2 * 4 * 280);
  // A dense model: the same count as the dense formula, written separately (docs/design.md §8).
  ModelConfig dense = c;
  dense.moe = MoEConfig{};
  dense.heads = 4;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4}) {
      SCOPED_TRACE("t=" + std::to_string(tp) + " p=" + std::to_string(pp));
      EXPECT_EQ(moe_shard_parameters(dense, pipeline(tp, pp, 1, 1)).dense, shard_parameters(dense, tp, pp));
      EXPECT_EQ(moe_shard_parameters(dense, pipeline(tp, pp, 1, 1)).experts, 0);
    }
}

TEST(MoEFormulas, FirstStageLayersUnderPipelineAndInterleaving) {
  ModelConfig c = small_moe();
  c.layers = 12;
  c.moe.layer_freq = 3;  // MoE layers 0, 3, 6, 9
  EXPECT_EQ(first_stage_moe_layers(c, pipeline(1, 1, 1, 1)), 4);
  EXPECT_EQ(first_stage_moe_layers(c, pipeline(1, 2, 1, 1)), 2);  // layers 0-5: 0, 3
  EXPECT_EQ(first_stage_moe_layers(c, pipeline(1, 4, 1, 1)), 1);  // layers 0-2: 0
  // p = 4, m = 3: chunks of one layer; rank 0 holds layers 0, 4, 8 — only 0 is an MoE layer.
  EXPECT_EQ(StagePartition::of(pipeline(1, 4, 3, 1), 12).layers_of_rank(0, 4), (std::vector<int>{0, 4, 8}));
  EXPECT_EQ(first_stage_moe_layers(c, pipeline(1, 4, 3, 1)), 1);
  // p = 3, m = 2: chunks of two layers; rank 0 holds layers 0, 1 and 6, 7 — MoE 0 and 6.
  EXPECT_EQ(StagePartition::of(pipeline(1, 3, 2, 1), 12).layers_of_rank(0, 3), (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(first_stage_moe_layers(c, pipeline(1, 3, 2, 1)), 2);
  // Uneven stages: 5 layers on the first stage hold MoE layers 0 and 3.
  LayoutConfig uneven = pipeline(1, 2, 1, 1);
  uneven.stage_layers = {5, 7};
  EXPECT_EQ(first_stage_moe_layers(c, uneven), 2);
  uneven.stage_layers = {1, 11};
  EXPECT_EQ(first_stage_moe_layers(c, uneven), 1);
}

// ---- Capacity and routing -----------------------------------------------------------------------

TEST(MoEFormulas, CapacityRoundsUpOnlyPastAWholeToken) {
  // C = ceil(k·T·cf/E)
  EXPECT_EQ(expert_capacity(router(MoERouter::topk, 8, 1.25), 100), 32);    // 2·100·1.25/8 = 31.25
  EXPECT_EQ(expert_capacity(router(MoERouter::switch_, 4, 1.0), 64), 16);   // exactly 16
  EXPECT_EQ(expert_capacity(router(MoERouter::switch_, 1, 1.1), 10), 11);   // 10·1.1 is 11.000000000000002 in binary
  EXPECT_EQ(expert_capacity(router(MoERouter::switch_, 1, 1.0000001), 10), 11);  // a real excess still rounds up
  EXPECT_EQ(expert_capacity(router(MoERouter::switch_, 64, 1.0), 1), 1);    // never below one token
  EXPECT_EQ(expert_capacity(router(MoERouter::topk, 8, 0.0), 100), 0);      // cf 0: no limit
  EXPECT_EQ(expert_capacity(router(MoERouter::topk, 8, 1.0, 1, 3), 8), 3);  // k = 3: 3·8/8
  // Expert choice: expert j takes C = ceil(c·T·cf/E) tokens, at most the T there are.
  EXPECT_EQ(expert_capacity(router(MoERouter::expert_choice, 4, 2.0), 8), 4);
  EXPECT_EQ(expert_capacity(router(MoERouter::expert_choice, 2, 10.0), 8), 8);  // 40 capped at T
}

TEST(MoEFormulas, RoutedAssignmentsForEveryRouterWithAndWithoutDropping) {
  // Noisy top-k, k = 2, E = 4, 64 tokens: C = 32, E·C = 128 = k·T.
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::topk, 4, 1.0), 64), 128);
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::topk, 4, 0.5), 64), 64);  // C = 16: E·C = 64 kept
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::topk, 4, 0.0), 64), 128);  // no dropping: k·T
  // Switch, k = 1, E = 8, 60 tokens: C = ceil(7.5) = 8, E·C = 64 >= 60 — nothing dropped.
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::switch_, 8, 1.0), 60), 60);
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::switch_, 8, 0.5), 60), 32);  // C = ceil(3.75) = 4
  // GShard, k = 2, E = 4, 60 tokens, cf 0.75: one group C = ceil(22.5) = 23 → 92 of 120;
  // four groups of 15: C = ceil(5.625) = 6 per group → 4 · min(30, 24) = 96 (rounding per group).
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::gshard, 4, 0.75), 60), 92);
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::gshard, 4, 0.75, 4), 60), 96);
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::gshard, 4, 0.0, 4), 60), 120);
  // Expert choice takes exactly E·C per group, whatever the tokens want: E = 4, 64 tokens.
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::expert_choice, 4, 1.0), 64), 64);      // C = 16
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::expert_choice, 4, 1.0, 2), 64), 64);   // 2 · 4 · 8
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::expert_choice, 4, 2.0), 64), 128);     // C = 32
  EXPECT_EQ(routed_assignments_bound(router(MoERouter::expert_choice, 4, 4.0, 2), 8), 32);    // C = T = 4
}

TEST(MoEFormulas, ReceivedRowsOfTheMostLoadedRank) {
  // Switch, E = 8, 60 tokens a rank, e = 2: all of both ranks' 60 assignments could go to one rank's
  // experts (120), but each source sends an expert at most C = 8: 8 experts' worth, 64.
  EXPECT_EQ(moe_received_rows_bound(router(MoERouter::switch_, 8, 1.0), 60, 2), 64);
  EXPECT_EQ(moe_received_rows_bound(router(MoERouter::switch_, 8, 0.0), 60, 2), 120);  // no capacity
  EXPECT_EQ(moe_received_rows_bound(router(MoERouter::switch_, 8, 1.0), 60, 1), 60);
  // Expert choice is balanced by construction: E·C = A.
  EXPECT_EQ(moe_received_rows_bound(router(MoERouter::expert_choice, 4, 1.0), 64, 2), 64);
}

// ---- Bytes kept ---------------------------------------------------------------------------------

// s = 4, b = 2 (N = 8 tokens), h = 8, fp32, dropout on, E = 4, f = 16, noisy top-k router, expert
// dropout, A = R = 16:
//   replicated: LN2 input 8·8·4, router input 8·8·4, residual mask 8·8·1          = 576
//   router: probabilities, clean logits, noise logits, fp32 [8, 4] each, 3·8·4·4      = 384
//   dispatch: int32 token[16], expert[16], send counts[4], receive counts[4], ·4     = 160
//   combine: fp32 gate[16] 64 + the experts' outputs back at the source 16·8·4 512   = 576
//   experts: FC1 input 16·8·4 512, GeLU input 16·16·4 1024, FC2 input 1024, mask 256 = 2816
TEST(MoEFormulas, KeptBytesOfAnMoEBlockByHand) {
  MoEKeptShape m;
  m.s = 4, m.b = 2, m.h = 8, m.t = 1, m.sp = false, m.d = 4, m.dropout = true;
  m.experts = 4, m.ffn_hidden = 16, m.noisy_router = true, m.expert_dropout = true;
  m.assignments = 16, m.received = 16;
  MoEKeptBytes k = moe_mlp_kept_bytes(m);
  EXPECT_EQ(k.replicated, 576);
  EXPECT_EQ(k.router, 384);
  EXPECT_EQ(k.dispatch, 160);
  EXPECT_EQ(k.combine, 576);
  EXPECT_EQ(k.experts, 2816);
  EXPECT_EQ(k.total(), 4512);
  // t = 2 with SP: the replicated part is a sequence shard (4 tokens), experts hold f/t = 8 columns;
  // the router still sees all 8 tokens.
  m.t = 2, m.sp = true;
  k = moe_mlp_kept_bytes(m);
  EXPECT_EQ(k.replicated, 4 * 8 * 9);
  EXPECT_EQ(k.router, 384);
  EXPECT_EQ(k.experts, 16 * (8 * 4 + 8 * 4 + 8 * 4 + 8));
}

// A whole MoE layer: Table 2's attention half (sbh(16d+2) + as²b(2d+1) less the MLP's sbh(10d+1))
// plus the block. s = 4, b = 2, h = 8, a = 2, fp32: sbh = 64, as²b = 64.
TEST(MoEFormulas, AnMoELayerIsTheAttentionHalfPlusTheBlock) {
  ActivationShape x;
  x.s = 4, x.b = 2, x.h = 8, x.a = 2, x.v = 128, x.t = 1, x.sp = false, x.d = 4, x.dropout = true;
  MoEKeptShape m;
  m.s = 4, m.b = 2, m.h = 8, m.d = 4, m.experts = 4, m.ffn_hidden = 16, m.noisy_router = true;
  m.expert_dropout = true, m.assignments = 16, m.received = 16;
  const int64_t attention_half = 64 * 66 + 64 * 9 - 64 * 41;  // 4800 − 2624 = 2176
  EXPECT_EQ(moe_layer_activation_bytes(x, m, false, false), attention_half + 4512);
  EXPECT_EQ(moe_layer_activation_bytes(x, m, false, true), attention_half - 64 * 9 + 4512);  // no s² part
  EXPECT_EQ(moe_layer_activation_bytes(x, m, true, false), 64 * 4);  // full recompute: the input only
}

// Eq. 5 for an MoE model with p = 1: the MoE layers at their row, the others at Table 2's.
TEST(MoEFormulas, FirstStageSumsMoEAndDenseRows) {
  ModelConfig c = small_moe();
  ActivationShape x;
  x.s = 16, x.b = 1, x.h = 8, x.a = 2, x.v = 128, x.d = 4;
  MoEKeptShape m;
  m.s = 16, m.b = 1, m.h = 8, m.d = 4, m.experts = 4, m.ffn_hidden = 16, m.noisy_router = true;
  m.assignments = m.received = 32;
  LayoutConfig l;
  const int64_t dense = layer_activation_bytes(x, false, false), moe = moe_layer_activation_bytes(x, m, false, false);
  EXPECT_NE(dense, moe);
  EXPECT_DOUBLE_EQ(moe_first_stage_layer_bytes(x, m, l, c), double(2 * moe + 2 * dense));
  // Full recompute of the first layer (an MoE layer) only.
  l.recompute = Recompute::full;
  l.recompute_layers = 1;
  EXPECT_DOUBLE_EQ(moe_first_stage_layer_bytes(x, m, l, c), double(16 * 8 * 4 + moe + 2 * dense));
}

// ---- Communication, model states, FLOPs ---------------------------------------------------------

TEST(MoEFormulas, AllToAllSendsTheRowsBoundForOtherRanks) {
  EXPECT_DOUBLE_EQ(moe_all_to_all_bytes(16, 8, 4), 3.0 / 4 * 16 * 8 * 4);  // 384
  EXPECT_DOUBLE_EQ(moe_all_to_all_bytes(16, 8, 2, 2), 16.0 * 8 * 2 / 2);
  EXPECT_EQ(moe_all_to_all_bytes(16, 8, 1), 0.0);  // one rank holds every expert: nothing moves
}

TEST(MoEFormulas, ExpertStatesShardOverTheExpertDataParallelGroup) {
  // N_d = 4, e = 2: a rank holds 800 expert parameters (its E/e experts), 1000 dense.
  const MoEShardParameters e2{1000, 800}, e1{1000, 1600};
  // No ZeRO, mixed precision: 16 bytes a parameter, wherever it lives.
  EXPECT_EQ(moe_model_state_bytes(e2, 4, 2, 0, true).total(), 16 * 1800);
  EXPECT_EQ(moe_model_state_bytes(e1, 4, 1, 0, true).total(), 16 * 2600);
  // ZeRO-1: 2 + 2 bytes kept whole, the 12-byte optimizer states over the group: dense over 4 ranks,
  // experts over N_d/e = 2.
  EXPECT_EQ(moe_model_state_bytes(e2, 4, 2, 1, true).total(), 4 * 1000 + 12 * 1000 / 4 + 4 * 800 + 12 * 800 / 2);
  EXPECT_EQ(moe_model_state_bytes(e1, 4, 1, 1, true).total(), 4 * 1000 + 12 * 1000 / 4 + 4 * 1600 + 12 * 1600 / 4);
  // ZeRO-3: everything sharded; the experts' 16·(X/e)/(N_d/e) = 16X/N_d does not depend on e.
  EXPECT_EQ(moe_model_state_bytes(e2, 4, 2, 3, true).total(), 16 * 1000 / 4 + 16 * 800 / 2);
  EXPECT_EQ(moe_model_state_bytes(e2, 4, 2, 3, true).total(), moe_model_state_bytes(e1, 4, 1, 3, true).total());
  // fp32 ZeRO-2 rounds each share up: 4·1001 + ⌈4·1001/4⌉ + ⌈8·1001/4⌉, experts ⌈4·3/2⌉ + ⌈8·3/2⌉ + 4·3.
  EXPECT_EQ(moe_model_state_bytes({1001, 3}, 4, 2, 2, false).total(), 4004 + 1001 + 2002 + 12 + 6 + 12);
}

// For a dense model, 3 × forward FLOPs per token × tokens is eq. 7 (written separately).
TEST(MoEFormulas, ModelFlopsOfADenseModelAreEquation7) {
  ModelConfig c;
  c.layers = 24, c.hidden = 1024, c.heads = 16, c.seq_len = 2048, c.vocab = 50257;
  FlopsShape f{64, 2048, 24, 1024, double(c.padded_vocab())};
  EXPECT_NEAR(moe_model_flops(c, 64) / model_flops(f), 1.0, 1e-12);
  EXPECT_NEAR(moe_hardware_flops_counted(c, 64, Recompute::full) / hardware_flops_counted(f, Recompute::full), 1.0, 1e-12);
  EXPECT_NEAR(moe_hardware_flops_counted(c, 64, Recompute::selective) / hardware_flops_counted(f, Recompute::selective),
              1.0, 1e-12);
}

// The small model, forward FLOPs a token by hand (2 per active matrix parameter, plus attention):
//   attention GEMMs 2·4h² = 512 and scores 4sh = 512, four layers               → 4096
//   dense MLP 2·8h² = 1024, two layers                                          → 2048
//   MoE MLP: k = 2 experts of 2hf = 256 → 1024, noisy router 2·64 = 128, two layers → 2304
//   logits 2·h·v = 2·8·128                                                      → 2048
//   10496 a token; B = 3 sequences of 16 tokens, forward + backward = 3 × 48 × 10496.
TEST(MoEFormulas, ModelFlopsOfAnMoEModelCountActiveParameters) {
  const ModelConfig c = small_moe();
  EXPECT_DOUBLE_EQ(forward_flops_per_token(c), 10496);
  EXPECT_DOUBLE_EQ(moe_model_flops(c, 3), 3.0 * 48 * 10496);
  EXPECT_DOUBLE_EQ(moe_hardware_flops_counted(c, 3, Recompute::none), 3.0 * 48 * 10496);
  EXPECT_DOUBLE_EQ(moe_hardware_flops_counted(c, 3, Recompute::full), 3.0 * 48 * 10496 + 48.0 * (10496 - 2048));
  EXPECT_DOUBLE_EQ(moe_hardware_flops_counted(c, 3, Recompute::selective), 3.0 * 48 * 10496 + 48.0 * 4 * 512);
}
