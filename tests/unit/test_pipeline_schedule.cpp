// Pipeline schedules as data (docs/design.md §6): the action lists of GPipe, 1F1B and Megatron's interleaved
// 1F1B are checked structurally (coverage, forward before backward, peers, send/receive order),
// then simulated: no deadlock, bubble equal to (p−1)/(m·n+p−1), first-stage memory as eq. 5.
// Past the usual length on purpose: the schedules' cases share the structural checks and the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/formulas.hpp"
#include "core/error.hpp"
#include "engine/schedule.hpp"
#include "report/schedule_svg.hpp"
#include "report/simulate.hpp"

using namespace lattice;
using namespace lattice::parallel::pipeline;

namespace {

struct Case {
  ScheduleKind kind;
  int p, n_mb, m;
};

// Every (kind, p, n_mb, m) the tests sweep: p 1..8, n_mb 1..32, m 2..4 for interleaved where allowed.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int p = 1; p <= 8; ++p)
    for (int n = 1; n <= 32; ++n) {
      cases.push_back({ScheduleKind::gpipe, p, n, 1});
      cases.push_back({ScheduleKind::one_f_one_b, p, n, 1});
      cases.push_back({ScheduleKind::zb_h1, p, n, 1});
      if (n >= p) cases.push_back({ScheduleKind::pipedream_2bw, p, n, 1});  // one step: its whole phase
      if (p >= 2 && n % p == 0)
        for (int m = 2; m <= 4; ++m) cases.push_back({ScheduleKind::interleaved, p, n, m});
    }
  return cases;
}

bool split(ScheduleKind kind) { return kind == ScheduleKind::zb_h1; }
// The pass that receives the output gradient and sends the input gradient.
Pass backward_of(ScheduleKind kind) { return split(kind) ? Pass::backward_input : Pass::backward; }

std::string name_of(const Case& c) {
  std::string s = schedule_name(c.kind);
  for (const auto& [key, value] : {std::pair{" p=", c.p}, {" n=", c.n_mb}, {" m=", c.m}}) {
    s += key;
    s += std::to_string(value);
  }
  return s;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string labels(const RankActions& list, int m) {
  std::string s;
  for (const auto& a : list) {
    if (!s.empty()) s += ' ';
    s += action_label(a, m);
  }
  return s;
}

}  // namespace

// Each rank runs exactly one forward and one backward of every (micro-batch, chunk), each on the
// stage chunk·p + rank, the forward first; a split backward's input pass, then its weight pass.
TEST(PipelineSchedule, EveryMicroBatchAndChunkOnceForwardBeforeBackward) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(name_of(c));
    const auto ranks = build_schedule(c.kind, c.p, c.n_mb, c.m);
    ASSERT_EQ(int(ranks.size()), c.p);
    for (int r = 0; r < c.p; ++r) {
      const auto& list = ranks[size_t(r)];
      ASSERT_EQ(list.size(), size_t((split(c.kind) ? 3 : 2) * c.n_mb * c.m)) << "rank " << r;
      std::map<std::tuple<Pass, int, int>, size_t> position;
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        ASSERT_GE(a.micro_batch, 0);
        ASSERT_LT(a.micro_batch, c.n_mb);
        ASSERT_GE(a.chunk, 0);
        ASSERT_LT(a.chunk, c.m);
        EXPECT_EQ(a.stage, a.chunk * c.p + r);
        EXPECT_TRUE(position.emplace(std::tuple{a.pass, a.micro_batch, a.chunk}, i).second)
            << "rank " << r << " repeats " << action_label(a, c.m);
      }
      for (int mb = 0; mb < c.n_mb; ++mb)
        for (int ch = 0; ch < c.m; ++ch)
        {
          EXPECT_LT(position.at({Pass::forward, mb, ch}), position.at({backward_of(c.kind), mb, ch}))
              << "rank " << r << " micro-batch " << mb << " chunk " << ch;
          if (split(c.kind)) {
            EXPECT_LT(position.at({Pass::backward_input, mb, ch}), position.at({Pass::backward_weight, mb, ch}));
          }
        }
    }
  }
}

