// The time model against the paper: Table 5 within 15%, the speed-up of SP + selective over
// full recompute within 5 points, and the structure of the breakdown.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/evaluate.hpp"
#include "plan/paper_models.hpp"
#include "plan/paper_report.hpp"

using namespace lattice;
using namespace lattice::plan;

TEST(PlanTime, PredictsTable5WithinFifteenPercent) {
  const Hardware& hw = hardware_preset("A100-80GB");
  for (size_t i = 0; i < paper_models().size(); ++i) {
    const Table5Row r = table5_row(i, hw);
    EXPECT_NEAR(r.predicted_full_s / r.paper_full_s, 1.0, 0.15) << r.model;
    EXPECT_NEAR(r.predicted_this_s / r.paper_this_s, 1.0, 0.15) << r.model;
    EXPECT_NEAR(100 * r.predicted_speedup, 100 * r.paper_speedup, 5.0) << r.model;
  }
}

TEST(PlanTime, BreakdownAddsUpAndBubbleFollowsTheSchedule) {
  const Hardware& hw = hardware_preset("A100-80GB");
  const PaperModel& m = paper_models()[1];  // 175B: p = 8, m = 3, 64 micro-batches
  const TimePlan t = plan_time(paper_request(m, Recompute::selective, true), hw);
  EXPECT_NEAR(t.gemm_s + t.elementwise_s + t.recompute_s + t.tp_comm_s + t.pp_comm_s + t.bubble_s +
                  t.dp_comm_s + t.optimizer_s,
              t.iteration_s, 1e-9 * t.iteration_s);
  const double slots = 7.0 / 3;
  EXPECT_DOUBLE_EQ(t.bubble_fraction, slots / (64 + slots));
  EXPECT_GT(t.tp_comm_s, 0);
  EXPECT_GT(t.pp_comm_s, 0);
}

TEST(PlanTime, RecomputationCostsOrderAsInTable4) {
  const Hardware& hw = hardware_preset("A100-80GB");
  const PaperModel& m = paper_models()[0];
  const double none = layer_time(paper_request(m, Recompute::none, false), hw).backward_s;
  const double sel = layer_time(paper_request(m, Recompute::selective, false), hw).backward_s;
  const double full = layer_time(paper_request(m, Recompute::full, false), hw).backward_s;
  EXPECT_LT(none, sel);
  EXPECT_LT(sel, full);
  EXPECT_LT(sel / none - 1, 0.15);  // paper: +7%
  EXPECT_GT(full / none - 1, 0.3);  // paper: +39% on the whole layer
  for (const auto& row : paper_table4()) {
    const LayerTime lt = layer_time(paper_request(m, row.recompute, row.sequence_parallel), hw);
    EXPECT_NEAR(lt.forward_s * 1e3 / row.forward_ms, 1.0, 0.1) << row.name;
    EXPECT_NEAR(lt.backward_s * 1e3 / row.backward_ms, 1.0, 0.1) << row.name;
  }
}

TEST(PlanTime, DataParallelTrafficGrowsWithZeroThree) {
  const Hardware& hw = hardware_preset("A100-80GB");
  PlanRequest r = paper_request(paper_models()[0], Recompute::selective, true);
  r.gpus = 64;
  r.layout.dp = 8;
  r.global_batch = 32;
  const double plain = plan_time(r, hw).dp_comm_s;
  r.layout.zero = 1;
  EXPECT_NEAR(plan_time(r, hw).dp_comm_s, plain, 0.5 * plain);  // same 2Ψ volume
  r.layout.zero = 3;
  EXPECT_GT(plan_time(r, hw).dp_comm_s, plain);
}

TEST(PlanTime, CpuPresetIsSlowerThanGpus) {
  PlanRequest r;
  r.model.layers = 4;
  r.model.hidden = 256;
  r.model.heads = 4;
  r.model.seq_len = 128;
  r.micro_batch = 4;
  r.global_batch = 8;
  r.layout.activation_dtype = DType::fp32;
  r.gpu_memory = int64_t(1) << 34;
  const double cpu = plan_time(r, hardware_preset("cpu")).iteration_s;
  const double a100 = plan_time(r, hardware_preset("a100-80gb")).iteration_s;
  EXPECT_GT(cpu, 50 * a100);
  EXPECT_GT(cpu, 0.01);
  EXPECT_LT(cpu, 100.0);
}
