// The planner's context parallelism (docs/design.md §5.1, docs/plan.md): c ranks share each sequence
// (Ulysses all-to-all, or the ring), so a rank keeps and computes 1/c of every layer, holds the model
// states sharded over DP × CP, stages the exchanges, and spends 8 all-to-alls a layer and micro-batch
// (9 with fused attention) on the CP group, or what the ring's transfers leave exposed; --search tries c.
#include <gtest/gtest.h>

#include "analysis/formulas.hpp"
#include "plan/collectives.hpp"
#include "plan/evaluate.hpp"
#include "plan/report.hpp"
#include "plan/search.hpp"

using namespace lattice;
using namespace lattice::plan;

namespace {
// s = 256 in 2c chunks for c ≤ 4, 8 heads (a/c each): the trainer's rules hold for c = 1, 2, 4.
PlanRequest one_sequence_split(int c, int dp = 1) {
  PlanRequest r;
  r.model.layers = 4;
  r.model.hidden = 256;
  r.model.heads = 8;
  r.model.seq_len = 256;
  r.model.vocab = 512;
  r.layout.cp = c;
  r.layout.cp_comm = CpComm::a2a;
  r.layout.dp = dp;
  r.gpus = c * dp;
  r.micro_batch = 2;
  r.global_batch = 4 * dp;
  r.gpu_memory = int64_t(80) * 1000 * 1000 * 1000;
  r.engine_scratch = false;  // oneDNN's scratchpads are the engine's, not the formulas'
  return r;
}
}  // namespace

TEST(PlanContextParallel, KeepsAndComputesOneCthOfALayer) {
  const Hardware& hw = hardware_preset("A100-80GB");
  const PlanRequest one = one_sequence_split(1);
  const MemoryPlan m1 = plan_memory(one);
  const TimePlan t1 = plan_time(one, hw);
  for (int c : {2, 4}) {
    const PlanRequest r = one_sequence_split(c);
    EXPECT_EQ(layout_problem(r), "") << c;
    const MemoryPlan m = plan_memory(r);
    // Every term of a layer's row is ÷ c (s/c positions; a/c heads over s), so the row is exactly 1/c.
    EXPECT_EQ(m.activation_bytes_per_layer * c, m1.activation_bytes_per_layer) << c;
    // Without ZeRO every CP rank holds the whole model states, as one rank does.
    EXPECT_EQ(m.model_state.total(), m1.model_state.total()) << c;
    // Each rank's GEMMs and element-wise kernels are 1/c of one rank's (the preset's rates): s/c rows in
    // the linears and a/c heads over s in attention, the same micro-batches a step.
    const TimePlan t = plan_time(r, hw);
    EXPECT_NEAR(t.gemm_s * c, t1.gemm_s, 1e-12 * t1.gemm_s) << c;
    EXPECT_NEAR(t.elementwise_s * c, t1.elementwise_s, 1e-12 * t1.elementwise_s) << c;
  }
}

TEST(PlanContextParallel, StagesTheExchangesAndShardsStatesOverDpTimesCp) {
  // The communication category gains Ulysses' send and receive staging, b·(s/c)·h/t floats each.
  const analysis::CategoryBytes one = plan_memory(one_sequence_split(1)).by_stage.at(0);
  const analysis::CategoryBytes two = plan_memory(one_sequence_split(2)).by_stage.at(0);
  EXPECT_EQ(two.communication - one.communication, 2 * 4 * 2 * (256 / 2) * 256);
  // ZeRO-1 over DP 2 × CP 2 shards as over 4 data-parallel ranks: the trainer's DP-with-CP group.
  PlanRequest cp = one_sequence_split(2, 2), dp = one_sequence_split(1, 4);
  cp.layout.zero = dp.layout.zero = 1;
  EXPECT_EQ(plan_memory(cp).model_state.total(), plan_memory(dp).model_state.total());
  EXPECT_LT(plan_memory(cp).model_state.total(), plan_memory(one_sequence_split(2, 1)).model_state.total());
}

