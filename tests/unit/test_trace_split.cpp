// report/trace_split: a step's time per rank in the planner's parts, on hand-made traces (times in
// microseconds as the file holds them) and on one written by report/trace_writer.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace.hpp"
#include "report/trace_file.hpp"
#include "report/trace_split.hpp"
#include "report/trace_writer.hpp"
#include "test_util.hpp"

namespace lattice {
namespace {

using testing_util::expect_input_error;

struct Ev {
  const char* kind;
  double start, end;  // µs
  int rank = 0;
  int step = -1;      // args.step when >= 0
};

std::string write_trace_file(const std::string& dir, const std::vector<Ev>& events, const char* name = "t.json") {
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", "rank 0"}}}});
  for (const Ev& e : events) {
    nlohmann::json j = {{"name", e.kind}, {"cat", e.kind}, {"ph", "X"}, {"pid", 0}, {"tid", e.rank},
                        {"ts", e.start}, {"dur", e.end - e.start}};
    if (e.step >= 0) j["args"] = {{"step", e.step}, {"micro_batch", -1}, {"chunk", -1}};
    list.push_back(j);
  }
  const std::string path = dir + "/" + name;
  std::ofstream(path) << nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump();
  return path;
}

double parts_sum(const StepSplit& s) {
  double sum = 0;
  for (const SplitPart& p : split_parts()) sum += s.*p.seconds;
  return sum;
}

void expect_sums_to_step(const StepSplit& s) {
  EXPECT_NEAR(parts_sum(s), s.step_s, 1e-9 * s.step_s) << "rank " << s.rank;
  for (const SplitPart& p : split_parts()) EXPECT_GE(s.*p.seconds, 0.0) << p.name << " on rank " << s.rank;
}

constexpr double us = 1e-6;

TEST(TraceSplit, NestedSpansGoToTheInnermostPart) {
  const std::string dir = testing_util::scratch_dir("trace_split");
  const std::string path = write_trace_file(dir, {
      {"step", 0, 100, 0, 0},
      {"forward", 0, 40, 0, 0}, {"gemm", 5, 15}, {"comm_tp", 15, 20}, {"gemm", 25, 30},
      {"backward", 40, 80, 0, 0},
      {"recompute", 40, 55}, {"gemm", 41, 50}, {"comm_tp", 50, 52},  // all recompute
      {"gemm", 60, 70}, {"comm_dp", 72, 76},
      {"optimizer", 82, 98, 0, 0}, {"comm_dp", 82, 86}, {"comm_tp", 86, 87}, {"comm_other", 90, 91},
  });
  const std::vector<StepSplit> split = split_step(path);
  ASSERT_EQ(split.size(), 1u);
  const StepSplit& s = split[0];
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.step, 0);
  EXPECT_NEAR(s.step_s, 100 * us, 1e-12);
  EXPECT_NEAR(s.gemm_s, 25 * us, 1e-12);
  EXPECT_NEAR(s.tp_comm_s, 6 * us, 1e-12);       // forward's 5 and the optimizer's grad-norm 1
  EXPECT_NEAR(s.recompute_s, 15 * us, 1e-12);    // with its GEMM and TP comm
  EXPECT_NEAR(s.dp_comm_s, 8 * us, 1e-12);       // in the backward and in the optimizer
  EXPECT_NEAR(s.elementwise_s, 31 * us, 1e-12);  // forward 40-20, backward 40-29
  EXPECT_NEAR(s.optimizer_s, 10 * us, 1e-12);    // 16 less its 6 of comm
  EXPECT_NEAR(s.other_s, 5 * us, 1e-12);         // the step's own 4 and comm_other's 1
  EXPECT_EQ(s.ep_comm_s, 0.0);
  EXPECT_EQ(s.pp_comm_s, 0.0);
  EXPECT_EQ(s.bubble_s, 0.0);
  expect_sums_to_step(s);
}

TEST(TraceSplit, PipelineWaitsAreTheBubbleAndTheCopyIsPpComm) {
  const std::string dir = testing_util::scratch_dir("trace_split");
  const std::string path = write_trace_file(dir, {
      {"step", 0, 100, 1, 3},
      {"receive", 0, 30, 1, 3}, {"receive_wait", 0, 25, 1, 3}, {"comm_pp", 25, 29, 1},
      {"forward", 30, 50, 1, 3}, {"comm_ep", 35, 37, 1}, {"gemm", 40, 45, 1},
      {"send", 90, 99, 1, 3}, {"comm_pp", 90, 98, 1},  // the drain: waiting for the peer to take it
      {"step", 0, 60, 0, 3}, {"forward", 1, 31, 0, 3}, {"gemm", 2, 12, 0},
      {"comm_pp", 32, 38, 0},  // the loss gathered over the stages: waiting for the other stage
      {"comm_embedding", 40, 50, 0},
      {"optimizer", 50, 60, 0, 3}, {"comm_pp", 51, 53, 0},  // the grad norm's sum over stages
  });
  const std::vector<StepSplit> split = split_step(path);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0].rank, 0);
  EXPECT_EQ(split[1].rank, 1);
  const StepSplit& r0 = split[0];
  EXPECT_NEAR(r0.step_s, 60 * us, 1e-12);
  EXPECT_NEAR(r0.gemm_s, 10 * us, 1e-12);
  EXPECT_NEAR(r0.elementwise_s, 20 * us, 1e-12);
  EXPECT_NEAR(r0.dp_comm_s, 10 * us, 1e-12);  // the tied embedding's all-reduce
  EXPECT_NEAR(r0.bubble_s, 6 * us, 1e-12);
  EXPECT_NEAR(r0.pp_comm_s, 2 * us, 1e-12);
  EXPECT_NEAR(r0.optimizer_s, 8 * us, 1e-12);
  EXPECT_NEAR(r0.other_s, 4 * us, 1e-12);
  const StepSplit& r1 = split[1];
  EXPECT_NEAR(r1.bubble_s, 34 * us, 1e-12);  // 25 waiting to receive, 9 draining
  EXPECT_NEAR(r1.pp_comm_s, 5 * us, 1e-12);  // the copy 4, the receive's own 1
  EXPECT_NEAR(r1.ep_comm_s, 2 * us, 1e-12);
  EXPECT_NEAR(r1.gemm_s, 5 * us, 1e-12);
  EXPECT_NEAR(r1.elementwise_s, 13 * us, 1e-12);
  EXPECT_NEAR(r1.other_s, 41 * us, 1e-12);
  for (const StepSplit& s : split) expect_sums_to_step(s);
}

