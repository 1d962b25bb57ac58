#include "report/simulate.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "analysis/formulas.hpp"
#include "core/error.hpp"

namespace lattice::parallel::pipeline {

namespace {

// A message in flight: who sent it to whom, and which (pass, micro-batch, receiving stage) it feeds.
using MessageKey = std::tuple<int, int, Pass, int, int>;

std::string where(int rank, const Action& a, int m) { return "rank " + std::to_string(rank) + " " + action_label(a, m); }

}  // namespace

Simulation simulate(const std::vector<RankActions>& lists, int m, const SimulationOptions& options) {
  require(m >= 1, "simulate: m must be at least 1");
  require(options.forward_time > 0 && options.backward_time > 0 && options.p2p_latency >= 0 && options.head_time >= 0,
          "simulate: forward and backward times must be positive and the latency non-negative");
  for (const auto& list : lists)
    for (const Action& a : list)
      require(a.pass != Pass::backward_weight || (options.weight_time > 0 && options.weight_time < options.backward_time),
              "--weight-time must be part of --backward-time (0 < weight time < backward time): the backward is "
              "the input pass plus the weight pass");
  require(options.stage_scale.empty() || options.stage_scale.size() == lists.size() * size_t(m),
          "simulate: one time scale per virtual stage");
  const int p = int(lists.size());
  Simulation sim;
  sim.ranks.resize(lists.size());
  std::vector<size_t> next(lists.size(), 0);
  std::vector<double> free_at(lists.size(), 0.0);
  std::vector<int> in_flight(lists.size(), 0);
  std::vector<std::set<std::pair<int, int>>> kept(lists.size());  // (micro-batch, chunk) forwards held
  std::vector<std::set<std::pair<int, int>>> pending(lists.size());  // split backwards awaiting W
  std::vector<int> held(lists.size(), 0);
  std::vector<int> fused(lists.size(), 0), split(lists.size(), 0);
  std::map<MessageKey, double> arrivals;

  size_t remaining = 0;
  for (const auto& l : lists) remaining += l.size();
  // Sweep the ranks, running every action whose input is there. Times need no event queue: an
  // action's start depends only on its rank's previous action and its sender's action, both known.
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = lists[size_t(r)];
      RankTimeline& line = sim.ranks[size_t(r)];
      while (next[size_t(r)] < list.size()) {
        const Action& a = list[next[size_t(r)]];
        if (a.pass == Pass::step_end) break;  // released below, once every rank is there
        double ready = free_at[size_t(r)];
        if (a.recv_from != kNoPeer) {
          auto it = arrivals.find({a.recv_from, r, a.pass, a.micro_batch, a.stage});
          if (it == arrivals.end()) break;  // input not sent yet: try the other ranks
          ready = std::max(ready, it->second);
          arrivals.erase(it);
        }
        const std::pair<int, int> mb{a.micro_batch, a.chunk};
        if (a.pass == Pass::forward) {
          require(kept[size_t(r)].insert(mb).second, where(r, a, m) + " runs a second forward of that micro-batch");
          line.peak_in_flight = std::max(line.peak_in_flight, ++in_flight[size_t(r)]);
          line.peak_held = std::max(line.peak_held, ++held[size_t(r)]);
        } else if (a.pass == Pass::backward_weight) {
          require(pending[size_t(r)].erase(mb) == 1, where(r, a, m) + " runs before its input pass on that rank");
          --held[size_t(r)];
        } else {
          require(kept[size_t(r)].erase(mb) == 1, where(r, a, m) + " runs before its forward on that rank");
          --in_flight[size_t(r)];
          if (a.pass == Pass::backward_input) {
            pending[size_t(r)].insert(mb);
            ++split[size_t(r)];
          } else {
            --held[size_t(r)];
            ++fused[size_t(r)];
          }
          require(fused[size_t(r)] == 0 || split[size_t(r)] == 0, where(r, a, m) + " mixes whole and split backwards");
        }
        const bool forward = a.pass == Pass::forward;
        const double scale = options.stage_scale.empty() ? 1.0 : options.stage_scale[size_t(a.stage)];
        const double base = forward                                ? options.forward_time
                            : a.pass == Pass::backward             ? options.backward_time
                            : a.pass == Pass::backward_input       ? options.backward_time - options.weight_time
                                                                   : options.weight_time;
        double duration = base / m * scale;
        if (a.stage == p * m - 1) duration += (forward ? 1 : a.pass == Pass::backward_weight ? 0 : 2) * options.head_time;
        line.actions.push_back({a, ready, ready + duration});
        line.busy += duration;
        free_at[size_t(r)] = ready + duration;
        if (a.send_to != kNoPeer) {
          require(a.send_to >= 0 && a.send_to < p, where(r, a, m) + " sends to a rank outside the pipeline");
          const int to_stage = a.pass == Pass::forward ? a.stage + 1 : a.stage - 1;
          const bool fresh =
              arrivals.emplace(MessageKey{r, a.send_to, a.pass, a.micro_batch, to_stage}, ready + duration + options.p2p_latency)
                  .second;
          require(fresh, where(r, a, m) + " sends a message that was already sent");
        }
        ++next[size_t(r)];
        --remaining;
        progressed = true;
      }
    }
    // A step's end is a barrier: when every rank waits at one, all go on from the latest.
    bool all_at_end = true;
    double latest = 0;
    for (int r = 0; r < p && all_at_end; ++r) {
      const auto& list = lists[size_t(r)];
      all_at_end = next[size_t(r)] < list.size() && list[next[size_t(r)]].pass == Pass::step_end &&
                   list[next[size_t(r)]].micro_batch == lists[0][next[0]].micro_batch;
      if (all_at_end) latest = std::max(latest, free_at[size_t(r)]);
    }
    if (all_at_end) {
      for (int r = 0; r < p; ++r) free_at[size_t(r)] = latest, ++next[size_t(r)], --remaining;
      sim.step_ends.push_back(latest);
      progressed = true;
    }
    if (!progressed) {
      std::string stuck;
      int shown = 0;
      for (int r = 0; r < p && shown < 4; ++r) {
        if (next[size_t(r)] >= lists[size_t(r)].size()) continue;
        const Action& a = lists[size_t(r)][next[size_t(r)]];
        stuck += (shown++ ? "; " : "") + where(r, a, m) +
                 (a.pass == Pass::step_end ? " waits for the other ranks' step end"
                                           : " waits for rank " + std::to_string(a.recv_from));
      }
      fail("pipeline deadlock: no rank can proceed (" + stuck + ")");
    }
  }
  if (!arrivals.empty()) {
    const auto& [from, to, pass, mb, stage] = arrivals.begin()->first;
    fail("rank " + std::to_string(from) + " sent " + (pass == Pass::forward ? "activations" : "gradients") +
         " of micro-batch " + std::to_string(mb) + " to rank " + std::to_string(to) + " (stage " +
         std::to_string(stage) + ") that no action receives");
  }
  for (int r = 0; r < p; ++r)
    require(in_flight[size_t(r)] == 0, "rank " + std::to_string(r) + " ends with forwards never run backward");
  for (int r = 0; r < p; ++r)
    require(pending[size_t(r)].empty(), "rank " + std::to_string(r) + " ends with weight passes never run");

  for (const auto& line : sim.ranks)
    if (!line.actions.empty()) sim.total_time = std::max(sim.total_time, line.actions.back().end);
  for (auto& line : sim.ranks) {
    line.peak_stage_equivalents = double(line.peak_in_flight) / m;
    sim.idle += sim.total_time - line.busy;
  }
  sim.bubble = sim.total_time > 0 ? sim.idle / (p * sim.total_time) : 0.0;
  return sim;
}

double bubble_formula(ScheduleKind kind, int p, int n_mb, int m, const SimulationOptions& options, int steps) {
  if (kind == ScheduleKind::pipedream_2bw)
    return analysis::pipedream_2bw_bubble_fraction(p, n_mb, {options.forward_time, options.backward_time, 0}, steps);
  if (kind == ScheduleKind::zb_h1)
    return analysis::pipeline_bubble_fraction(
        true, p, n_mb,
        {options.forward_time, options.backward_time - options.weight_time, options.weight_time});
  return analysis::pipeline_bubble_fraction(p, n_mb, kind == ScheduleKind::interleaved ? m : 1);
}

double first_stage_in_flight_formula(ScheduleKind kind, int p, int n_mb, int m) {
  switch (kind) {
    case ScheduleKind::gpipe: return n_mb;
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1:
    case ScheduleKind::pipedream_2bw: return p;
    case ScheduleKind::interleaved: return p * (1.0 + double(p - 1) / (double(p) * m));
  }
  return 0;
}

}  // namespace lattice::parallel::pipeline