TEST(PlanContextParallel, ChargesEightAllToAllsALayerAndNineFused) {
  const Hardware& hw = hardware_preset("A100-80GB");
  for (bool fused : {false, true}) {
    PlanRequest r = one_sequence_split(4);
    r.layout.attention = fused ? AttentionKernel::fused : AttentionKernel::unfused;
    const double sent = analysis::cp_all_to_all_sent_bytes(256, 2, 256, 1, 4, 4);  // fp32 activations
    const double one = all_to_all(group_topology(hw, 4, 1), sent).seconds;
    const double exchanges = r.micro_batches() * r.model.layers * (fused ? 9.0 : 8.0);
    EXPECT_GT(one, 0);
    EXPECT_NEAR(plan_time(r, hw).cp_comm_s, exchanges * one, 1e-12 * exchanges * one) << fused;
    // Full recompute re-runs each forward, and its four exchanges, once more (counted as recompute).
    PlanRequest full = r;
    full.layout.recompute = Recompute::full;
    const TimePlan t = plan_time(full, hw);
    EXPECT_NEAR(t.cp_comm_s, exchanges * one, 1e-12 * exchanges * one);
    EXPECT_GE(t.recompute_s, r.micro_batches() * r.model.layers * 4.0 * one);
  }
  EXPECT_EQ(plan_time(one_sequence_split(1), hw).cp_comm_s, 0.0);
}

// The ring (p2p): its ten K-sized buffers under communication, and its time only what the blocks of
// each step do not hide. With a link so slow that transfers dwarf compute every transfer is exposed:
// per layer and micro-batch 3c − 2 K, V pairs (the bytes formula's), less at most the attention's
// compute; with a free link only the last dK, dV partial sums' trip home, which nothing overlaps.
TEST(PlanContextParallel, TheRingChargesWhatItsBlocksDoNotHide) {
  PlanRequest r = one_sequence_split(4);
  r.layout.cp_comm = CpComm::p2p;
  r.layout.attention = AttentionKernel::fused;
  ASSERT_EQ(layout_problem(r), "");
  PlanRequest ulysses = r;
  ulysses.layout.cp_comm = CpComm::a2a;
  const int64_t k_floats = 2 * (256 / 4) * 256;  // b·(s/c)·h
  EXPECT_EQ(plan_memory(r).by_stage.at(0).communication - plan_memory(ulysses).by_stage.at(0).communication,
            (10 - 2) * 4 * k_floats);

  const double per_layer_mb = double(r.micro_batches() * r.model.layers);
  const double pair_bytes = analysis::cp_ring_pair_bytes(256, 2, 256, 1, 4, 4);
  EXPECT_EQ(pair_bytes, 2.0 * 4 * k_floats);
  Hardware slow = hardware_preset("A100-80GB");
  slow.intra.beta *= 1e6, slow.inter.beta *= 1e6;
  const double pair = point_to_point(group_topology(slow, 4, 1), pair_bytes).seconds;
  const TimePlan t = plan_time(r, slow);
  EXPECT_LE(t.cp_comm_s, per_layer_mb * (3 * 4 - 2) * pair * (1 + 1e-12));
  EXPECT_GE(t.cp_comm_s, per_layer_mb * (3 * 4 - 2) * pair - (t.gemm_s + t.recompute_s));
  EXPECT_LT(t.gemm_s + t.recompute_s, 0.01 * t.cp_comm_s);  // so the bound above is tight

  Hardware fast = hardware_preset("A100-80GB");
  fast.intra = fast.inter = Link{1e-9, 1e-15};
  const double home = point_to_point(group_topology(fast, 4, 1), pair_bytes).seconds;
  EXPECT_NEAR(plan_time(r, fast).cp_comm_s, per_layer_mb * home, 1e-9 * per_layer_mb * home);
}

