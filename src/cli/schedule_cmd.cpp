// lattice schedule: a pipeline schedule simulated without a model — bubble beside the formula,
// activations held per stage beside eq. 5, the action lists, and the timeline as an SVG; or, with
// --from-trace FILE --split, a real step's time per rank in the planner's parts (report/trace_split.hpp).
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/formulas.hpp"
#include "core/output_path.hpp"
#include "core/svg.hpp"
#include "core/error.hpp"
#include "core/stage_partition.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "engine/schedule.hpp"
#include "report/schedule_svg.hpp"
#include "report/simulate.hpp"
#include "report/trace_split.hpp"
#include "report/trace_timeline.hpp"

namespace lattice::cli {

namespace {

namespace pl = parallel::pipeline;

// The simulator's pass times and stage sizes: a trace's are measured (--from-trace, --split refuse them).
constexpr const char* kSimulatedTimeFlags[] = {"--forward-time", "--backward-time", "--weight-time",
                                               "--p2p-latency",  "--head-time",     "--pipeline-layers"};

constexpr size_t kListedActionsPerRank = 32;  // action lists are printed unasked up to this size
constexpr int kListedRanks = 8;

std::vector<std::string> action_texts(const pl::RankActions& list, int m) {
  std::vector<std::string> out;
  for (const auto& a : list) out.push_back(pl::describe_action(a, m));
  return out;
}

std::string formula_text(pl::ScheduleKind kind) {
  if (kind == pl::ScheduleKind::pipedream_2bw) return "1-S*n(F+B)/(S(n(F+B)+(p-1)F)+(p-1)B)";
  if (kind == pl::ScheduleKind::zb_h1) return "(p-1)(F+B-W)/(n(F+B+W)+(p-1)(F+B-W))";
  return kind == pl::ScheduleKind::interleaved ? "(p-1)/(m*n+p-1)" : "(p-1)/(n+p-1)";
}

std::string eq5_text(pl::ScheduleKind kind) {
  switch (kind) {
    case pl::ScheduleKind::gpipe: return "n_mb";
    case pl::ScheduleKind::one_f_one_b:
    case pl::ScheduleKind::zb_h1:
    case pl::ScheduleKind::pipedream_2bw: return "p";
    case pl::ScheduleKind::interleaved: return "p*(1+(p-1)/(p*m))";
  }
  return "";
}

// --split: the step's parts per rank, seconds and share of the step (a row per part, a column per rank).
int print_split(const std::string& path, int trace_step, bool json) {
  const std::vector<StepSplit> ranks = split_step(path, trace_step);
  if (json) {
    nlohmann::ordered_json j;
    j["event"] = "trace_split";
    j["trace"] = path;
    j["step"] = ranks.front().step;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const StepSplit& r : ranks) {
      nlohmann::ordered_json o;
      o["rank"] = r.rank;
      o["step_s"] = r.step_s;
      for (const SplitPart& part : split_parts()) o[std::string(part.name) + "_s"] = r.*part.seconds;
      list.push_back(o);
    }
    j["ranks"] = list;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("step %lld of %s: seconds per part, and %% of the step, on each rank\n",
              static_cast<long long>(ranks.front().step), path.c_str());
  std::printf("%-12s", "part");
  for (const StepSplit& r : ranks) std::printf("  %17s", ("rank " + std::to_string(r.rank)).c_str());
  std::printf("\n%-12s", "step");
  for (const StepSplit& r : ranks) std::printf("  %10.6f 100.0%%", r.step_s);
  std::printf("\n");
  for (const SplitPart& part : split_parts()) {
    std::printf("%-12s", part.name);
    for (const StepSplit& r : ranks)
      std::printf("  %10.6f %5.1f%%", r.*part.seconds, r.step_s > 0 ? 100 * (r.*part.seconds) / r.step_s : 0.0);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int run_schedule(int argc, char** argv) {
  CLI::App app{"simulate a pipeline schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, PipeDream-2BW): bubble, "
               "activations held, timeline"};
  app.name("lattice schedule");
  int p = 0, n_mb = 0, m = 1;
  std::string kind_name = "1f1b", svg;
  bool json = false, list_actions = false;
  pl::SimulationOptions options;
  // Required unless --split (checked after parsing, worded as the parser words it).
  auto* p_flag = app.add_option("--pipeline-model-parallel-size", p, "pipeline ranks p (required unless --split)");
  auto* n_mb_flag = app.add_option("--micro-batches", n_mb, "micro-batches per step n_mb (required unless --split)");
  app.add_option("--schedule", kind_name, "gpipe | 1f1b | interleaved | zb-h1 | pipedream-2bw")->capture_default_str();
  int steps = 1;
  app.add_option("--steps", steps,
                 "pipedream-2bw: simulate this many steps, each ending in the trainer's barrier, with one drain "
                 "at the end (the other schedules flush every step, so every step is alike)")
      ->capture_default_str();
  app.add_option("--virtual-stages,--virtual-pipeline-model-parallel-size", m,
                 "model chunks per rank m (interleaved only)")
      ->capture_default_str();
  app.add_option("--forward-time", options.forward_time, "forward time of one stage (L/p layers)")
      ->capture_default_str();
  app.add_option("--backward-time", options.backward_time, "backward time of one stage")->capture_default_str();
  app.add_option("--weight-time", options.weight_time,
                 "zb-h1: the part of the backward time that is the weight-gradient pass W")
      ->capture_default_str();
  app.add_option("--p2p-latency", options.p2p_latency, "time from a send to its receive")->capture_default_str();
  std::string stage_layers;
  app.add_option("--pipeline-layers", stage_layers,
                 "layers per virtual stage, e.g. 3,4,4,1: each stage's times scale with its share of L/(p·m)");
  app.add_option("--head-time", options.head_time,
                 "forward time of the output layer on the last stage (its backward: twice that)")
      ->capture_default_str();
  app.add_option("--svg", svg, "draw the timeline into this SVG file");
  std::string from_trace;
  int trace_step = -1;
  app.add_option("--from-trace", from_trace,
                 "measure and draw a real run's step from its lattice train --trace file instead of simulating");
  app.add_option("--trace-step", trace_step,
                 "which optimizer step of the trace, from 0 (train's step 1 is 0; default: the last)");
  bool split = false;
  app.add_flag("--split", split,
               "with --from-trace: the step's time on each rank in the planner's parts (GEMM, element-wise, "
               "recompute, TP/EP/PP comm, bubble, DP comm, optimizer, other); needs no pipeline flags");
  app.add_flag("--actions", list_actions, "print every rank's action list (printed anyway when small)");
  app.add_flag("--json", json, "print one JSON object on one line");
  bool overwrite = false;
  add_overwrite_flag(app, overwrite);
  if (auto status = parse_flags(app, argc, argv)) return *status;
  const OutputRules rules{overwrite, {{"--from-trace", from_trace}}, {}};
  for (const CLI::Option* flag : {p_flag, n_mb_flag})
    if (!split && flag->count() == 0) {
      std::fprintf(stderr, "lattice schedule: error: %s is required\n", flag->get_name().c_str());
      return 2;
    }
  if (split) {
    require(!from_trace.empty(), "--split needs --from-trace FILE");
    require(trace_step >= -1, "--trace-step must be >= 0");
    require(svg.empty() && !list_actions, "--split prints the split only (no --svg or --actions)");
    // The split reads every rank's step as it ran: a layout or times given with it would be ignored.
    const auto refuse = [&](const char* ignored) {
      require(app.count(ignored) == 0, std::string(ignored) +
                                           " does not apply with --split (it splits each rank's step as the trace "
                                           "recorded it, whatever the layout)");
    };
    for (const char* layout_flag :
         {"--pipeline-model-parallel-size", "--micro-batches", "--schedule", "--steps", "--virtual-stages"})
      refuse(layout_flag);
    for (const char* simulated : kSimulatedTimeFlags) refuse(simulated);
    return print_split(from_trace, trace_step, json);
  }

  // A pass that takes no time has no place on the timeline (the simulator divides by them): forward
  // and backward above 0, the rest from 0.
  for (const auto& [flag, value, positive] :
       {std::tuple<const char*, double, bool>{"--forward-time", options.forward_time, true},
        {"--backward-time", options.backward_time, true}, {"--p2p-latency", options.p2p_latency, false},
        {"--head-time", options.head_time, false}, {"--weight-time", options.weight_time, false}})
    require(std::isfinite(value) && (positive ? value > 0 : value >= 0) && value <= 1e12,
            std::string(flag) + " must be a finite number of time units " +
                (positive ? "above 0 and at most 1e12" : "between 0 and 1e12"));
  if (!svg.empty()) check_output_path(svg, OutputKind::svg, "--svg", rules);
  require(trace_step == -1 || !from_trace.empty(), "--trace-step needs --from-trace FILE");
  require(trace_step >= -1, "--trace-step must be >= 0");
  const pl::ScheduleKind kind = pl::parse_schedule_kind(kind_name);
  require(steps >= 1 && steps <= 1000, "--steps must be between 1 and 1000");
  require(steps == 1 || kind == pl::ScheduleKind::pipedream_2bw,
          "--steps needs --schedule pipedream-2bw (the other schedules flush: every step is the same)");
  require(steps == 1 || from_trace.empty(), "--steps cannot be used with --from-trace (it reads one step)");
  // Flags the rest of the line would ignore: the weight pass is ZB-H1's alone, and a trace is
  // measured, not simulated from these times.
  require(app.count("--weight-time") == 0 || kind == pl::ScheduleKind::zb_h1 || !from_trace.empty(),
          "--weight-time applies to --schedule zb-h1 only (its weight-gradient pass; got --schedule " + kind_name + ")");
  for (const char* simulated : kSimulatedTimeFlags)
    require(from_trace.empty() || app.count(simulated) == 0,
            std::string(simulated) + " does not apply with --from-trace (the trace's times are measured, not simulated)");
  std::vector<pl::Phase> phases;
  for (int t = 0; t < steps; ++t) phases.push_back(pl::step_phase(t == 0, t == steps - 1));
  const auto lists = kind == pl::ScheduleKind::pipedream_2bw ? pl::build_run(kind, p, n_mb, m, phases)
                                                             : pl::build_schedule(kind, p, n_mb, m);
  if (!svg.empty() && from_trace.empty()) {  // refused before the simulation, which can take seconds
    size_t actions = 0;
    for (const auto& rank : lists) actions += rank.size();
    require(actions <= size_t(pl::kMaxSvgActions), "--svg draws at most " + std::to_string(pl::kMaxSvgActions) +
                                                       " actions (this schedule has " + std::to_string(actions) + ")");
  }
  if (!stage_layers.empty()) {
    const std::vector<int> counts = parse_layer_counts(stage_layers, "--pipeline-layers");
    require(int64_t(counts.size()) == int64_t(p) * m, "--pipeline-layers " + stage_layers + " gives " +
                                                         std::to_string(counts.size()) + " stages; p·m = " +
                                                         std::to_string(int64_t(p) * m));
    double layers = 0;
    for (int c : counts) layers += c;
    for (int c : counts) options.stage_scale.push_back(c * double(counts.size()) / layers);
  }
  // A trace is checked against the layout given (its recorded layout, its passes: trace_timeline.hpp).
  const pl::Simulation sim =
      from_trace.empty() ? pl::simulate(lists, m, options)
                         : pl::timeline_from_trace(from_trace, TraceLayout{pl::schedule_name(kind), 0, p, m, n_mb, ""},
                                                   trace_step);
  const double formula = pl::bubble_formula(kind, p, n_mb, m, options, steps);
  const double ideal = double(steps) * n_mb * (options.forward_time + options.backward_time);
  const double eq5 = pl::first_stage_in_flight_formula(kind, p, n_mb, m);
  if (!svg.empty()) {
    pl::TimelineCaption caption{kind, p, n_mb, m, options, steps};
    caption.measured = !from_trace.empty();
    write_output_file(svg, OutputKind::svg, "--svg", svg::signed_document(pl::schedule_svg(sim, caption)), rules);
  }

  std::vector<int> peak;
  std::vector<double> peak_layers;
  for (const auto& line : sim.ranks) {
    peak.push_back(line.peak_in_flight);
    peak_layers.push_back(line.peak_stage_equivalents);
  }
  bool small = p <= kListedRanks;
  for (const auto& list : lists) small = small && list.size() <= kListedActionsPerRank;

  if (json) {
    nlohmann::ordered_json j;
    j["event"] = "schedule";
    j["schedule"] = pl::schedule_name(kind);
    j["p"] = p;
    j["micro_batches"] = n_mb;
    j["virtual_stages"] = m;
    j["bubble"] = sim.bubble;
    j["bubble_formula"] = formula;
    j["total_time"] = sim.total_time;
    if (from_trace.empty()) j["ideal_time"] = ideal;  // the simulator's times: a trace has its own
    if (steps > 1) j["steps"] = steps;
    j["peak_in_flight"] = peak;                 // chunk micro-batches held, per rank
    j["peak_in_flight_stages"] = peak_layers;   // the same in micro-batches of L/p layers
    if (kind == pl::ScheduleKind::zb_h1) {       // also those whose weight pass is still to run
      std::vector<int> held;
      for (const auto& line : sim.ranks) held.push_back(line.peak_held);
      j["peak_held"] = held;
      j["weight_time"] = options.weight_time;
    }
    j["first_stage_formula"] = eq5;             // eq. 5, in micro-batches of L/p layers
    if (from_trace.empty()) {
      j["forward_time"] = options.forward_time;
      j["backward_time"] = options.backward_time;
      j["p2p_latency"] = options.p2p_latency;
    } else {
      j["trace"] = from_trace;  // times in units of a stage's mean forward, measured
    }
    if (!options.stage_scale.empty()) j["stage_scale"] = options.stage_scale;
    if (sim.step_ends.size() >= 3) {  // a steady step of PipeDream-2BW: between the first two step ends
      const double steady = sim.step_ends[1] - sim.step_ends[0];
      j["steady_step_time"] = steady;
      j["steady_bubble"] = 1.0 - n_mb * (options.forward_time + options.backward_time) / steady;
      j["steady_bubble_formula"] = analysis::pipedream_2bw_steady_bubble_fraction(
          p, n_mb, {options.forward_time, options.backward_time, 0});
    }
    if (options.head_time > 0) j["head_time"] = options.head_time;
    if (list_actions) {
      nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
      for (const auto& list : lists) ranks.push_back(action_texts(list, m));
      j["actions"] = ranks;
    }
    if (!svg.empty()) j["svg"] = svg;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  char times[160];
  if (from_trace.empty())
    std::snprintf(times, sizeof times, "forward %g, backward %g per stage, p2p latency %g", options.forward_time,
                  options.backward_time, options.p2p_latency);
  else
    std::snprintf(times, sizeof times, "measured in %s", from_trace.size() < 120 ? from_trace.c_str() : "the trace");
  std::printf("%s schedule: p = %d ranks, %d micro-batches%s, %d chunk%s per rank (%s)\n", pl::schedule_name(kind), p,
              n_mb, steps > 1 ? (" a step, " + std::to_string(steps) + " steps").c_str() : "", m, m > 1 ? "s" : "",
              times);
  char ideal_text[48] = "";
  if (from_trace.empty()) std::snprintf(ideal_text, sizeof ideal_text, " (ideal %g)", ideal);
  std::printf("bubble: %.2f%% %s, %.2f%% by %s; total time %g%s\n", 100 * sim.bubble,
              from_trace.empty() ? "simulated" : "measured in the trace (time in mean stage forwards)",
              100 * formula, formula_text(kind).c_str(), sim.total_time, ideal_text);
  if (sim.step_ends.size() >= 3) {
    const double steady = sim.step_ends[1] - sim.step_ends[0];
    std::printf("steady step: time %g, bubble %.2f%% simulated, %.2f%% by (p-1)F/(n(F+B)+(p-1)F)\n", steady,
                100 * (1.0 - n_mb * (options.forward_time + options.backward_time) / steady),
                100 * analysis::pipedream_2bw_steady_bubble_fraction(p, n_mb,
                                                                      {options.forward_time, options.backward_time, 0}));
  }
  std::printf("peak in-flight micro-batches (activations held)%s:\n",
              m > 1 ? ", in chunks of L/(p*m) layers and in stages of L/p layers" : "");
  for (int r = 0; r < p; ++r) {
    const auto& line = sim.ranks[size_t(r)];
    if (m > 1)
      std::printf("  rank %d: %d chunks = %g x L/p layers", r, line.peak_in_flight, line.peak_stage_equivalents);
    else
      std::printf("  rank %d: %d", r, line.peak_in_flight);
    if (r == 0) std::printf("    (eq. 5, first stage: %s = %g)", eq5_text(kind).c_str(), eq5);
    std::printf("\n");
  }
  if (list_actions || small) {
    std::printf("actions (F/B micro-batch[.chunk], <-rank received from, ->rank sent to):\n");
    for (int r = 0; r < p; ++r) {
      std::string text;
      for (const auto& s : action_texts(lists[size_t(r)], m)) text += (text.empty() ? "" : " | ") + s;
      std::printf("  rank %d: %s\n", r, text.c_str());
    }
  }
  if (!svg.empty()) std::printf("wrote %s\n", svg.c_str());
  return 0;
}

}  // namespace lattice::cli
