// PipeDream-2BW's step lists (docs/design.md §6.3): each phase's structure, and runs of phases —
// [whole], [first, last], [first, steady, last], [first, steady, steady, last] — checked exhaustively
// for p ≤ 8, p ≤ n ≤ 32 as the other schedules are: every micro-batch's forward and backward once, the
// forward first; sends matching receives in order across step boundaries; no deadlock with the
// trainer's barrier at each step's end or without it; the simulated time equal to the formula; the
// activations held as 1F1B's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/formulas.hpp"
#include "core/error.hpp"
#include "engine/schedule.hpp"
#include "report/simulate.hpp"

using namespace lattice;
using namespace lattice::parallel::pipeline;

namespace {

constexpr ScheduleKind k2bw = ScheduleKind::pipedream_2bw;

std::vector<std::vector<Phase>> phase_runs() {
  return {{Phase::whole},
          {Phase::first, Phase::last},
          {Phase::first, Phase::steady, Phase::last},
          {Phase::first, Phase::steady, Phase::steady, Phase::last}};
}

std::vector<RankActions> without_step_ends(std::vector<RankActions> lists) {
  for (auto& list : lists)
    list.erase(std::remove_if(list.begin(), list.end(), [](const Action& a) { return a.pass == Pass::step_end; }),
               list.end());
  return lists;
}

}  // namespace

// A one-step run is 1F1B; the phases are the stretches of rank r's stream F(k + w) B(k), w = p − r − 1.
TEST(PipeDream2BW, PhasesAreStretchesOfOneStream) {
  for (int p = 1; p <= 8; ++p)
    for (int n = p; n <= 32; ++n) {
      SCOPED_TRACE("p=" + std::to_string(p) + " n=" + std::to_string(n));
      EXPECT_EQ(build_schedule(k2bw, p, n, 1), build_schedule(ScheduleKind::one_f_one_b, p, n, 1));
      const auto first = build_step_schedule(k2bw, p, n, 1, Phase::first);
      const auto steady = build_step_schedule(k2bw, p, n, 1, Phase::steady);
      const auto last = build_step_schedule(k2bw, p, n, 1, Phase::last);
      for (int r = 0; r < p; ++r) {
        const int w = p - r - 1;
        // steady: F(j) then the backward w places behind, of the previous batch while j < w
        const RankActions& s = steady[size_t(r)];
        ASSERT_EQ(s.size(), size_t(2 * n));
        for (int j = 0; j < n; ++j) {
          EXPECT_EQ(s[size_t(2 * j)].pass, Pass::forward);
          EXPECT_EQ(s[size_t(2 * j)].micro_batch, j);
          EXPECT_EQ(s[size_t(2 * j)].batch, 0);
          EXPECT_EQ(s[size_t(2 * j + 1)].pass, Pass::backward);
          EXPECT_EQ(s[size_t(2 * j + 1)].batch, j < w ? -1 : 0);
          EXPECT_EQ(s[size_t(2 * j + 1)].micro_batch, j < w ? n + j - w : j - w);
        }
        // first: steady without the previous batch; last: steady and this batch's last w backwards
        RankActions expect_first;
        for (const Action& a : s)
          if (a.batch == 0) expect_first.push_back(a);
        EXPECT_EQ(first[size_t(r)], expect_first);
        RankActions expect_last = s;
        for (int mb = n - w; mb < n; ++mb) {
          Action b = s[1];
          b.micro_batch = mb, b.batch = 0;
          expect_last.push_back(b);
        }
        EXPECT_EQ(last[size_t(r)], expect_last);
      }
    }
  EXPECT_EQ(step_phase(true, false), Phase::first);
  EXPECT_EQ(step_phase(true, true), Phase::whole);
  EXPECT_EQ(step_phase(false, false), Phase::steady);
  EXPECT_EQ(step_phase(false, true), Phase::last);
}