// CP × PP: a pipeline stage keeps and computes 1/c of its layers, as one stage does without CP, and the
// messages between stages carry a rank's s/c positions: the α–β point-to-point term's β part halves.
TEST(PlanContextParallel, PipelineStagesKeepAndSendOneCthOfTheirPositions) {
  const Hardware& hw = hardware_preset("A100-80GB");
  PlanRequest pp = one_sequence_split(1), cppp = one_sequence_split(2);
  cppp.layout.cp_comm = CpComm::a2a;  // what the planner's exchanges model (Ulysses)
  pp.layout.pp = cppp.layout.pp = 2;
  pp.gpus = 2, cppp.gpus = 4;
  ASSERT_EQ(layout_problem(cppp), "");
  const MemoryPlan m1 = plan_memory(pp), m2 = plan_memory(cppp);
  ASSERT_EQ(m2.by_stage.size(), 2u);
  EXPECT_EQ(m2.activation_bytes_per_layer * 2, m1.activation_bytes_per_layer);
  // eq. 5 holds per rank: 1F1B's first stage keeps L layers' worth of its own (halved) row.
  EXPECT_DOUBLE_EQ(m2.first_stage_layer_bytes * 2, m1.first_stage_layer_bytes);
  EXPECT_DOUBLE_EQ(m2.first_stage_layer_bytes, double(pp.model.layers) * m2.activation_bytes_per_layer);
  // The stages' receive buffer and send pool hold b·(s/c)·h floats a message.
  for (size_t stage = 0; stage < 2; ++stage)
    EXPECT_EQ(m2.by_stage[stage].pipeline * 2, m1.by_stage[stage].pipeline) << stage;
  // Point-to-point: 2 messages (activation forward, gradient back) a micro-batch, α + bytes·β each, the
  // PP group's ranks t·c·N_d apart.
  const Link link = group_topology(hw, 2, 2).flat_link();
  const double bytes = 2.0 * (256 / 2) * 256 * 4;  // b·(s/c)·h at 4 bytes (fp32 activations)
  EXPECT_NEAR(plan_time(cppp, hw).pp_comm_s, cppp.micro_batches() * 2 * (link.alpha + bytes * link.beta),
              1e-12 * plan_time(cppp, hw).pp_comm_s);
  EXPECT_GT(plan_time(cppp, hw).cp_comm_s, 0);
}

TEST(PlanContextParallel, RefusesWhatTheTrainerRefusesInItsWords) {
  PlanRequest r = one_sequence_split(2);
  r.model.seq_len = 250;  // not divisible by 2c = 4
  EXPECT_EQ(layout_problem(r), context_parallel_problem(r.model, r.layout));
  EXPECT_NE(layout_problem(r).find("is not divisible by 4"), std::string::npos);
  r = one_sequence_split(4);
  r.model.heads = 2;  // a/(t·c) would not be whole
  r.model.hidden = 256;
  EXPECT_NE(layout_problem(r).find("are not divisible by 4"), std::string::npos);
  r = one_sequence_split(2);
  r.layout.cp_comm = CpComm::a2a;
  r.layout.pp = 2;
  r.gpus = 4;
  EXPECT_EQ(layout_problem(r), "");  // CP × PP runs (every schedule): nothing to refuse
  r = one_sequence_split(2);
  r.gpus = 3;
  EXPECT_NE(layout_problem(r).find("t·c·p·DP must equal --gpus"), std::string::npos);
  // An MoE model plans under CP; EP folds over DP × CP, so e must divide N_d·c (here 1·2).
  r = one_sequence_split(2);
  r.model.moe.experts = 4;
  EXPECT_EQ(layout_problem(r), "");
  r.layout.ep = 2;
  EXPECT_EQ(layout_problem(r), "");
  r.layout.ep = 4;
  EXPECT_NE(layout_problem(r).find("must divide N_d·c = gpus/(t·p) = 2"), std::string::npos);
}

// A long sequence on single-device nodes: TP cannot leave a node, so t = 1, and pipeline stages do not
// shrink what the first stage keeps (eq. 5: L layers' worth under 1F1B), nor does DP. Only splitting the
// sequence fits it, so the search must pick c > 1 — and it must not find a layout with c = 1.
TEST(PlanSearch, PicksContextParallelWhenALongSequenceDoesNotFitOtherwise) {
  Hardware hw = hardware_preset("A100-80GB");
  hw.devices_per_node = 1;
  PlanRequest base;
  base.model.layers = 128;
  base.model.hidden = 2048;
  base.model.heads = 16;
  base.model.seq_len = 262144;
  base.model.vocab = 51200;
  base.layout.activation_dtype = DType::bf16;
  base.layout.params_dtype = ParamsDType::bf16;
  base.layout.attention = AttentionKernel::fused;
  base.gpus = 8;
  base.global_batch = 8;
  base.gpu_memory = hw.memory_bytes;
  const SearchResult found = search_layouts(base, hw, 100000);
  ASSERT_FALSE(found.best.empty());
  EXPECT_GT(found.best.front().request.layout.cp, 1);
  for (const Plan& p : found.best) {
    EXPECT_GT(p.request.layout.cp, 1) << describe_layout(p.request);
    EXPECT_TRUE(p.memory.fits());
  }
}