// Peers follow the global virtual stages: activations go stage s -> s+1 (rank (s+1) mod p),
// gradients s+1 -> s, and nothing crosses the ends of the pipeline.
TEST(PipelineSchedule, PeersAreTheNeighbouringVirtualStages) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(name_of(c));
    const int last = c.p * c.m - 1;
    const auto ranks = build_schedule(c.kind, c.p, c.n_mb, c.m);
    for (const auto& list : ranks)
      for (const Action& a : list) {
        if (a.pass == Pass::backward_weight) {  // the weight pass talks to nobody
          EXPECT_EQ(a.recv_from, kNoPeer);
          EXPECT_EQ(a.send_to, kNoPeer);
          continue;
        }
        const int before = a.stage == 0 ? kNoPeer : (a.stage - 1) % c.p;
        const int after = a.stage == last ? kNoPeer : (a.stage + 1) % c.p;
        EXPECT_EQ(a.recv_from, a.pass == Pass::forward ? before : after) << describe_action(a, c.m);
        EXPECT_EQ(a.send_to, a.pass == Pass::forward ? after : before) << describe_action(a, c.m);
      }
  }
}

// Between two ranks, the messages of one kind (activations or gradients) are sent in exactly the
// order the receiver consumes them: the executor may post receives ahead with one tag per kind.
TEST(PipelineSchedule, SendsMatchReceivesInOrder) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(name_of(c));
    const auto ranks = build_schedule(c.kind, c.p, c.n_mb, c.m);
    // (from, to, kind) -> sequence of (micro-batch, receiving stage)
    std::map<std::tuple<int, int, Pass>, std::vector<std::pair<int, int>>> sent, received;
    for (int r = 0; r < c.p; ++r)
      for (const Action& a : ranks[size_t(r)]) {
        if (a.send_to != kNoPeer)
          sent[{r, a.send_to, a.pass}].push_back({a.micro_batch, a.pass == Pass::forward ? a.stage + 1 : a.stage - 1});
        if (a.recv_from != kNoPeer) received[{a.recv_from, r, a.pass}].push_back({a.micro_batch, a.stage});
      }
    EXPECT_EQ(sent, received);
    size_t messages = 0;
    for (const auto& [key, seq] : sent) messages += seq.size();
    EXPECT_EQ(messages, size_t(2 * c.n_mb * (c.p * c.m - 1)));  // one each way across each stage boundary
  }
}

