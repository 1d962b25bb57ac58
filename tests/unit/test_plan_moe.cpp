// The planner on MoE models (issue 13): layout errors, model states under EP × ZeRO, the MoE rows in
// eq. 5, the all-to-all time in the α–β model, the search over e, and the published configurations.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/evaluate.hpp"
#include "plan/paper_models.hpp"
#include "plan/paper_report.hpp"
#include "plan/search.hpp"

using namespace lattice;
using namespace lattice::plan;

namespace {

// L = 4, h = 64, a = 4, s = 32, vocabulary 256; E = 4 experts of f = 256 in layers 0 and 2, Switch
// router (k = 1, cf 1); 4 GPUs of data parallelism, b = 2, 8 sequences a step (one micro-batch a rank).
PlanRequest small_moe(int ep) {
  PlanRequest r;
  r.model.layers = 4;
  r.model.hidden = 64;
  r.model.heads = 4;
  r.model.seq_len = 32;
  r.model.vocab = 256;
  r.model.moe.experts = 4;
  r.model.moe.layer_freq = 2;
  r.model.moe.router = MoERouter::switch_;
  r.layout.dp = 4;
  r.layout.ep = ep;
  r.layout.activation_dtype = DType::bf16;
  r.layout.params_dtype = ParamsDType::bf16;
  r.gpus = 4;
  r.micro_batch = 2;
  r.global_batch = 8;
  r.gpu_memory = int64_t(80) * 1000 * 1000 * 1000;
  return r;
}

// One expert: FC1 64·256 + 256, FC2 256·64 + 64.
constexpr int64_t kExpert = 2 * 64 * 256 + 256 + 64;

}  // namespace

TEST(PlanMoE, NamesTheBrokenExpertParallelConstraint) {
  PlanRequest r = small_moe(2);
  EXPECT_EQ(layout_problem(r), "");
  r.model.moe.experts = 6;
  r.layout.ep = 4;
  EXPECT_NE(layout_problem(r).find("--num-experts (6) must be divisible by the expert-parallel size (4)"),
            std::string::npos);
  r = small_moe(8);  // 8 experts would fit 8 ranks, but N_d = 4
  r.model.moe.experts = 8;
  EXPECT_NE(layout_problem(r).find("must divide the data-parallel size"), std::string::npos);
  r = small_moe(3);
  r.model.moe.experts = 6;
  EXPECT_NE(layout_problem(r).find("must divide the data-parallel size"), std::string::npos);
  r = small_moe(2);
  r.model.moe = MoEConfig{};
  EXPECT_NE(layout_problem(r).find("needs an MoE model"), std::string::npos);
  r = small_moe(1);
  r.model.moe.groups = 3;  // 64 tokens a micro-batch
  EXPECT_NE(layout_problem(r).find("--moe-groups"), std::string::npos);
}

TEST(PlanMoE, ExpertParallelismDividesTheExpertsOfEachRank) {
  const MemoryPlan one = plan_memory(small_moe(1)), two = plan_memory(small_moe(2)), four = plan_memory(small_moe(4));
  EXPECT_EQ(one.expert_parameters, 2 * 4 * kExpert);
  EXPECT_EQ(two.expert_parameters, 2 * 2 * kExpert);
  EXPECT_EQ(four.expert_parameters, 2 * 1 * kExpert);
  EXPECT_EQ(one.dense_parameters, two.dense_parameters);
  EXPECT_EQ(one.shard_parameters, one.dense_parameters + one.expert_parameters);
  // No ZeRO, 16 bytes a parameter: e = 2 saves 16 bytes for each of the 2·2 experts a rank gave away.
  EXPECT_EQ(one.model_state.total() - two.model_state.total(), 16 * 2 * 2 * kExpert);
}

