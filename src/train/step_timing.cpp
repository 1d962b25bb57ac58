#include "train/step_timing.hpp"

#include <chrono>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/trace.hpp"

namespace lattice {

SlowRank slow_rank_from_env() {
  const char* v = std::getenv("LATTICE_TEST_SLOW_RANK");
  if (!v || !*v) return {};
  std::cmatch m;
  require(std::regex_match(v, m, std::regex(R"(([0-9]{1,6}|all):([0-9]{1,6})ms)")),
          std::string("LATTICE_TEST_SLOW_RANK=") + v + " is not RANK:MILLISECONDSms or all:MILLISECONDSms, e.g. "
          "1:50ms (a test hook that slows one rank's steps, or every rank's: unset it)");
  // all: every rank alike (a run that lasts long enough for the rule to judge it, on any machine).
  return {m[1].str() == "all" ? kEveryRank : std::stoi(m[1].str()), std::stoi(m[2].str()) * 1e-3};
}

StepTiming::StepTiming(comm::Distributed* dist, bool keep_trace, double straggler_threshold)
    : dist_(dist), keep_trace_(keep_trace), slow_(slow_rank_from_env()), times_(straggler_threshold) {
  Trace::instance().enable();
}

void StepTiming::begin_step() { mark_ = Trace::instance().events().size(); }

void StepTiming::test_slowdown() const {
  if (slow_.rank == kEveryRank || (slow_.rank >= 0 && slow_.rank == (dist_ ? dist_->rank() : 0)))
    std::this_thread::sleep_for(std::chrono::duration<double>(slow_.seconds));
}

std::vector<Straggler> StepTiming::end_step(int64_t step, bool timed) {
  Trace& trace = Trace::instance();
  const std::optional<StepSplit> split = split_recorded_step(trace.events(), mark_, step);
  if (!keep_trace_) trace.clear();
  const StepShares mine = split ? shares_of(*split) : StepShares{};
  const int stage = dist_ ? dist_->coords().pp_rank : 0;
  const int world = dist_ ? dist_->world_size() : 1;
  constexpr size_t kFields = 5;
  std::vector<float> all = {float(mine.step_s), float(mine.compute_s), float(mine.comm_wait_s), float(mine.bubble_s),
                            float(stage)};
  if (world > 1) {
    // Between steps, and left out of the trace: a --trace file holds the steps as before.
    const bool tracing = trace.enabled();
    trace.set_enabled(false);
    const std::vector<float> local = all;
    all.assign(kFields * size_t(world), 0.0f);
    dist_->world().all_gather(local, all);
    trace.set_enabled(tracing);
  }
  std::vector<RankShares> ranks(static_cast<size_t>(world));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const float* f = &all[kFields * r];
    ranks[r].rank = int(r), ranks[r].stage = int(f[4]);
    ranks[r].shares = {double(f[0]), double(f[1]), double(f[2]), double(f[3])};
  }
  return times_.add(step + 1, ranks, timed);
}

}  // namespace lattice
