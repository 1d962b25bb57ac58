// The measured collective table (plan/comm_table.hpp) and the schema-2 bench file it is read from
// (plan/measure.hpp, read_local_bench).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "plan/comm_table.hpp"
#include "plan/measure.hpp"
#include "test_util.hpp"

using namespace lattice::plan;
using lattice::testing_util::expect_input_error;
using lattice::testing_util::scratch_dir;

namespace {

// 10 µs at 1 kB, 100 µs at 1 MB, 1 ms at 10 MB (10 GB/s past 1 MB).
CommCurve all_reduce_curve(int size = 2, int stride = 1, bool async = false, double scale = 1) {
  return {MeasuredOp::all_reduce, size, stride, async, {{1e3, 1e-5 * scale}, {1e6, 1e-4 * scale}, {1e7, 1e-3 * scale}}};
}

}  // namespace

TEST(CommTable, ExactAtTheSamples) {
  CommTable t;
  EXPECT_TRUE(t.empty());
  t.add(all_reduce_curve());
  EXPECT_FALSE(t.empty());
  EXPECT_TRUE(t.has(MeasuredOp::all_reduce, 2));
  EXPECT_FALSE(t.has(MeasuredOp::all_reduce, 4));
  EXPECT_FALSE(t.has(MeasuredOp::p2p, 2));
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e3), 1e-5);
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e6), 1e-4);
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e7), 1e-3);
}

TEST(CommTable, LogLogBetweenSamples) {
  CommTable t;
  t.add(all_reduce_curve());
  // Halfway in log bytes between 1 kB and 1 MB is √(1e3·1e6) bytes: halfway in log time, √(1e-5·1e-4).
  const double mid = std::sqrt(1e3 * 1e6);
  EXPECT_NEAR(t.seconds(MeasuredOp::all_reduce, 2, 1, mid), std::sqrt(1e-5 * 1e-4), 1e-15);
  // A third of the way in log from 1 MB to 10 MB: the time's log a third of the way too.
  const double x = 1e6 * std::pow(10.0, 1.0 / 3);
  EXPECT_NEAR(t.seconds(MeasuredOp::all_reduce, 2, 1, x), 1e-4 * std::pow(10.0, 1.0 / 3), 1e-15);
  // Monotone between the samples of a monotone curve.
  double last = 0;
  for (double b = 1e3; b <= 1e7; b *= 1.7) {
    const double s = t.seconds(MeasuredOp::all_reduce, 2, 1, b);
    EXPECT_GE(s, last);
    last = s;
  }
}

TEST(CommTable, BelowAndAboveTheTable) {
  CommTable t;
  t.add(all_reduce_curve());
  // Below the smallest size: the smallest time (latency does not shrink).
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 8), 1e-5);
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e-3), 1e-5);
  // Above the largest: the last segment's bandwidth, (1e7 - 1e6) bytes per 0.9 ms.
  const double bw = (1e7 - 1e6) / (1e-3 - 1e-4);
  EXPECT_NEAR(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e8), 1e-3 + (1e8 - 1e7) / bw, 1e-12);
  // A last segment that got no slower (noise): the largest sample's own bandwidth.
  CommTable flat;
  flat.add({MeasuredOp::p2p, 2, 1, false, {{1e6, 2e-4}, {2e6, 1e-4}}});
  EXPECT_NEAR(flat.seconds(MeasuredOp::p2p, 2, 1, 4e6), 2e-4, 1e-15);
  // One sample: its bandwidth above, its time below.
  CommTable one;
  one.add({MeasuredOp::all_gather, 4, 1, false, {{1e6, 1e-3}}});
  EXPECT_NEAR(one.seconds(MeasuredOp::all_gather, 4, 1, 3e6), 3e-3, 1e-15);
  EXPECT_EQ(one.seconds(MeasuredOp::all_gather, 4, 1, 10), 1e-3);
}