// Megatron's orderings, spelled out for p = 4, n_mb = 8.
TEST(PipelineSchedule, MegatronOrderings) {
  const auto gpipe = build_schedule(ScheduleKind::gpipe, 4, 8, 1);
  EXPECT_EQ(labels(gpipe[2], 1), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
  const auto f1b1 = build_schedule(ScheduleKind::one_f_one_b, 4, 8, 1);
  EXPECT_EQ(labels(f1b1[0], 1), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");  // 3 warm-up
  EXPECT_EQ(labels(f1b1[1], 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");  // 2 warm-up
  EXPECT_EQ(labels(f1b1[3], 1), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");  // none
  // Interleaved, m = 2: rank 0 warms up with (4−0−1)·2 + (2−1)·4 = 10 forwards, chunks in groups
  // of p = 4 micro-batches; backwards visit the chunks in reverse.
  const auto inter = build_schedule(ScheduleKind::interleaved, 4, 8, 2);
  EXPECT_EQ(labels(inter[0], 2),
            "F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 F1.c1 F2.c1 F3.c1 F4.c0 F5.c0 F6.c0 B0.c1 F7.c0 B1.c1 F4.c1 B2.c1 "
            "F5.c1 B3.c1 F6.c1 B0.c0 F7.c1 B1.c0 B2.c0 B3.c0 B4.c1 B5.c1 B6.c1 B7.c1 B4.c0 B5.c0 B6.c0 B7.c0");
  // The last rank warms up with (m−1)·p = 4 forwards.
  EXPECT_EQ(labels(inter[3], 2).substr(0, 35), "F0.c0 F1.c0 F2.c0 F3.c0 F0.c1 B0.c1");
  // n_mb == p: Megatron runs all forwards, then all backwards, on every rank.
  const auto all_warm = build_schedule(ScheduleKind::interleaved, 2, 2, 2);
  EXPECT_EQ(labels(all_warm[1], 2), "F0.c0 F1.c0 F0.c1 F1.c1 B0.c1 B1.c1 B0.c0 B1.c0");
}

// ZB-H1 (Qi et al. 2023, figure 3's H1), p = 4, n_mb = 8: 1F1B's F/B order, W(i−r) after B(i).
TEST(PipelineSchedule, ZeroBubbleH1Orderings) {
  const auto zb = build_schedule(ScheduleKind::zb_h1, 4, 8, 1);
  EXPECT_EQ(labels(zb[0], 1), "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(labels(zb[1], 1), "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  EXPECT_EQ(labels(zb[2], 1), "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
  EXPECT_EQ(labels(zb[3], 1), "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  // Without its W's, each rank's list is 1F1B's.
  const auto f1b1 = build_schedule(ScheduleKind::one_f_one_b, 4, 8, 1);
  for (int r = 0; r < 4; ++r) {
    RankActions fb;
    for (Action a : zb[size_t(r)]) {
      if (a.pass == Pass::backward_weight) continue;
      if (a.pass == Pass::backward_input) a.pass = Pass::backward;
      fb.push_back(a);
    }
    EXPECT_EQ(fb, f1b1[size_t(r)]) << "rank " << r;
  }
}

// ZB-H1's step, simulated, is the formula's n(F+B+W) + (p−1)(F+B−W) when n ≥ p and W ≤ min(F, B),
// and (n+p−1)(F+B) + W when n < p; at any pass times it is never longer than 1F1B's.
TEST(PipelineSimulation, ZeroBubbleStepEqualsItsFormula) {
  struct Times { double f, b, w; };
  for (const Times t : {Times{1, 1, 1}, Times{1, 1.5, 0.5}, Times{1, 2, 1}, Times{2, 2, 1}, Times{1, 1, 0.25}}) {
    SimulationOptions options;
    options.forward_time = t.f, options.backward_time = t.b + t.w, options.weight_time = t.w;
    for (int p = 1; p <= 8; ++p)
      for (int n = 1; n <= 32; ++n) {
        SCOPED_TRACE("p=" + std::to_string(p) + " n=" + std::to_string(n) + " F,B,W=" + std::to_string(t.f) + "," +
                     std::to_string(t.b) + "," + std::to_string(t.w));
        const Simulation sim = simulate(build_schedule(ScheduleKind::zb_h1, p, n, 1), 1, options);
        const analysis::PassTimes pt{t.f, t.b, t.w};
        EXPECT_NEAR(sim.total_time, analysis::pipeline_step_time(true, p, n, pt), 1e-9);
        EXPECT_NEAR(sim.bubble, bubble_formula(ScheduleKind::zb_h1, p, n, 1, options), 1e-12);
        for (const auto& line : sim.ranks) EXPECT_NEAR(line.busy, n * (t.f + t.b + t.w), 1e-9);
        const Simulation fb = simulate(build_schedule(ScheduleKind::one_f_one_b, p, n, 1), 1, options);
        EXPECT_LE(sim.total_time, fb.total_time + 1e-9);
        if (p > 1 && n >= p) {
          EXPECT_LT(sim.total_time, fb.total_time - 1e-9) << "W fills part of 1F1B's bubble";
        }
      }
  }
  // Random pass times outside the formula's domain: never slower than 1F1B.
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    SimulationOptions options;
    const double b = u(rng), w = u(rng);
    options.forward_time = u(rng), options.backward_time = b + w, options.weight_time = w;
    const int p = 1 + trial % 8, n = 1 + (trial * 7) % 32;
    const Simulation zb = simulate(build_schedule(ScheduleKind::zb_h1, p, n, 1), 1, options);
    const Simulation fb = simulate(build_schedule(ScheduleKind::one_f_one_b, p, n, 1), 1, options);
    EXPECT_LE(zb.total_time, fb.total_time + 1e-9) << "p=" << p << " n=" << n;
  }
}

// The simulation runs every schedule to the end. With zero latency and equal stages, the bubble is
// exactly (p−1)/(m·n+p−1) for all three, for any forward/backward ratio: the last rank cannot start
// before p−1 chunk forwards (p−1)·tf/m, and after its last action (a chunk-0 backward) p−1 chunk
// backwards (p−1)·tb/m remain; in between it is busy n·(tf+tb). That is a lower bound on the step,
// and these schedules attain it (the last rank never waits), so equality holds up to rounding.
TEST(PipelineSimulation, BubbleEqualsFormulaExactly) {
  for (double backward : {2.0, 1.0, 3.0}) {
    SimulationOptions options;
    options.backward_time = backward;
    for (const Case& c : all_cases()) {
      if (split(c.kind)) continue;  // ZeroBubbleStepEqualsItsFormula
      SCOPED_TRACE(name_of(c) + " backward " + std::to_string(backward));
      const Simulation sim = simulate(build_schedule(c.kind, c.p, c.n_mb, c.m), c.m, options);
      const double per_mb = options.forward_time + options.backward_time;
      EXPECT_NEAR(sim.total_time, c.n_mb * per_mb + (c.p - 1) * per_mb / c.m, 1e-9);
      EXPECT_NEAR(sim.bubble, bubble_formula(c.kind, c.p, c.n_mb, c.m), 1e-12);
      EXPECT_NEAR(sim.bubble, analysis::pipeline_bubble_fraction(c.p, c.n_mb, c.m), 1e-12);
      for (const auto& line : sim.ranks) EXPECT_NEAR(line.busy, c.n_mb * per_mb, 1e-9);
    }
  }
}

// A point-to-point latency only adds waiting: the bubble grows above the formula whenever p > 1.
TEST(PipelineSimulation, LatencyWidensTheBubble) {
  SimulationOptions options;
  options.p2p_latency = 0.1;
  for (const Case& c : all_cases()) {
    if (c.p == 1) continue;
    SCOPED_TRACE(name_of(c));
    const Simulation sim = simulate(build_schedule(c.kind, c.p, c.n_mb, c.m), c.m, options);
    EXPECT_GT(sim.bubble, bubble_formula(c.kind, c.p, c.n_mb, c.m) + 1e-6);
  }
}

// Timelines: actions on a rank never overlap, and each starts after its input was sent.
TEST(PipelineSimulation, TimelinesRespectRanksAndMessages) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(name_of(c));
    const Simulation sim = simulate(build_schedule(c.kind, c.p, c.n_mb, c.m), c.m);
    std::map<std::tuple<Pass, int, int>, double> finished;  // (pass, micro-batch, stage) -> end
    for (const auto& line : sim.ranks)
      for (const auto& ta : line.actions) finished[{ta.action.pass, ta.action.micro_batch, ta.action.stage}] = ta.end;
    for (const auto& line : sim.ranks)
      for (size_t i = 0; i < line.actions.size(); ++i) {
        const auto& ta = line.actions[i];
        if (i > 0) {
          EXPECT_GE(ta.start, line.actions[i - 1].end);
        }
        if (ta.action.recv_from == kNoPeer) continue;
        const int from_stage = ta.action.pass == Pass::forward ? ta.action.stage - 1 : ta.action.stage + 1;
        EXPECT_GE(ta.start, finished.at({ta.action.pass, ta.action.micro_batch, from_stage}));
      }
  }
}

// Activations held (eq. 5): GPipe keeps all n_mb; 1F1B's stage r keeps min(p−r, n_mb), so the
// first stage keeps p micro-batches when n_mb ≥ p; interleaved's first stage keeps
// p·(1 + (p−1)/(p·m)) micro-batches of L/p layers once n_mb ≥ 2p. With n_mb == p Megatron runs all
// forwards first, which holds only the n_mb = p micro-batches there are.
TEST(PipelineSimulation, PeakInFlightFollowsEq5) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(name_of(c));
    const Simulation sim = simulate(build_schedule(c.kind, c.p, c.n_mb, c.m), c.m);
    const double first = sim.ranks[0].peak_stage_equivalents;
    const double eq5 = first_stage_in_flight_formula(c.kind, c.p, c.n_mb, c.m);
    switch (c.kind) {
      case ScheduleKind::gpipe:
        for (const auto& line : sim.ranks) EXPECT_EQ(line.peak_in_flight, c.n_mb);
        EXPECT_DOUBLE_EQ(first, eq5);
        break;
      case ScheduleKind::one_f_one_b:
      case ScheduleKind::zb_h1:
      case ScheduleKind::pipedream_2bw:
        for (int r = 0; r < c.p; ++r) EXPECT_EQ(sim.ranks[size_t(r)].peak_in_flight, std::min(c.p - r, c.n_mb));
        if (c.n_mb >= c.p) {
          EXPECT_DOUBLE_EQ(first, eq5);
        }
        // ZB-H1: counting micro-batches whose weight pass is still to run, every stage holds min(p, n)
        // (1F1B: its in-flight count); what W holds is less than a micro-batch (M_W < M_B).
        for (int r = 0; r < c.p; ++r)
          EXPECT_EQ(sim.ranks[size_t(r)].peak_held, split(c.kind) ? std::min(c.p, c.n_mb) : std::min(c.p - r, c.n_mb));
        break;
      case ScheduleKind::interleaved:
        if (c.n_mb >= 2 * c.p) {
          EXPECT_NEAR(first, eq5, 1e-12);
          EXPECT_EQ(sim.ranks[0].peak_in_flight, c.m * c.p + c.p - 1);  // warm-up + 1 chunk forwards
        } else {
          EXPECT_EQ(sim.ranks[0].peak_in_flight, c.m * c.n_mb);  // n_mb == p: everything in flight
        }
        EXPECT_LE(first, eq5 + 1e-12);
        break;
    }
    for (const auto& line : sim.ranks) EXPECT_DOUBLE_EQ(line.peak_stage_equivalents, double(line.peak_in_flight) / c.m);
  }
}

// Circular waits are reported, not hung on: rank 1 wants micro-batch 1 first while rank 0 waits
// for the gradient of micro-batch 0, which rank 1 sends only after micro-batch 1.
TEST(PipelineSimulation, DetectsDeadlock) {
  auto lists = build_schedule(ScheduleKind::one_f_one_b, 2, 2, 1);
  lists[0] = {lists[0][0], lists[0][2], lists[0][1], lists[0][3]};  // rank 0: F0 B0 F1 B1
  lists[1] = {lists[1][2], lists[1][3], lists[1][0], lists[1][1]};  // rank 1: F1 B1 F0 B0
  ASSERT_EQ(labels(lists[0], 1), "F0 B0 F1 B1");
  ASSERT_EQ(labels(lists[1], 1), "F1 B1 F0 B0");
  const std::string e = error_of([&] { simulate(lists, 1); });
  EXPECT_NE(e.find("pipeline deadlock"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0 B0 waits for rank 1"), std::string::npos) << e;
}

// A weight pass before its input pass, a list mixing whole and split backwards, and an input pass
// whose weight pass never runs are each refused by name.
TEST(PipelineSimulation, DetectsMisplacedWeightPasses) {
  auto lists = build_schedule(ScheduleKind::zb_h1, 1, 2, 1);  // F0 B0 W0 F1 B1 W1
  ASSERT_EQ(labels(lists[0], 1), "F0 B0 W0 F1 B1 W1");
  auto early = lists;
  std::swap(early[0][1], early[0][2]);
  EXPECT_NE(error_of([&] { simulate(early, 1); }).find("W0 runs before its input pass"), std::string::npos);
  auto mixed = lists;
  mixed[0][4].pass = Pass::backward;
  mixed[0].pop_back();
  EXPECT_NE(error_of([&] { simulate(mixed, 1); }).find("mixes whole and split backwards"), std::string::npos);
  auto unfinished = lists;
  unfinished[0].pop_back();
  EXPECT_NE(error_of([&] { simulate(unfinished, 1); }).find("weight passes never run"), std::string::npos);
}

TEST(PipelineSimulation, DetectsBackwardBeforeForwardAndLostMessages) {
  auto lists = build_schedule(ScheduleKind::gpipe, 1, 2, 1);
  std::swap(lists[0][0], lists[0][2]);  // B0 F1 F0 B1
  EXPECT_NE(error_of([&] { simulate(lists, 1); }).find("rank 0 B0 runs before its forward"), std::string::npos);

  lists = build_schedule(ScheduleKind::gpipe, 2, 1, 1);
  lists[1][0].recv_from = kNoPeer;  // rank 1 ignores rank 0's activations
  EXPECT_NE(error_of([&] { simulate(lists, 1); }).find("that no action receives"), std::string::npos);
}

TEST(PipelineSchedule, InvalidInputsNameTheConstraint) {
  const auto err = [](ScheduleKind k, int p, int n, int m) { return error_of([&] { build_schedule(k, p, n, m); }); };
  EXPECT_NE(err(ScheduleKind::one_f_one_b, 0, 4, 1).find("pipeline-model-parallel size must be between 1"),
            std::string::npos);
  EXPECT_NE(err(ScheduleKind::gpipe, 2, 0, 1).find("micro-batches must be between 1"), std::string::npos);
  EXPECT_NE(err(ScheduleKind::interleaved, 2, 4, 0).find("virtual stages must be between 1"), std::string::npos);
  EXPECT_NE(err(ScheduleKind::one_f_one_b, 2, 4, 2).find("virtual stages > 1 need the interleaved schedule"),
            std::string::npos);
  EXPECT_NE(err(ScheduleKind::gpipe, 2, 4, 3).find("need the interleaved schedule"), std::string::npos);
  EXPECT_NE(err(ScheduleKind::interleaved, 4, 8, 1).find("needs virtual stages m >= 2"), std::string::npos);
  EXPECT_NE(err(ScheduleKind::interleaved, 1, 4, 2).find("needs pipeline-model-parallel size p >= 2"),
            std::string::npos);
  EXPECT_NE(err(ScheduleKind::interleaved, 4, 6, 2).find("micro-batches (6) to be a multiple of the "
                                                          "pipeline-model-parallel size p = 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_schedule_kind("pipedream"); }).find("unknown schedule 'pipedream'"),
            std::string::npos);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(err(ScheduleKind::interleaved, 4, 8, 2), "");
}

TEST(PipelineSvg, DrawsEveryActionAndRefusesHugeSchedules) {
  const auto lists = build_schedule(ScheduleKind::interleaved, 4, 8, 2);
  const Simulation sim = simulate(lists, 2);
  const std::string svg = schedule_svg(sim, {ScheduleKind::interleaved, 4, 8, 2, {}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t boxes = 0;
  for (size_t at = svg.find("class='box'"); at != std::string::npos; at = svg.find("class='box'", at + 1)) ++boxes;
  EXPECT_EQ(boxes, size_t(4 * 2 * 8 * 2));
  EXPECT_EQ(svg.find("<-"), std::string::npos) << "markup characters escaped";

  const auto big = build_schedule(ScheduleKind::gpipe, 8, 2000, 1);
  const std::string e = error_of([&] { schedule_svg(simulate(big, 1), {ScheduleKind::gpipe, 8, 2000, 1, {}}); });
  EXPECT_NE(e.find("--svg draws at most"), std::string::npos) << e;
}

// Unequal stages (the output layer on the last one, uneven --pipeline-layers): the simulated GPipe and
// 1F1B step is n·max c + the ramp, analysis::pipeline_ramp_seconds = Σ c − max c, exactly when the last
// stage is the slowest, and never more than that otherwise; equal stages give the classical (p−1)·c.
TEST(PipelineSimulation, UnevenStagesRamp) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.3, 2.0);
  int exact = 0;
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int trial = 0; trial < 120; ++trial) {
      const int p = 2 + trial % 4, n = 1 + (trial * 5) % (3 * p);
      SimulationOptions options;
      options.stage_scale.resize(size_t(p));
      for (double& s : options.stage_scale) s = u(rng);
      options.head_time = trial % 3 == 0 ? 0.0 : u(rng);
      std::vector<double> c(static_cast<size_t>(p), 0.0);  // forward + backward of one micro-batch, rank by rank
      for (int r = 0; r < p; ++r) c[size_t(r)] = options.stage_scale[size_t(r)] * 3.0;
      c.back() += 3.0 * options.head_time;
      const double slowest = *std::max_element(c.begin(), c.end());
      const double formula = n * slowest + analysis::pipeline_ramp_seconds(c, 1);
      const Simulation sim = simulate(build_schedule(kind, p, n, 1), 1, options);
      SCOPED_TRACE("kind " + std::to_string(int(kind)) + " p " + std::to_string(p) + " n " + std::to_string(n));
      if (c.back() == slowest && n >= p) {
        EXPECT_NEAR(sim.total_time, formula, 1e-9);
        ++exact;
      } else {
        EXPECT_LE(sim.total_time, formula + 1e-9);
      }
    }
  EXPECT_GT(exact, 40) << "the exact case was drawn often enough to mean something";
  EXPECT_DOUBLE_EQ(analysis::pipeline_ramp_seconds({2.0, 2.0, 2.0, 2.0}, 1), 3 * 2.0);
  EXPECT_DOUBLE_EQ(analysis::pipeline_ramp_seconds({2.0, 2.0, 2.0, 2.0}, 2), 3 * 2.0 / 2);
  EXPECT_DOUBLE_EQ(analysis::pipeline_ramp_seconds({1.0, 3.0}, 1), 1.0);
}