// An MoE model under CP (docs/design.md §5.1): a rank keeps 1/c of every per-token tensor of an MoE
// layer (no dropping, so its assignments are exactly k·s·b/c), but the whole micro-batch's router
// probabilities, which every CP rank routes alike, and its 2E send and receive counts; the planner
// says so, and EP folds over DP × CP.
TEST(PlanContextParallel, MoELayerKeepsOneCthBesideTheWholeRouting) {
  auto moe = [](int c, int ep) {
    PlanRequest r = one_sequence_split(c);
    r.model.moe.experts = 4;
    r.model.moe.capacity_factor = 0;  // no dropping: A = k·s·b/c exactly
    r.layout.ep = ep;
    return r;
  };
  const PlanRequest one = moe(1, 1);
  // Noisy top-k: 3 fp32 [sb, E]; the counts 2E int32.
  const int64_t router = int64_t(one.model.seq_len) * one.micro_batch * 4 * 4 * 3 + 2 * 4 * 4;
  const MemoryPlan m1 = plan_memory(one);
  for (auto [c, ep] : {std::pair{2, 1}, {2, 2}, {4, 4}}) {
    SCOPED_TRACE(std::to_string(c) + " " + std::to_string(ep));
    const PlanRequest r = moe(c, ep);
    ASSERT_EQ(layout_problem(r), "");
    const MemoryPlan mc = plan_memory(r);
    EXPECT_EQ((mc.moe_layer_activation_bytes - router) * c, m1.moe_layer_activation_bytes - router);
    // Experts: E/e a rank, their gradients over N_d·c/e ranks (here c/e).
    EXPECT_EQ(mc.expert_parameters * ep, m1.expert_parameters);
    const Hardware& hw = hardware_preset("A100-80GB");
    EXPECT_GT(plan_time(r, hw).cp_comm_s, plan_time(one_sequence_split(c), hw).cp_comm_s);  // + the logits' gather
  }
}

// --search tries c > 1 for an MoE model too, and every e dividing N_d·c.
TEST(PlanSearch, TriesContextParallelForMoE) {
  Hardware hw = hardware_preset("A100-80GB");
  PlanRequest base = one_sequence_split(1);
  base.model.moe.experts = 4;
  base.gpus = 4;
  base.global_batch = 4;
  base.gpu_memory = hw.memory_bytes;
  const SearchResult found = search_layouts(base, hw, 100000);
  bool cp_with_folded_ep = false;
  for (const Plan& p : found.best) {
    const LayoutConfig& l = p.request.layout;
    EXPECT_EQ(l.dp * l.cp % l.ep, 0) << describe_layout(p.request);
    cp_with_folded_ep |= l.cp > 1 && l.ep > l.dp;  // e spans CP ranks
  }
  EXPECT_TRUE(cp_with_folded_ep);
}

// PipeDream-2BW keeps two whole weight versions: ZeRO-3 shards over DP × CP, so the planner refuses it
// over CP ranks as the trainer does (it offered the layout train refused), and allows it on one rank.
TEST(PlanContextParallel, PipeDream2bwRefusesZero3OverTheContextParallelRanks) {
  PlanRequest r = one_sequence_split(2);
  r.layout.pp = 2;
  r.gpus = 4;
  r.pipedream_2bw = true;
  r.layout.zero = 3;
  EXPECT_NE(layout_problem(r).find("--zero 3 shards them over the data-parallel and context-parallel ranks"),
            std::string::npos)
      << layout_problem(r);
  r.layout.zero = 2;
  EXPECT_EQ(layout_problem(r), "");
  PlanRequest alone = one_sequence_split(1);
  alone.layout.pp = 2;
  alone.gpus = 2;
  alone.pipedream_2bw = true;
  alone.layout.zero = 3;
  EXPECT_EQ(layout_problem(alone), "");
}