TEST(CommTable, ZeroBytesOrOneRankCostNothingUnmeasuredIsNaN) {
  CommTable t;
  t.add(all_reduce_curve());
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 0), 0);
  EXPECT_EQ(t.seconds(MeasuredOp::all_reduce, 1, 1, 1e6), 0);
  EXPECT_EQ(t.seconds(MeasuredOp::p2p, 1, 1, 1e6), 0);  // one rank, even unmeasured
  EXPECT_TRUE(std::isnan(t.seconds(MeasuredOp::all_reduce, 4, 1, 1e6)));
  EXPECT_TRUE(std::isnan(t.seconds(MeasuredOp::reduce_scatter, 2, 1, 1e6)));
  EXPECT_TRUE(std::isnan(t.seconds(MeasuredOp::all_reduce, 2, 1, -5)));
  EXPECT_TRUE(std::isnan(t.seconds(MeasuredOp::all_reduce, 2, 1, std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(CommTable().seconds(MeasuredOp::all_reduce, 2, 1, 1e6)));
}

TEST(CommTable, NearestStrideWhenTheStrideWasNotMeasured) {
  CommTable t;
  t.add(all_reduce_curve(2, 1, false, 1));
  t.add(all_reduce_curve(2, 4, false, 3));
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e6), 1e-4);
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 4, 1e6), 3e-4);
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 8, 1e6), 3e-4);  // nearest: 4
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 16, 1e6), 3e-4);
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 0, 1e6), 1e-4);  // taken as 1
  // 2 is as far from 1 as from 4 (in ratio): the tie takes the larger stride.
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 2, 1e6), 3e-4);
}

TEST(CommTable, AsyncFallsBackToBlocking) {
  CommTable t;
  t.add(all_reduce_curve(2, 1, false, 1));
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e6, true), 1e-4);  // no async curve: the blocking one
  t.add(all_reduce_curve(2, 1, true, 2));
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e6, true), 2e-4);
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 1, 1e6, false), 1e-4);
  // Only the async curve: the blocking question reads it.
  CommTable a;
  a.add(all_reduce_curve(2, 1, true, 2));
  EXPECT_DOUBLE_EQ(a.seconds(MeasuredOp::all_reduce, 2, 1, 1e6), 2e-4);
  // The measured stride wins over the asked form: the blocking curve of stride 4 over the async of 1.
  t.add(all_reduce_curve(2, 4, false, 5));
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::all_reduce, 2, 4, 1e6, true), 5e-4);
}

TEST(CommTable, BadAndUnsortedInputIsCleanedOrDropped) {
  CommTable t;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Unsorted, with a repeated size (averaged) and samples that cannot be on a log-log curve.
  t.add({MeasuredOp::reduce_scatter, 2, 1, false,
         {{1e7, 1e-3}, {1e3, 1e-5}, {1e6, 1e-4}, {1e6, 3e-4}, {0, 1e-6}, {-8, 1e-6}, {1e4, 0}, {1e5, -1},
          {nan, 1}, {1e5, nan}, {inf, 1}, {1e5, inf}}});
  ASSERT_EQ(t.curves().size(), 1u);
  const auto& s = t.curves()[0].samples;
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].bytes, 1e3);
  EXPECT_EQ(s[1].bytes, 1e6);
  EXPECT_DOUBLE_EQ(s[1].seconds, 2e-4);
  EXPECT_EQ(s[2].bytes, 1e7);
  EXPECT_DOUBLE_EQ(t.seconds(MeasuredOp::reduce_scatter, 2, 1, 1e6), 2e-4);
  // Nothing usable, size < 2 or stride < 1: not kept.
  t.add({MeasuredOp::all_gather, 2, 1, false, {{0, 1}, {1e3, nan}}});
  t.add({MeasuredOp::all_gather, 1, 1, false, {{1e3, 1e-5}}});
  t.add({MeasuredOp::all_gather, 2, 0, false, {{1e3, 1e-5}}});
  t.add({MeasuredOp::all_gather, 2, 1, false, {}});
  EXPECT_EQ(t.curves().size(), 1u);
  EXPECT_FALSE(t.has(MeasuredOp::all_gather, 2));
  // The same curve again replaces the first.
  t.add({MeasuredOp::reduce_scatter, 2, 1, false, {{1e3, 7e-5}}});
  EXPECT_EQ(t.curves().size(), 1u);
  EXPECT_EQ(t.seconds(MeasuredOp::reduce_scatter, 2, 1, 1e3), 7e-5);
}