// Over a run, every micro-batch of every batch runs forward then backward once on each rank, and
// between two ranks each kind of message is sent in the order it is received.
TEST(PipeDream2BW, RunsCoverEveryMicroBatchAndMatchMessages) {
  for (const auto& phases : phase_runs())
    for (int p = 1; p <= 8; ++p)
      for (int n = p; n <= 32; ++n) {
        SCOPED_TRACE("steps=" + std::to_string(phases.size()) + " p=" + std::to_string(p) + " n=" + std::to_string(n));
        const auto run = build_run(k2bw, p, n, 1, phases);
        const int total = n * int(phases.size());
        std::map<std::tuple<int, int, Pass>, std::vector<int>> sent, received;
        for (int r = 0; r < p; ++r) {
          std::map<std::pair<Pass, int>, size_t> at;
          int ends = 0;
          for (size_t i = 0; i < run[size_t(r)].size(); ++i) {
            const Action& a = run[size_t(r)][i];
            if (a.pass == Pass::step_end) {
              EXPECT_EQ(a.micro_batch, ends++);
              continue;
            }
            EXPECT_TRUE(at.emplace(std::pair{a.pass, a.micro_batch}, i).second) << describe_action(a, 1);
            if (a.send_to != kNoPeer) sent[{r, a.send_to, a.pass}].push_back(a.micro_batch);
            if (a.recv_from != kNoPeer) received[{a.recv_from, r, a.pass}].push_back(a.micro_batch);
          }
          EXPECT_EQ(ends, int(phases.size()));
          ASSERT_EQ(at.size(), size_t(2 * total));
          for (int k = 0; k < total; ++k) EXPECT_LT(at.at({Pass::forward, k}), at.at({Pass::backward, k}));
        }
        EXPECT_EQ(sent, received);
      }
}

// With the barrier at each step's end, a step of the stream takes n(F+B) + (p−1)F and the final
// drain adds (p−1)B: the simulated run equals analysis::pipedream_2bw_time exactly, for several
// pass-time mixes. Rank r holds min(p − r, n) micro-batches, as under 1F1B, and the run also
// completes free-running (no barriers).
TEST(PipeDream2BW, SimulatedRunEqualsItsFormula) {
  const std::vector<std::pair<double, double>> mixes = {{1, 2}, {1, 1}, {2, 3}, {0.5, 2.5}};
  for (const auto& phases : phase_runs())
    for (int p = 1; p <= 8; ++p)
      for (int n = p; n <= 32; ++n)
        for (const auto& [f, b] : mixes) {
          SCOPED_TRACE("steps=" + std::to_string(phases.size()) + " p=" + std::to_string(p) +
                       " n=" + std::to_string(n) + " F=" + std::to_string(f) + " B=" + std::to_string(b));
          SimulationOptions options;
          options.forward_time = f, options.backward_time = b;
          const auto run = build_run(k2bw, p, n, 1, phases);
          const Simulation sim = simulate(run, 1, options);
          const int steps = int(phases.size());
          EXPECT_NEAR(sim.total_time, analysis::pipedream_2bw_time(p, n, {f, b, 0}, steps), 1e-9);
          // Every step but the drain takes the steady step's time, the first one included.
          ASSERT_EQ(sim.step_ends.size(), size_t(steps));
          for (int k = 0; k + 1 < steps; ++k)
            EXPECT_NEAR(sim.step_ends[size_t(k)], (k + 1) * analysis::pipedream_2bw_steady_step_time(p, n, {f, b, 0}),
                        1e-9);
          EXPECT_NEAR(sim.bubble, bubble_formula(k2bw, p, n, 1, options, steps), 1e-12);
          for (int r = 0; r < p; ++r) EXPECT_EQ(sim.ranks[size_t(r)].peak_in_flight, std::min(p - r, n));
          const Simulation free = simulate(without_step_ends(run), 1, options);
          EXPECT_LE(free.total_time, sim.total_time + 1e-9);
        }
  // A steady step saves 1F1B's (p − 1)B: 4 stages, 8 micro-batches, F = 1, B = 2.
  EXPECT_DOUBLE_EQ(analysis::pipedream_2bw_time(4, 8, {1, 2, 0}, 10) / 10, 8 * 3 + 3 + 0.6);
  EXPECT_DOUBLE_EQ(analysis::pipeline_step_time(false, 4, 8, {1, 2, 0}), (8 + 3) * 3);
}

TEST(PipeDream2BW, RefusesWhatTwoVersionsCannotHold) {
  auto error = [](auto f) {
    try {
      f();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error([] { build_schedule(k2bw, 4, 3, 1); }).find("at least p = 4 micro-batches"), std::string::npos);
  EXPECT_NE(error([] { build_schedule(k2bw, 2, 4, 2); }).find("virtual stages > 1 need the interleaved"),
            std::string::npos);
  EXPECT_NE(error([] { build_run(k2bw, 2, 4, 1, {Phase::steady, Phase::last}); }).find("must start the stream"),
            std::string::npos);
  EXPECT_EQ(parse_schedule_kind("pipedream-2bw"), k2bw);
  EXPECT_STREQ(schedule_name(k2bw), "pipedream-2bw");
  // A run that ends without draining leaves gradients unreceived and backwards unrun: the simulator says so.
  EXPECT_NE(error([] { simulate(build_run(k2bw, 3, 4, 1, {Phase::first, Phase::steady}), 1); }).find("no action receives"),
            std::string::npos);
}