TEST(TraceSplit, LastStepByDefaultAnyStepAskedAndSpansOutsideStepsIgnored) {
  const std::string dir = testing_util::scratch_dir("trace_split");
  const std::string path = write_trace_file(dir, {
      {"step", 0, 50, 0, 0}, {"forward", 0, 20, 0, 0}, {"gemm", 1, 11},
      {"gemm", 55, 58},  // between steps (an evaluation): in no step
      {"step", 60, 130, 0, 1}, {"forward", 60, 100, 0, 1}, {"gemm", 61, 91}, {"optimizer", 100, 130, 0, 1},
      {"gemm", 140, 150},
  });
  const StepSplit last = split_step(path).at(0);
  EXPECT_EQ(last.step, 1);
  EXPECT_NEAR(last.step_s, 70 * us, 1e-12);
  EXPECT_NEAR(last.gemm_s, 30 * us, 1e-12);
  EXPECT_NEAR(last.optimizer_s, 30 * us, 1e-12);
  expect_sums_to_step(last);
  const StepSplit first = split_step(path, 0).at(0);
  EXPECT_EQ(first.step, 0);
  EXPECT_NEAR(first.gemm_s, 10 * us, 1e-12);
  EXPECT_NEAR(first.other_s, 30 * us, 1e-12);
  expect_sums_to_step(first);
  expect_input_error([&] { split_step(path, 2); }, "has no step 2 (it holds steps 0 to 1)");
}

TEST(TraceSplit, PartsSumToTheStepAtNanosecondTimes) {
  const std::string dir = testing_util::scratch_dir("trace_split");
  // Odd nanosecond times far from the origin, as a long run writes them.
  const double t = 987654321.123;
  const std::string path = write_trace_file(dir, {
      {"step", t, t + 5000.457, 0, 7}, {"forward", t + 0.001, t + 999.999, 0, 7}, {"gemm", t + 0.002, t + 0.003},
      {"gemm", t + 0.003, t + 0.003}, {"comm_tp", t + 0.003, t + 17.011}, {"backward", t + 999.999, t + 4000.001, 0, 7},
      {"recompute", t + 999.999, t + 1500.5}, {"gemm", t + 1000, t + 1200.25},
  });
  const StepSplit s = split_step(path).at(0);
  EXPECT_NEAR(s.step_s, 5000.457 * us, 1e-15);
  EXPECT_NEAR(s.gemm_s, 0.001 * us, 1e-15);
  EXPECT_NEAR(s.recompute_s, (1500.5 - 999.999) * us, 1e-15);
  EXPECT_NEAR(parts_sum(s), s.step_s, 1e-12 * s.step_s);
}