namespace {

const char* kBench = R"({"event":"bench","schema":2,"threads":1,"gemm_fp32_flops":1e11,"gemm_bf16_flops":2e11,
"memory_bandwidth":1e10,"fma_fp32_flops":4e11,"fma_clock_ghz":3.5,"runtime_rss_bytes":1000,"host":"box","cores":2,"ranks":2,"threads_per_rank":1,
"measured_at":"2026-01-01T00:00:00Z","elementwise":{"layernorm_fwd":3e10,"adamw":5e9},
"mpi":{"ranks":2,"groups":[{"size":2,"stride":1,"concurrent":1,"ops":{
 "all_reduce":{"blocking":[[8,1e-6],[64,2e-6]],"engine_async":[[8,1.5e-6],[64,2.5e-6]]},
 "p2p":{"blocking":[[8,5e-7]]},"future_op":{"blocking":[[1,1]]}}}]}})";

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

}  // namespace

TEST(LocalBench, ReadsASchema2File) {
  const std::string dir = scratch_dir("comm_table");
  const LocalBench b = read_local_bench(write(dir, "b.json", kBench));
  EXPECT_EQ(b.host, "box");
  EXPECT_EQ(b.cores, 2);
  EXPECT_EQ(b.ranks, 2);
  EXPECT_EQ(b.threads_per_rank, 1);
  EXPECT_EQ(b.measured_at, "2026-01-01T00:00:00Z");
  EXPECT_EQ(b.compute.gemm_fp32_flops, 1e11);
  EXPECT_EQ(b.compute.memory_bandwidth, 1e10);
  EXPECT_EQ(b.compute.runtime_rss_bytes, 1000);
  EXPECT_EQ(b.compute.fma_fp32_flops, 4e11);
  EXPECT_EQ(b.compute.fma_clock_ghz, 3.5);
  EXPECT_EQ(b.elementwise.at("layernorm_fwd"), 3e10);
  EXPECT_EQ(b.elementwise.at("adamw"), 5e9);
  EXPECT_EQ(b.comm.seconds(MeasuredOp::all_reduce, 2, 1, 64), 2e-6);
  EXPECT_EQ(b.comm.seconds(MeasuredOp::all_reduce, 2, 1, 64, true), 2.5e-6);
  EXPECT_EQ(b.comm.seconds(MeasuredOp::p2p, 2, 1, 8, true), 5e-7);  // blocking stands in
  EXPECT_TRUE(std::isnan(b.comm.seconds(MeasuredOp::all_to_all, 2, 1, 8)));
  // The same file through --hardware FILE: the compute rates.
  const Hardware h = hardware_from_file(dir + "/b.json");
  EXPECT_EQ(h.peak_flops_bf16, 2e11);
}

TEST(LocalBench, OneProcessHasNoCommTable) {
  const std::string dir = scratch_dir("comm_table");
  std::string text = kBench;
  text = replaced(text, "\"ranks\":2,\"threads_per_rank\"", "\"ranks\":1,\"threads_per_rank\"");
  text = text.substr(0, text.find(",\n\"mpi\"")) + "}";
  const LocalBench b = read_local_bench(write(dir, "one.json", text));
  EXPECT_EQ(b.ranks, 1);
  EXPECT_TRUE(b.comm.empty());
  // A bench saved before the FMA rate was measured reads as not measured.
  const std::string before = replaced(text, "\"fma_fp32_flops\":4e11,\"fma_clock_ghz\":3.5,", "");
  const LocalBench old = read_local_bench(write(dir, "old.json", before));
  EXPECT_EQ(old.compute.fma_fp32_flops, 0);
  EXPECT_EQ(old.compute.fma_clock_ghz, 0);
}

