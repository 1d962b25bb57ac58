#pragma once
// StepTiming: the trainer's side of the step-time split (report/step_time.hpp). Tracing
// (core/trace.hpp) is on for every run: after each step this rank's spans of that step are split
// into compute, communication wait and bubble (report/trace_split.hpp), every rank's three are
// gathered over the world (one all-gather of 5 floats a rank, between steps), and StepTimes judges
// them; without --trace the step's spans are then dropped, so memory stays bounded.
//
// Also the test-only hook that makes a straggler: LATTICE_TEST_SLOW_RANK=R:Nms sleeps N ms in world
// rank R's every step, inside the step and outside any wait (so it is compute). It exists for the
// cli.stragglers test and is named in docs/recovery.md as a test hook; nothing else reads it.
#include <cstdint>
#include <vector>

#include "comm/distributed.hpp"
#include "report/step_time.hpp"

namespace lattice {

inline constexpr int kEveryRank = -2;  // LATTICE_TEST_SLOW_RANK=all:Nms
struct SlowRank {
  int rank = -1;       // -1: no rank is slowed; kEveryRank: all of them alike
  double seconds = 0;  // a step
};
// LATTICE_TEST_SLOW_RANK read and checked (InputError naming the variable when it is not R:Nms or all:Nms).
SlowRank slow_rank_from_env();

class StepTiming {
 public:
  // `keep_trace`: --trace writes the spans at the end, so they are kept; else each step's are dropped.
  StepTiming(comm::Distributed* dist, bool keep_trace, double straggler_threshold);
  void begin_step();  // before a step: marks where its spans begin
  void test_slowdown() const;  // inside the step's span: LATTICE_TEST_SLOW_RANK's sleep, on its rank
  // After step `step` (0-based, the trace's args.step): collective over the world. `timed`: the step
  // counts in the means and the rule. Returns the stragglers the rule names at this step.
  std::vector<Straggler> end_step(int64_t step, bool timed);
  const StepTimes& times() const { return times_; }

 private:
  comm::Distributed* dist_;
  bool keep_trace_;
  size_t mark_ = 0;
  SlowRank slow_;
  StepTimes times_;
};

}  // namespace lattice