TEST(PlanMoE, UnderZeRO3ExpertStatesDoNotDependOnE) {
  // 16·(X/e)/(N_d/e) = 16X/N_d bytes of expert states per rank.
  PlanRequest a = small_moe(1), b = small_moe(4);
  a.layout.zero = b.layout.zero = 3;
  EXPECT_EQ(plan_memory(a).model_state.total(), plan_memory(b).model_state.total());
  a.layout.zero = b.layout.zero = 1;  // ZeRO-1 keeps 2 + 2 bytes whole: e = 4 holds 4·(3/4)X fewer
  EXPECT_EQ(plan_memory(a).model_state.total() - plan_memory(b).model_state.total(), 4 * 2 * 3 * kExpert);
}

TEST(PlanMoE, FirstStageActivationsUseTheMoERowForMoELayers) {
  const PlanRequest r = small_moe(2);
  const MemoryPlan m = plan_memory(r);
  // 64 tokens, C = 16 per expert, E·C = 64: A = R = 64 rows.
  EXPECT_EQ(moe_kept_shape(r).assignments, 64);
  EXPECT_EQ(moe_kept_shape(r).received, 64);
  EXPECT_GT(m.moe_layer_activation_bytes, 0);
  EXPECT_NE(m.moe_layer_activation_bytes, m.activation_bytes_per_layer);
  EXPECT_DOUBLE_EQ(m.first_stage_layer_bytes,
                   2.0 * double(m.moe_layer_activation_bytes) + 2.0 * double(m.activation_bytes_per_layer));
  // Unbalanced, one rank's two experts can take C = 16 from each of the 2 ranks for each: 64 rows.
  EXPECT_EQ(m.moe_received_rows_max, 64);
  PlanRequest nodrop = r;
  nodrop.model.moe.capacity_factor = 0;  // then both ranks' 64 rows
  EXPECT_EQ(plan_memory(nodrop).moe_received_rows_max, 128);
  EXPECT_GT(plan_memory(nodrop).moe_layer_activation_bytes_max, plan_memory(nodrop).moe_layer_activation_bytes);
}

// α–β: with t = 1 the e = 2 ranks of an EP group are neighbours in one node: one all-to-all is one
// message of (e−1)/e·A·h·4 = 64/2·64·4 = 8192 bytes to the other rank; four a layer (dispatch and
// combine, forward and backward), two MoE layers, one micro-batch.
TEST(PlanMoE, AllToAllTimeIsTheAlphaBetaCostOfTheRowsSent) {
  Hardware hw = hardware_preset("A100-80GB");
  hw.intra = {1e-5, 1e-9};
  const TimePlan one = plan_time(small_moe(1), hw), two = plan_time(small_moe(2), hw);
  EXPECT_EQ(one.ep_comm_s, 0.0);
  EXPECT_NEAR(two.ep_comm_s, 2 * 4 * (1e-5 + 8192 * 1e-9), 1e-15);
  // The parts still add up to the iteration.
  EXPECT_NEAR(two.iteration_s, two.gemm_s + two.elementwise_s + two.recompute_s + two.tp_comm_s + two.ep_comm_s +
                                   two.pp_comm_s + two.bubble_s + two.dp_comm_s + two.optimizer_s, 1e-12);
  // Expert gradients reduce over N_d/e ranks: none when e = N_d.
  EXPECT_GT(two.expert_dp_comm_s, 0.0);
  EXPECT_EQ(plan_time(small_moe(4), hw).expert_dp_comm_s, 0.0);
  // Full recompute runs the forward again, its two all-to-alls a layer included: the only part of the
  // recomputation e changes (the experts receive A rows either way).
  PlanRequest full1 = small_moe(1), full2 = small_moe(2);
  full1.layout.recompute = full2.layout.recompute = Recompute::full;
  EXPECT_NEAR(plan_time(full2, hw).recompute_s - plan_time(full1, hw).recompute_s, 2 * 2 * (1e-5 + 8192 * 1e-9),
              1e-15);
}