TEST(TraceSplit, WrittenTraceReadsBack) {
  const std::string dir = testing_util::scratch_dir("trace_split");
  Trace& trace = Trace::instance();
  trace.clear();
  const int64_t t0 = 1'000'000'000'007;  // ns
  trace.record(Trace::Kind::forward, t0 + 10, t0 + 5'010, 0, 0, 4);
  trace.record(Trace::Kind::gemm, t0 + 11, t0 + 2'013);
  trace.record(Trace::Kind::recompute, t0 + 6'000, t0 + 6'500);
  trace.record(Trace::Kind::optimizer, t0 + 7'000, t0 + 9'999, -1, -1, 4);
  trace.record(Trace::Kind::comm_dp, t0 + 7'001, t0 + 8'000);
  trace.record(Trace::Kind::step, t0, t0 + 10'001, -1, -1, 4);
  const TraceLayout one_rank{"1f1b", 1, 1, 1, 1, "0123456789abcdef"};
  write_trace(trace, dir + "/w.json", nullptr, 0, one_rank);
  trace.clear();
  // The layout and the start that wrote it read back as written (report/trace_file.hpp).
  const TraceFile file = read_trace(dir + "/w.json");
  ASSERT_TRUE(file.layout.has_value());
  EXPECT_EQ(to_json(*file.layout), to_json(one_rank));
  EXPECT_EQ(file.layout->start_id, "0123456789abcdef");
  EXPECT_EQ(file.spans.size(), 6u);
  const StepSplit s = split_step(dir + "/w.json").at(0);
  EXPECT_EQ(s.step, 4);
  EXPECT_NEAR(s.step_s, 10'001e-9, 1e-18);
  EXPECT_NEAR(s.gemm_s, 2'002e-9, 1e-18);
  EXPECT_NEAR(s.elementwise_s, 2'998e-9, 1e-18);
  EXPECT_NEAR(s.recompute_s, 500e-9, 1e-18);
  EXPECT_NEAR(s.dp_comm_s, 999e-9, 1e-18);
  EXPECT_NEAR(s.optimizer_s, 2'000e-9, 1e-18);
  EXPECT_NEAR(s.other_s, (10'001 - 5'000 - 500 - 2'999) * 1e-9, 1e-18);
}

TEST(TraceSplit, RefusesOldForeignAndTangledTraces) {
  const std::string dir = testing_util::scratch_dir("trace_split");
  // Written by a lattice before step spans: forward, backward, optimizer only.
  const std::string old = write_trace_file(dir, {{"forward", 0, 10, 0, 0}, {"backward", 10, 30, 0, 0},
                                                 {"optimizer", 30, 35, 0, 0}}, "old.json");
  expect_input_error([&] { split_step(old); }, "has no step spans (written by an older lattice");
  const std::string foreign = dir + "/foreign.json";
  std::ofstream(foreign)
      << R"({"traceEvents": [{"cat":"forward","ph":"X","args":{"step":1},"tid":"zero","ts":1,"dur":5}]})";
  expect_input_error([&] { split_step(foreign); }, "is not a lattice trace");
  const std::string unknown = write_trace_file(dir, {{"step", 0, 10, 0, 0}, {"GPU kernel", 1, 2}}, "unknown.json");
  expect_input_error([&] { split_step(unknown); }, "unknown kind \"GPU kernel\"");
  const std::string tangled =
      write_trace_file(dir, {{"step", 0, 100, 0, 0}, {"forward", 0, 40, 0, 0}, {"gemm", 30, 50}}, "tangled.json");
  expect_input_error([&] { split_step(tangled); }, "overlaps a forward span without nesting");
  const std::string not_json = dir + "/text.json";
  std::ofstream(not_json) << "step 1: forward 10 ms\n";
  expect_input_error([&] { split_step(not_json); }, "is not a lattice trace");
  expect_input_error([&] { split_step(dir + "/missing.json"); }, "missing.json does not exist");
  const std::string one_rank_short = write_trace_file(dir, {{"step", 0, 10, 0, 0}, {"step", 0, 10, 1, 0},
                                                            {"step", 20, 30, 0, 1}}, "short.json");
  expect_input_error([&] { split_step(one_rank_short); }, "has no step 1 on rank 1");
}

}  // namespace
}  // namespace lattice
