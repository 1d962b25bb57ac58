// --hardware local (plan/local_hardware.hpp): the GEMM list is the engine's FLOPs, ranks share the
// cores as processor sharing says, and measured MPI times replace the α–β model where they exist.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "plan/collectives.hpp"
#include "plan/comm_table.hpp"
#include "plan/gemm_shapes.hpp"
#include "plan/hardware.hpp"
#include "plan/plan_request.hpp"
#include "plan/time_model.hpp"

using namespace lattice;
using namespace lattice::plan;

namespace {
analysis::ActivationShape shape(int64_t t, bool sp) {
  analysis::ActivationShape x;
  x.s = 256, x.b = 4, x.h = 768, x.a = 12, x.v = 8192, x.t = t, x.sp = sp, x.d = 4;
  return x;
}
double flops(const std::vector<GemmCall>& calls, bool forward) {
  double f = 0;
  for (const GemmCall& c : calls) f += (c.pass == GemmPass::forward) == forward ? gemm_flops(c.shape) : 0;
  return f;
}
}  // namespace

TEST(PlanLocal, TheLayersGemmsAreTheFormulasFlops) {
  for (int64_t t : {1, 2, 4})
    for (bool sp : {false, true}) {
      const analysis::ActivationShape x = shape(t, sp && t > 1);
      const double b = double(x.b), s = double(x.s), h = double(x.h);
      const double forward = (24 * b * s * h * h + 4 * b * s * s * h) / double(t);
      EXPECT_DOUBLE_EQ(flops(layer_gemms(x), true), forward) << t;
      EXPECT_DOUBLE_EQ(flops(layer_gemms(x), false), 2 * forward) << t;
      EXPECT_DOUBLE_EQ(flops(head_gemms(x), true) + flops(head_gemms(x), false), 6 * b * s * h * double(x.v) / double(t));
      double attention = 0;
      for (const GemmCall& c : layer_gemms(x)) attention += c.attention && c.pass == GemmPass::forward ? gemm_flops(c.shape) : 0;
      EXPECT_DOUBLE_EQ(attention, 4 * b * s * s * h / double(t));  // what selective recompute re-runs
    }
}

TEST(PlanLocal, RanksShareTheCores) {
  LocalHost l;
  l.cores = 2, l.ranks = 4, l.threads = 1;
  EXPECT_DOUBLE_EQ(l.share(4), 0.5);  // 4 one-thread ranks on 2 cores: half a core each
  EXPECT_DOUBLE_EQ(l.share(2), 1.0);
  EXPECT_DOUBLE_EQ(l.share(1), 1.0);  // a rank never runs faster than its threads
  l.ranks = 1, l.threads = 2;
  EXPECT_DOUBLE_EQ(l.share(1), 1.0);
  l.ranks = 2;
  EXPECT_DOUBLE_EQ(l.share(2), 0.5);  // two 2-thread ranks on 2 cores
  EXPECT_FALSE(LocalHost{}.active());
  EXPECT_DOUBLE_EQ(LocalHost{}.share(8), 1.0);
}

TEST(PlanLocal, MeasuredCollectivesReplaceTheModelWhereTheyExist) {
  CommTable table;
  table.add({MeasuredOp::all_reduce, 2, 1, false, {{1e3, 1e-5}, {1e6, 1e-3}}});
  table.add({MeasuredOp::p2p, 2, 1, false, {{1e3, 2e-6}, {1e6, 4e-4}}});
  Hardware hw = hardware_preset("cpu");
  hw.local.cores = 2, hw.local.ranks = 2;
  hw.local.comm = std::make_shared<CommTable>(table);
  const GroupTopology g = group_topology(hw, 2, 1);
  const CollectiveCost ar = all_reduce(g, 1e6);
  EXPECT_EQ(ar.algorithm, Algorithm::measured);
  EXPECT_DOUBLE_EQ(ar.seconds, 1e-3);
  EXPECT_DOUBLE_EQ(point_to_point(g, 1e3).seconds, 2e-6);
  // Not measured: reduce-scatter falls back to the α–β model, as does a 4-rank group.
  EXPECT_NE(reduce_scatter(g, 1e6).algorithm, Algorithm::measured);
  EXPECT_NE(all_reduce(group_topology(hw, 4, 1), 1e6).algorithm, Algorithm::measured);
  // The presets never see a table.
  EXPECT_NE(all_reduce(group_topology(hardware_preset("cpu"), 2, 1), 1e6).algorithm, Algorithm::measured);
}

TEST(PlanLocal, TheGemmTimerMeasuresEachShapeOnce) {
  GemmTimer timer(1);
  GemmShape s;
  s.M = 64, s.N = 64, s.K = 64;
  const double first = timer.seconds(s, false);
  EXPECT_GT(first, 0);
  EXPECT_EQ(timer.seconds(s, false), first);
  EXPECT_EQ(timer.shapes_measured(), 1u);
  EXPECT_GT(timer.seconds(s, true), 0);
  EXPECT_EQ(timer.shapes_measured(), 2u);
}

// Four one-thread ranks (PP 2 × DP 2) on two cores, the last stage carrying more layers: the ranks of
// the faster stage sleep while they wait and give their cores to the slower one, so a micro-batch's
// compute takes the larger of the stages' mean at the all-busy share and the slowest stage alone on
// its ranks' cores (plan/time_model.cpp, shared_compute_factor); on eight cores it is the slowest.
TEST(PlanLocal, IdleStagesGiveTheirCoresToTheSlowest) {
  PlanRequest r;
  r.model.layers = 4, r.model.hidden = 64, r.model.heads = 4, r.model.seq_len = 32, r.model.vocab = 256;
  r.model.dropout = 0;
  r.layout.pp = 2, r.layout.dp = 2, r.layout.stage_layers = {1, 3};
  r.micro_batch = 2, r.global_batch = 16, r.gpus = 4;
  for (int cores : {2, 8}) {
    Hardware hw = hardware_preset("cpu");
    hw.local.cores = cores, hw.local.ranks = 4, hw.local.threads = 1;
    hw.local.elementwise_bandwidth = 1e10;
    hw.local.gemm = std::make_shared<GemmTimer>(1);
    const StageSeconds per_layer = stage_seconds(r, hw);  // no TP: compute only, at the all-busy share
    const double first = per_layer.layer[0];
    const double last = per_layer.layer[1] + per_layer.layer[2] + per_layer.layer[3] + per_layer.head;
    const TimePlan t = plan_time(r, hw);
    const double n_mb = r.micro_batches();
    const double expected = cores == 2 ? std::max((first + last) / 2, last * 0.5) : last;
    EXPECT_NEAR((t.gemm_s + t.elementwise_s + t.recompute_s) / n_mb, expected, 1e-9 * expected) << cores;
    EXPECT_LT(expected, last + 1e-12);
  }
}
