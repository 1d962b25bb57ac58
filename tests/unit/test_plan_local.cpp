// --hardware local (plan/local_hardware.hpp): the GEMM list is the engine's FLOPs, ranks share the
// cores as processor sharing says, and measured MPI times replace the α–β model where they exist.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "analysis/formulas.hpp"
#include "plan/collectives.hpp"
#include "plan/comm_table.hpp"
#include "plan/gemm_shapes.hpp"
#include "plan/hardware.hpp"
#include "plan/local_hardware.hpp"
#include "plan/measure.hpp"
#include "plan/memory_model.hpp"
#include "plan/plan_request.hpp"
#include "plan/time_model.hpp"
#include "test_util.hpp"

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

// The engine reduces a bucket at a time (each layer, then the embeddings and the final LayerNorm), so
// the planner costs each bucket's message from the table, not one message of the whole gradient: with
// a table that is not linear in the size (OpenMPI's all-reduce of 2 ranks on the AMD EPYC fell from 4
// to 0.4 GB/s past 24 MiB) the two differ, and only the first is what the engine's step sends.
TEST(PlanLocal, DataParallelCollectivesGoABucketAtATime) {
  CommTable table;
  for (MeasuredOp op : {MeasuredOp::all_reduce, MeasuredOp::reduce_scatter, MeasuredOp::all_gather})
    table.add({op, 2, 1, false, {{1e3, 1e-5}, {1e5, 2e-5}, {1e7, 1e-1}}});  // a cliff past 100 KB
  Hardware hw = hardware_preset("cpu");
  hw.local.cores = 2, hw.local.ranks = 2, hw.local.threads = 1;
  hw.local.elementwise_bandwidth = 1e10;
  hw.local.gemm = std::make_shared<GemmTimer>(1);
  hw.local.comm = std::make_shared<CommTable>(table);
  PlanRequest r;
  r.model.layers = 3, r.model.hidden = 64, r.model.heads = 4, r.model.seq_len = 32, r.model.vocab = 256;
  r.model.dropout = 0;
  r.layout.dp = 2, r.micro_batch = 2, r.global_batch = 8, r.gpus = 2;
  const double layer = 4.0 * double(lattice::analysis::layer_shard_parameters(r.model, 1));  // fp32 bytes
  const double whole = 4.0 * double(plan_memory(r).dense_parameters);
  const double rest = whole - 3 * layer;
  ASSERT_GT(rest, 0);
  auto cost = [&](MeasuredOp op, double bytes) { return table.seconds(op, 2, 1, bytes, false); };
  for (int zero : {0, 1, 2, 3}) {
    r.layout.zero = zero;
    const double n_mb = r.micro_batches();
    auto bucketed = [&](MeasuredOp op) { return 3 * cost(op, layer) + cost(op, rest); };
    const double rs = bucketed(MeasuredOp::reduce_scatter), ag = bucketed(MeasuredOp::all_gather);
    const double expected = zero == 0   ? bucketed(MeasuredOp::all_reduce)
                            : zero == 1 ? rs + ag
                            : zero == 2 ? n_mb * rs + ag
                                        : n_mb * (rs + 2 * ag);
    const TimePlan t = plan_time(r, hw);
    EXPECT_NEAR(t.dp_comm_s, expected, 1e-12 * expected) << "ZeRO-" << zero;
    if (zero == 0) {  // the whole gradient as one message would have cost something else
      EXPECT_GT(std::abs(t.dp_comm_s - cost(MeasuredOp::all_reduce, whole)), 0.1 * expected);
    }
  }
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
namespace {
// A 4-layer model on PP 2 × DP dp whose last stage holds 3 layers and the output layer.
PlanRequest uneven_pipeline(int dp) {
  PlanRequest r;
  r.model.layers = 4, r.model.hidden = 64, r.model.heads = 4, r.model.seq_len = 32, r.model.vocab = 256;
  r.model.dropout = 0;
  r.layout.pp = 2, r.layout.dp = dp, r.layout.stage_layers = {1, 3};
  r.micro_batch = 2, r.global_batch = 16, r.gpus = 2 * dp;
  return r;
}
}  // namespace

TEST(PlanLocal, IdleStagesGiveTheirCoresToTheSlowest) {
  const PlanRequest r = uneven_pipeline(2);
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

// The same uneven pipeline on eight cores (no sharing): the bubble is the ramp, the first stage's work
// on one micro-batch (its forward of the first, its backward of the last) plus the p2p message,
// not a slot of the slowest stage's (analysis::pipeline_ramp_seconds).
TEST(PlanLocal, UnevenStagesBubbleIsTheOtherStagesWork) {
  const PlanRequest r = uneven_pipeline(1);
  Hardware hw = hardware_preset("cpu");
  hw.local.cores = 8, hw.local.ranks = 2, hw.local.threads = 1;
  hw.local.elementwise_bandwidth = 1e10;
  hw.local.gemm = std::make_shared<GemmTimer>(1);
  const StageSeconds per_layer = stage_seconds(r, hw);
  const double first = per_layer.layer[0];
  const double last = per_layer.layer[1] + per_layer.layer[2] + per_layer.layer[3] + per_layer.head;
  ASSERT_GT(last, 2 * first);
  const TimePlan t = plan_time(r, hw);
  const double p2p = t.pp_comm_s / r.micro_batches();
  EXPECT_NEAR(t.bubble_s, first + p2p, 1e-9 * last);
}

namespace {
// A schema-2 bench of `ranks` one-thread ranks on this host whose element-wise kernels all ran at `rate`.
void write_bench(int ranks, int cores, double rate) {
  std::string text = R"({"event":"bench","schema":2,"threads":1,"gemm_fp32_flops":1e11,"gemm_bf16_flops":2e11,)"
                     R"("memory_bandwidth":1e10,"host":"h","cores":)" + std::to_string(cores) +
                     R"(,"ranks":)" + std::to_string(ranks) + R"(,"threads_per_rank":1,"elementwise":{"layernorm_fwd":)" +
                     std::to_string(rate) + R"(,"adamw":)" + std::to_string(rate) + "}";
  if (ranks > 1)
    text += R"(,"mpi":{"ranks":)" + std::to_string(ranks) +
            R"(,"groups":[{"size":2,"stride":1,"ops":{"all_reduce":{"blocking":[[8,1e-6],[64,2e-6]]}}}]})";
  std::ofstream(bench_result_path(ranks)) << text << "}\n";
}
}  // namespace

// Kernel rates timed while more ranks than cores take turns on them are the scheduler's slices: an
// oversubscribed layout takes them from the bench of as many ranks as the cores hold, slowed by the
// share; a layout that fits takes its own bench's, the sharing already in them.
TEST(PlanLocal, OversubscribedRanksTakeTheFullCoresBenchsRates) {
  const std::string dir = testing_util::scratch_dir("plan_local_rates");
  const char* saved = std::getenv("LATTICE_BENCH_DIR");
  const std::string keep = saved ? saved : "";
  ::setenv("LATTICE_BENCH_DIR", dir.c_str(), 1);
  const int cores = omp_get_num_procs();
  if (cores >= 2) {
    write_bench(cores, cores, 3e10);
    write_bench(2 * cores, cores, 1e9);
    const Hardware fits = local_hardware(cores, 1, false);
    EXPECT_EQ(fits.local.kernel_rates.at("layernorm_fwd"), 3e10);
    EXPECT_TRUE(fits.local.rates_shared);
    const Hardware over = local_hardware(2 * cores, 1, false);
    EXPECT_EQ(over.local.kernel_rates.at("layernorm_fwd"), 3e10);
    EXPECT_FALSE(over.local.rates_shared);  // slowed by share(2·cores) = 1/2 in the time model
    EXPECT_NE(over.local.comm, nullptr);    // communication still from its own bench
  }
  if (saved) ::setenv("LATTICE_BENCH_DIR", keep.c_str(), 1);
  else ::unsetenv("LATTICE_BENCH_DIR");
}

// An MoE block's calls (plan/gemm_shapes.hpp, moe_block_gemms) are the FLOPs the formula counts: the
// router's 2·N·h·E a pass (twice for noisy top-k) and the experts' 4·R·h·f/t forward, backward twice,
// whatever the power-of-two chunks the rows are cut into.
TEST(PlanLocal, TheMoEBlocksGemmsAreItsFlops) {
  for (bool noisy : {false, true})
    for (int64_t received : {1024, 1000, 7})
      for (int local : {1, 2, 3}) {
        analysis::MoEKeptShape m;
        m.s = 128, m.b = 4, m.h = 64, m.t = 2, m.experts = 6, m.ffn_hidden = 256, m.noisy_router = noisy;
        m.received = received;
        const double N = 512, routers = noisy ? 2 : 1;
        const double forward = routers * 2 * N * 64 * 6 + 4.0 * double(received) * 64 * 128;
        const std::vector<GemmCall> calls = moe_block_gemms(m, local);
        EXPECT_DOUBLE_EQ(flops(calls, true), forward) << received << " " << local;
        EXPECT_DOUBLE_EQ(flops(calls, false), 2 * forward) << received << " " << local;
        for (const GemmCall& c : calls) {
          if (c.shape.N == 6 || c.shape.K == 6) continue;  // the router's
          const int64_t rows = c.pass == GemmPass::backward_weight ? c.shape.K : c.shape.M;
          EXPECT_EQ(rows & (rows - 1), 0) << "expert rows go in power-of-two chunks: " << rows;
        }
      }
}
