#include "report/trace_timeline.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace lattice::parallel::pipeline {

namespace {
Simulation timeline_from_doc(const nlohmann::json& doc, const std::string& path, int p, int m, int step);
}  // namespace

std::string read_trace_file(const std::string& path) {
  return read_regular_file(path, "trace", size_t(1) << 30);
}

Simulation timeline_from_trace(const std::string& path, int p, int m, int step) {
  const std::string text = read_trace_file(path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
    return timeline_from_doc(doc, path, p, m, step);
  } catch (const nlohmann::json::exception& e) {
    fail("trace " + path + " is not a lattice trace (write one with lattice train --trace): " + e.what());
  }
}

namespace {
Simulation timeline_from_doc(const nlohmann::json& doc, const std::string& path, int p, int m, int step) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) fail("trace " + path + " has no traceEvents (write one with lattice train --trace)");
  std::vector<const nlohmann::json*> work;
  int last_step = -1;
  for (const auto& e : doc["traceEvents"]) {
    const std::string cat = e.value("cat", "");
    if ((cat != "forward" && cat != "backward" && cat != "backward_input" && cat != "backward_weight") ||
        !e.contains("args"))
      continue;
    last_step = std::max(last_step, e["args"].value("step", -1));
    work.push_back(&e);
  }
  if (last_step < 0) fail("trace " + path + " has no forward or backward spans (write one with lattice train --trace)");
  if (step < 0) step = last_step;
  Simulation sim;
  sim.ranks.resize(size_t(p));
  // A span's numbers as the trainer writes them: its rank (tid) a small integer, its start and length
  // finite, the length not negative. Anything else is not a lattice trace (a wrapped rank, a bubble
  // past 100% from a negative span).
  const auto number = [&](const nlohmann::json& e, const char* key) {
    const nlohmann::json* v = e.contains(key) ? &e[key] : nullptr;
    if (!v || !v->is_number() || !std::isfinite(v->get<double>()))
      fail("trace " + path + " is not a lattice trace (write one with lattice train --trace): a span's " + key +
           " is not a finite number");
    return v->get<double>();
  };
  double t0 = 1e300;
  for (const auto* e : work)
    if ((*e)["args"].value("step", -1) == step) t0 = std::min(t0, number(*e, "ts"));
  if (t0 == 1e300) fail("trace " + path + " has no forward or backward of step " + std::to_string(step));
  for (const auto* e : work) {
    const auto& a = (*e)["args"];
    if (a.value("step", -1) != step) continue;
    const double tid = number(*e, "tid"), dur = number(*e, "dur");
    if (!(tid >= 0 && tid < p && tid == std::floor(tid)))
      fail("trace " + path + " has a span of rank " + (*e)["tid"].dump() + ", but --pipeline-model-parallel-size is " +
           std::to_string(p) + " (ranks 0 to " + std::to_string(p - 1) + ")");
    if (dur < 0)
      fail("trace " + path + " is not a lattice trace (write one with lattice train --trace): a span of negative "
           "length (dur " + (*e)["dur"].dump() + ")");
    const int rank = int(tid);
    TimedAction t;
    const std::string cat = (*e)["cat"];
    t.action.pass = cat == "forward"          ? Pass::forward
                    : cat == "backward_input"  ? Pass::backward_input
                    : cat == "backward_weight" ? Pass::backward_weight
                                               : Pass::backward;
    t.action.micro_batch = a.value("micro_batch", 0);
    t.action.chunk = std::max(0, a.value("chunk", 0));
    t.action.stage = t.action.chunk * p + rank;
    t.start = (number(*e, "ts") - t0) / 1000.0;
    t.end = t.start + dur / 1000.0;
    sim.ranks[size_t(rank)].actions.push_back(t);
  }
  // Every rank of the layout ran the step: a rank with none is a trace of another layout (or cut).
  for (int r = 0; r < p; ++r)
    if (sim.ranks[size_t(r)].actions.empty())
      fail("trace " + path + " has no forward or backward of step " + std::to_string(step) + " on rank " +
           std::to_string(r) + " of the " + std::to_string(p) + " given: a trace of another layout, or cut short");
  // Time in units of the mean forward of a chunk, so the picture has the simulator's scale.
  double forward_sum = 0;
  int forwards = 0;
  for (const auto& line : sim.ranks)
    for (const auto& t : line.actions)
      if (t.action.pass == Pass::forward) forward_sum += t.end - t.start, ++forwards;
  const double unit = forwards && forward_sum > 0 ? forward_sum / forwards * m : 1.0;
  for (auto& line : sim.ranks)
    for (auto& t : line.actions) t.start /= unit, t.end /= unit;
  for (auto& line : sim.ranks) {
    std::sort(line.actions.begin(), line.actions.end(),
              [](const TimedAction& x, const TimedAction& y) { return x.start < y.start; });
    int in_flight = 0, held = 0;  // forwards not yet run backward; not yet through their weight pass
    for (const auto& t : line.actions) {
      line.busy += t.end - t.start;
      const Pass pass = t.action.pass;
      in_flight += pass == Pass::forward ? 1 : pass == Pass::backward_weight ? 0 : -1;
      held += pass == Pass::forward ? 1 : pass == Pass::backward_input ? 0 : -1;
      line.peak_in_flight = std::max(line.peak_in_flight, in_flight);
      line.peak_held = std::max(line.peak_held, held);
      sim.total_time = std::max(sim.total_time, t.end);
    }
    line.peak_stage_equivalents = double(line.peak_in_flight) / m;
  }
  for (const auto& line : sim.ranks) sim.idle += sim.total_time - line.busy;
  sim.bubble = sim.total_time > 0 ? sim.idle / (p * sim.total_time) : 0.0;
  return sim;
}
}  // namespace

}  // namespace lattice::parallel::pipeline