TEST(PlanMoE, FlopsCountActiveParameters) {
  PlanRequest r = small_moe(2);
  const FlopsPlan moe = plan_flops(r);
  // 16 times the experts: a token's expert work is the same, only its router GEMM grows, by
  // 2·h·(64 − 4) FLOPs in each of the 2 MoE layers, for 8·32 tokens, forward and backward (3×).
  r.model.moe.experts = 64;
  EXPECT_DOUBLE_EQ(plan_flops(r).model_flops - moe.model_flops, 3.0 * 8 * 32 * 2 * 2 * 64 * 60);
  r.model.moe.topk = 2;      // twice the experts a token: more
  EXPECT_GT(plan_flops(r).model_flops, moe.model_flops);
}

// 8 GPUs, 4 layers of 64 experts of f = 8192 at h = 1024 (4.3e9 expert parameters): the search
// tries every e dividing N_d, and gathering the experts each micro-batch (ZeRO-3 with small e) or
// holding them all loses to splitting them.
TEST(PlanMoE, SearchTriesExpertParallelSizes) {
  PlanRequest base;
  base.model.layers = 4;
  base.model.hidden = 1024;
  base.model.heads = 16;
  base.model.seq_len = 1024;
  base.model.vocab = 32000;
  base.model.moe.experts = 64;
  base.model.moe.ffn_hidden = 8192;
  base.model.moe.router = MoERouter::switch_;
  base.gpus = 8;
  base.global_batch = 8;
  base.gpu_memory = int64_t(40) * 1000 * 1000 * 1000;
  base.layout.activation_dtype = DType::bf16;
  base.layout.params_dtype = ParamsDType::bf16;
  const SearchResult r = search_layouts(base, hardware_preset("A100-80GB"), 500);
  ASSERT_FALSE(r.best.empty());
  bool saw_ep = false;
  for (const Plan& p : r.best) {
    const LayoutConfig& l = p.request.layout;
    EXPECT_EQ(layout_problem(p.request), "");
    EXPECT_EQ(64 % l.ep, 0);
    EXPECT_EQ(l.dp * l.cp % l.ep, 0);  // EP folds over DP × CP
    saw_ep = saw_ep || l.ep > 1;
  }
  EXPECT_TRUE(saw_ep);
  EXPECT_GT(r.best[0].request.layout.ep, 1);
}

// Published MoE configurations: the stand-in's count within the stated bound of the paper's.
TEST(PlanMoE, PublishedConfigurationsWithinTheirBounds) {
  ASSERT_EQ(moe_paper_models().size(), 2u);
  for (size_t i = 0; i < moe_paper_models().size(); ++i) {
    const MoEPaperRow r = moe_paper_row(i);
    SCOPED_TRACE(r.model);
    EXPECT_LE(std::fabs(r.relative_difference), r.bound);
    EXPECT_NO_THROW(moe_paper_models()[i].model.validate());
  }
  const MoEPaperRow sw = moe_paper_row(0), gs = moe_paper_row(1);
  EXPECT_EQ(sw.bound, 0.01);
  EXPECT_EQ(gs.bound, 0.05);
  EXPECT_EQ(sw.moe_layers, 12);       // 6 encoder + 6 decoder FFNs
  EXPECT_EQ(gs.experts_total, 36864);  // GShard's Table 1: experts over all MoE layers
  // Switch-Base counted exactly as the encoder–decoder T5 it is (no biases, RMSNorm scales, tied
  // embedding, relative position biases): 32128·768 shared embedding; encoder layer 4h² + 2hf + 2h,
  // decoder layer 8h² + 2hf + 3h; 2 final norms; 2·32·12 relative biases; then 12 FFNs replaced by
  // 128 experts (2hf each) and a router (h·128): 7,415,217,408. The stand-in is within 0.5% of it.
  const double h = 768, f = 3072;
  const double t5 = 32128 * h + 12 * (4 * h * h + 2 * h * f + 2 * h) + 12 * (8 * h * h + 2 * h * f + 3 * h) + 2 * h +
                    2 * 32 * 12;
  const double exact = t5 + 12 * (128 * 2 * h * f + h * 128 - 2 * h * f);
  EXPECT_DOUBLE_EQ(exact, 7415217408.0);
  EXPECT_LE(std::fabs(sw.computed / exact - 1), 0.005);
}