TEST(LocalBench, BadFilesAreOneLineNamingTheFile) {
  const std::string dir = scratch_dir("comm_table");
  expect_input_error([&] { read_local_bench(dir + "/missing.json"); }, "missing.json");
  expect_input_error([&] { read_local_bench(write(dir, "garbage.json", "{not json")); }, "garbage.json");
  // Schema 1 (what `lattice bench --json` wrote before): named as such, with what to do.
  const std::string one = write(dir, "schema1.json",
                                R"({"event":"bench","threads":2,"gemm_fp32_flops":1e11,"gemm_bf16_flops":2e11,)"
                                R"("memory_bandwidth":1e10,"runtime_rss_bytes":1})");
  expect_input_error([&] { read_local_bench(one); }, "schema-1");
  EXPECT_EQ(hardware_from_file(one).peak_flops_fp32, 1e11);  // still a --hardware FILE
  struct Case {
    const char *from, *to, *fragment;
  };
  const Case cases[] = {
      {"\"schema\":2", "\"schema\":3", "schema 3"},
      {"\"host\":\"box\"", "\"host\":\"\"", "host"},
      {"\"cores\":2", "\"cores\":0", "cores"},
      {"\"layernorm_fwd\":3e10", "\"layernorm_fwd\":-1", "layernorm_fwd"},
      {"\"gemm_fp32_flops\":1e11", "\"gemm_fp32_flops\":\"fast\"", "gemm_fp32_flops"},
      {"\"fma_fp32_flops\":4e11", "\"fma_fp32_flops\":-4e11", "fma_fp32_flops"},
      {"\"fma_fp32_flops\":4e11", "\"fma_fp32_flops\":1e300", "fma_fp32_flops"},
      {"\"fma_clock_ghz\":3.5", "\"fma_clock_ghz\":3500", "fma_clock_ghz"},
      {"[[8,1e-6],[64,2e-6]]", "[[64,2e-6],[8,1e-6]]", "ascend"},
      {"[[8,1e-6],[64,2e-6]]", "[[8,0],[64,2e-6]]", "seconds from 1e-9 to 3600"},
      {"[[8,1e-6],[64,2e-6]]", "[[8,1e-6],[64,1e300]]", "seconds from 1e-9 to 3600"},  // inf% in a plan
      {"[[8,1e-6],[64,2e-6]]", "[[8,1e-6],[1e13,2e-6]]", "bytes from 1 to 2^40"},
      {"[[8,1e-6],[64,2e-6]]", "[[8],[64,2e-6]]", "[bytes, seconds]"},
      {"\"mpi\":{\"ranks\":2", "\"mpi\":{\"ranks\":4", "differs"},
      {"\"size\":2,\"stride\":1", "\"size\":2,\"stride\":2", "does not fit"},
      {"\"size\":2,\"stride\":1", "\"size\":1,\"stride\":1", "size"},
  };
  for (const Case& c : cases) {
    const std::string path = write(dir, "bad.json", replaced(kBench, c.from, c.to));
    expect_input_error([&] { read_local_bench(path); }, c.fragment);
    expect_input_error([&] { read_local_bench(path); }, "bad.json");
    expect_input_error([&] { hardware_from_file(path); }, c.fragment);
  }
}

TEST(LocalBench, ResultPathFollowsTheEnvironment) {
  const char* saved[] = {std::getenv("LATTICE_BENCH_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string keep[] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : ""};
  const std::string host = bench_host_name();
  ::setenv("LATTICE_BENCH_DIR", "/b", 1);
  ::setenv("XDG_CACHE_HOME", "/x", 1);
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(bench_result_path(4), "/b/bench-" + host + "-np4.json");
  ::unsetenv("LATTICE_BENCH_DIR");
  EXPECT_EQ(bench_result_path(2), "/x/lattice/bench-" + host + "-np2.json");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(bench_result_path(1), "/h/.cache/lattice/bench-" + host + "-np1.json");
  ::unsetenv("HOME");
  expect_input_error([] { bench_result_path(1); }, "LATTICE_BENCH_DIR");
  const char* names[] = {"LATTICE_BENCH_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i)
    if (saved[i]) ::setenv(names[i], keep[i].c_str(), 1);
}
