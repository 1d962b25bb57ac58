#pragma once
// StepTimes: every rank's step time in compute, communication wait and pipeline bubble
// (report/trace_split.hpp's StepShares), added step by step, averaged for the run's summary, and
// the rule that names a straggler while the run goes on (docs/recovery.md, "Stragglers"):
//
//   a rank is a straggler when its compute time, summed over the window of the last timed steps
//   (at least kSteps = 5 of them, and as many as cover kWindowSeconds = 2 s of step time), exceeds
//   the median of the same sum over the other ranks of its pipeline stage by more than the threshold
//   (--straggler-threshold, default kDefaultThreshold: 50%).
//
// Compute, not step time: the ranks meet at every collective, so a slow rank's step takes as long
// as everyone's, and the others' share of the delay shows as their communication wait. The peers
// are the ranks of the same stage because they run the same layers on the same shapes (TP shards
// evenly, DP replicas are alike); stages differ by design (the embedding, the head, uneven layer
// counts), so a stage with one rank has no peers and is never named. A window of seconds, not only
// of steps: a rank descheduled for a few milliseconds makes a short step several times slower, and
// sums over 2 s even that out, while a straggler worth naming stays slow for longer. Why 50% and
// 2 s, and why the threshold is a flag: docs/recovery.md (the noise measured between unslowed ranks
// on a shared machine, where another job on a rank's core makes it a real, if uninteresting, straggler).
#include <cstdint>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/trace_split.hpp"

namespace lattice {

struct RankShares {
  int rank = 0, stage = 0;  // world rank, pipeline stage (pp_rank)
  StepShares shares;
};

struct Straggler {
  int64_t step = 0;      // the step at which the rule fired (1-based, as the step records)
  int rank = 0, stage = 0;
  double compute_s = 0;  // the rank's compute time a step, mean over the window
  double peers_s = 0;    // the median over its peers of the same mean
  int steps = 0;         // the window's steps
  double window_s = 0;   // and their step time
  double threshold = 0;  // the rule's
  double ratio() const { return peers_s > 0 ? compute_s / peers_s : 0; }
};

class StepTimes {
 public:
  static constexpr double kDefaultThreshold = 0.5;  // above the peers' median by more than this share
  static constexpr int kSteps = 5;                    // over a window of at least this many timed steps
  static constexpr double kWindowSeconds = 2.0;       // and at least this much step time
  explicit StepTimes(double threshold = kDefaultThreshold) : threshold_(threshold) {}

  // Step `step`'s shares of every rank, in rank order (the same ranks every step). `timed`: the
  // step counts (the run's first step warms caches: neither averaged nor judged). Returns the ranks
  // the rule names at this step: those above the threshold now and not at the step before; a rank
  // is named again only after a window within the threshold.
  std::vector<Straggler> add(int64_t step, const std::vector<RankShares>& ranks, bool timed);

  int64_t timed_steps() const { return timed_; }
  const std::vector<Straggler>& named() const { return named_; }  // every straggler named in the run
  // {"steps":N,"ranks":[{"rank","stage","step_s","compute_s","comm_wait_s","bubble_s"} (means)],
  //  "stragglers":[straggler_json...],"rule":{"threshold","steps","window_s"}}; null before any timed step.
  nlohmann::json summary_json() const;
  void print(std::FILE* out) const;  // the same as a table of lines, and the stragglers named

 private:
  double threshold_;
  std::vector<RankShares> sum_;  // sums over the timed steps
  int64_t timed_ = 0;
  struct Step {
    double step_s = 0;               // the slowest rank's
    std::vector<double> compute_s;   // by rank
  };
  std::deque<Step> recent_;  // the timed steps the next window may still need, oldest first
  std::vector<bool> slow_;   // by rank: above the threshold at the last judged step
  std::vector<Straggler> named_;
};

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median_of(std::vector<double> values);

// "rank 1 (stage 0) is a straggler: compute 0.0612 s a step over the last 37 steps (2.03 s), 4.10x
// the median 0.0149 s of its stage's other ranks (rule: above 1.50x over at least 5 steps and 2 s)"
std::string straggler_text(const Straggler& s);
// {"event":"straggler","step","rank","stage","compute_s","peers_median_s","ratio","steps","window_s","threshold"}
nlohmann::json straggler_json(const Straggler& s);

}  // namespace lattice
