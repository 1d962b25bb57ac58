// Layout constraints, unit parsing and the memory plan's agreement with the formulas.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "plan/memory_model.hpp"
#include "plan/paper_models.hpp"
#include "plan/units.hpp"

using namespace lattice;
using namespace lattice::plan;

namespace {
PlanRequest small() {
  PlanRequest r;
  r.model.layers = 8;
  r.model.hidden = 256;
  r.model.heads = 8;
  r.model.seq_len = 128;
  r.layout.tp = 2;
  r.layout.pp = 2;
  r.layout.dp = 2;
  r.gpus = 8;
  r.micro_batch = 2;
  r.global_batch = 16;
  r.gpu_memory = int64_t(80) * 1000 * 1000 * 1000;
  return r;
}
}  // namespace

TEST(PlanLayout, AcceptsAConsistentLayout) { EXPECT_EQ(layout_problem(small()), ""); }

TEST(PlanLayout, NamesTheBrokenConstraint) {
  PlanRequest r = small();
  r.gpus = 16;
  EXPECT_NE(layout_problem(r).find("--gpus"), std::string::npos);
  r = small();
  r.model.heads = 5;
  r.model.hidden = 260;
  EXPECT_NE(layout_problem(r).find("--heads"), std::string::npos);
  r = small();
  r.layout.virtual_stages = 3;
  EXPECT_NE(layout_problem(r).find("--layers"), std::string::npos);
  r = small();
  r.global_batch = 10;
  EXPECT_NE(layout_problem(r).find("--global-batch"), std::string::npos);
  r = small();
  r.layout.virtual_stages = 2;
  r.global_batch = 12;  // 3 micro-batches per rank, not a multiple of p = 2
  r.micro_batch = 2;
  EXPECT_NE(layout_problem(r).find("multiple of p"), std::string::npos);
  r = small();
  r.layout.recompute_layers = 2;
  EXPECT_NE(layout_problem(r).find("--recompute"), std::string::npos);
  EXPECT_THROW(check_layout(r), InputError);
}

TEST(PlanLayout, ParsesMemorySizesAndRates) {
  EXPECT_EQ(parse_bytes("80GB", "--gpu-memory"), int64_t(80) * 1000 * 1000 * 1000);
  EXPECT_EQ(parse_bytes("80GiB", "--gpu-memory"), int64_t(80) << 30);
  EXPECT_EQ(parse_bytes("512 mib", "--gpu-memory"), int64_t(512) << 20);
  EXPECT_EQ(parse_bytes("1000", "--gpu-memory"), 1000);
  // The bound a message names is a unit it takes: "at most 1 EiB".
  EXPECT_EQ(parse_bytes("1EiB", "--memory-budget"), int64_t(1) << 60);
  EXPECT_EQ(parse_bytes("2PB", "--memory-budget"), int64_t(2) * 1000 * 1000 * 1000 * 1000 * 1000);
  EXPECT_THROW(parse_bytes("2EiB", "--memory-budget"), InputError);
  EXPECT_THROW(parse_bytes("80XB", "--gpu-memory"), InputError);
  EXPECT_THROW(parse_bytes("-3GB", "--gpu-memory"), InputError);
  EXPECT_THROW(parse_bytes("GB", "--gpu-memory"), InputError);
  EXPECT_DOUBLE_EQ(parse_rate("312T", "--peak-flops"), 312e12);
  EXPECT_DOUBLE_EQ(parse_rate("3.12e14", "--peak-flops"), 3.12e14);
  EXPECT_THROW(parse_rate("312Q", "--peak-flops"), InputError);
}

// The memory plan is the formulas, nothing else.
TEST(PlanLayout, MemoryPlanIsTheFormulaModule) {
  for (const auto& m : paper_models()) {
    const PlanRequest r = paper_request(m, Recompute::selective, true);
    const MemoryPlan p = plan_memory(r);
    const analysis::ActivationShape x = activation_shape(r);
    EXPECT_EQ(p.activation_bytes_per_layer, analysis::layer_activation_bytes(x, false, true));
    EXPECT_DOUBLE_EQ(p.first_stage_layer_bytes, analysis::first_stage_layer_bytes(x, r.layout, m.layers));
    EXPECT_EQ(p.extra_activation_bytes, analysis::extra_activation_bytes(x, m.pp, m.pp));
    EXPECT_EQ(p.shard_parameters, analysis::shard_parameters(r.model, 8, m.pp));
    EXPECT_EQ(p.model_state.total(), 16 * p.shard_parameters);
    EXPECT_TRUE(p.fits()) << m.name;  // the paper trains all four this way on 80 GB
  }
}

TEST(PlanLayout, FullRecomputeOfSomeLayersSitsBetweenNoneAndAll) {
  PlanRequest r = paper_request(paper_models()[0], Recompute::full, false);
  const double all = plan_memory(r).first_stage_layer_bytes;
  r.layout.recompute_layers = 24;
  const double half = plan_memory(r).first_stage_layer_bytes;
  r.layout.recompute = Recompute::none;
  r.layout.recompute_layers = -1;
  const double none = plan_memory(r).first_stage_layer_bytes;
  EXPECT_LT(all, half);
  EXPECT_LT(half, none);
  EXPECT_DOUBLE_EQ(half, (all + none) / 2);
}
