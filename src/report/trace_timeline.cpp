#include "report/trace_timeline.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace lattice::parallel::pipeline {

namespace {

bool same_layout(const TraceLayout& a, const TraceLayout& b, bool world_too) {
  return parse_schedule_kind(a.schedule) == parse_schedule_kind(b.schedule) && a.pp == b.pp && a.virtual_stages == b.virtual_stages &&
         a.micro_batches == b.micro_batches && (!world_too || a.world == b.world);
}

Pass pass_of(Trace::Kind kind) {
  return kind == Trace::Kind::forward          ? Pass::forward
         : kind == Trace::Kind::backward_input  ? Pass::backward_input
         : kind == Trace::Kind::backward_weight ? Pass::backward_weight
                                                : Pass::backward;
}

// A pass in words, every field a comparison reads: "the input backward of micro-batch 0, chunk 1".
std::string pass_text(const Action* a) {
  if (!a) return "nothing";
  const char* name = a->pass == Pass::forward          ? "the forward"
                     : a->pass == Pass::backward_input  ? "the input backward"
                     : a->pass == Pass::backward_weight ? "the weight backward"
                                                        : "the backward";
  return std::string(name) + " of micro-batch " + std::to_string(a->micro_batch) + ", chunk " + std::to_string(a->chunk);
}

// Where the row's passes (in the trace's start order) first differ from `list`; -1 when they are it.
long first_difference(const RankTimeline& row, const RankActions& list) {
  const size_t n = std::min(row.actions.size(), list.size());
  for (size_t i = 0; i < n; ++i) {
    const Action& a = row.actions[i].action;
    if (a.pass != list[i].pass || a.micro_batch != list[i].micro_batch || a.chunk != list[i].chunk) return long(i);
  }
  return row.actions.size() == list.size() ? -1 : long(n);
}

// The row's passes against its pipeline rank's lists (one for a flushing schedule; PipeDream-2BW's
// four kinds of step, of which the row must be one), named at the first difference from the first.
void check_order(const RankTimeline& row, const std::vector<const RankActions*>& lists, int world_rank,
                 const std::string& path, const TraceLayout& layout) {
  long at = -1;
  for (size_t k = 0; k < lists.size(); ++k) {
    const long d = first_difference(row, *lists[k]);
    if (d < 0) return;
    if (k == 0) at = d;
  }
  const size_t i = size_t(at);
  const RankActions& list = *lists.front();
  fail("trace " + path + ": rank " + std::to_string(world_rank) + "'s pass " + std::to_string(i + 1) + " is " +
       pass_text(i < row.actions.size() ? &row.actions[i].action : nullptr) + " where " +
       (lists.size() > 1 ? "a steady step of " : "") + describe(layout) + " runs " +
       pass_text(i < list.size() ? &list[i] : nullptr) + ": a trace of another layout, or cut short");
}

}  // namespace

Simulation timeline_from_trace(const std::string& path, const TraceLayout& given_layout, int step, bool every_rank) {
  const TraceFile file = read_trace(path);
  TraceLayout given = given_layout;
  if (file.layout) {
    if (!same_layout(*file.layout, given, given.world != 0))
      fail("trace " + path + " ran " + describe(*file.layout) + ", not " + describe(given) +
           ": a trace of another run or layout");
    if (!given.start_id.empty() && !file.layout->start_id.empty() && given.start_id != file.layout->start_id)
      fail("trace " + path + " is of another run, or of this one before a resume (start id " + file.layout->start_id +
           ", not " + given.start_id + ")");
    given.world = file.layout->world;
  } else if (given.world == 0) {
    given.world = given.pp;  // an older trace: its tracks are the pipeline's ranks
  }
  const int p = given.pp, m = given.virtual_stages, world = given.world;
  const ScheduleKind kind = parse_schedule_kind(given.schedule);
  if (world % p != 0) fail("trace " + path + ": " + describe(given) + " is not a layout (pp does not divide the world)");
  const int per_stage = world / p;  // world ranks of one pipeline rank
  const auto is_pass = [](Trace::Kind k) {
    return k == Trace::Kind::forward || k == Trace::Kind::backward || k == Trace::Kind::backward_input ||
           k == Trace::Kind::backward_weight;
  };
  int64_t last_step = -1;
  bool passes = false;
  for (const TraceFileSpan& s : file.spans)
    if (is_pass(s.kind)) last_step = std::max(last_step, s.step), passes = true;
  if (!passes) fail("trace " + path + " has no forward or backward spans (write one with lattice train --trace)");
  if (last_step < 0)
    fail("trace " + path + "'s forward and backward spans carry no step (args.step): not written by lattice train --trace");
  const int64_t want = step < 0 ? last_step : step;
  // The rows: world ranks (every_rank) or each pipeline rank's first.
  const int rows = every_rank ? world : p;
  const auto row_of = [&](int rank) { return every_rank ? rank : rank % per_stage == 0 ? rank / per_stage : -1; };
  const auto rank_of_row = [&](int row) { return every_rank ? row : row * per_stage; };
  int64_t t0 = INT64_MAX;
  for (const TraceFileSpan& s : file.spans) {
    if (!is_pass(s.kind) || s.step != want) continue;
    if (s.rank >= world)
      fail("trace " + path + " has a span of rank " + std::to_string(s.rank) + ", but " + describe(given) +
           " has ranks 0 to " + std::to_string(world - 1));
    if (row_of(s.rank) >= 0) t0 = std::min(t0, s.start);
  }
  if (t0 == INT64_MAX) fail("trace " + path + " has no forward or backward of step " + std::to_string(want));
  Simulation sim;
  sim.ranks.resize(size_t(rows));
  for (const TraceFileSpan& s : file.spans) {
    if (!is_pass(s.kind) || s.step != want || row_of(s.rank) < 0) continue;
    if (s.micro_batch >= given.micro_batches || s.chunk >= m)
      fail("trace " + path + " has a pass of micro-batch " + std::to_string(s.micro_batch) + ", chunk " +
           std::to_string(s.chunk) + " on rank " + std::to_string(s.rank) + ", past " + describe(given) +
           ": a trace of another layout");
    const int row = row_of(s.rank), pipeline_rank = every_rank ? s.rank / per_stage : row;
    TimedAction t;
    t.action.pass = pass_of(s.kind);
    t.action.micro_batch = int(std::max<int64_t>(0, s.micro_batch));
    t.action.chunk = int(std::max<int64_t>(0, s.chunk));
    t.action.stage = t.action.chunk * p + pipeline_rank;
    t.start = double(s.start - t0) * 1e-6;  // ms, rescaled below
    t.end = double(s.end - t0) * 1e-6;
    sim.ranks[size_t(row)].actions.push_back(t);
  }
  for (auto& line : sim.ranks)
    std::stable_sort(line.actions.begin(), line.actions.end(),
                     [](const TimedAction& x, const TimedAction& y) { return x.start < y.start; });
  for (int row = 0; row < rows; ++row) {  // a missing row first: it says more than a row's order
    const RankTimeline& line = sim.ranks[size_t(row)];
    if (line.actions.empty())
      fail("trace " + path + " has no forward or backward of step " + std::to_string(want) + " on rank " +
           std::to_string(rank_of_row(row)) + " of the " + std::to_string(world) + " of " + describe(given) +
           ": a trace of another layout, or cut short");
    // One thread's passes follow each other: overlapping ones are not a rank's (a bubble below 0).
    for (size_t i = 1; i < line.actions.size(); ++i)
      if (line.actions[i].start < line.actions[i - 1].end)
        fail("trace " + path + ": on rank " + std::to_string(rank_of_row(row)) + " " +
             pass_text(&line.actions[i].action) + " starts before " + pass_text(&line.actions[i - 1].action) +
             " ends (not one thread's spans)");
  }
  // Every row ran the step as the layout's schedule runs it: a row that did not is a trace of
  // another layout, or one cut short. PipeDream-2BW's steps differ (the first defers backwards, the
  // last drains them): a row must be one of its four.
  // One stage runs each micro-batch's forward and backward in turn whatever --schedule says (the
  // trainer's gradient accumulation, not the pipeline executor): 1F1B's order at p = 1.
  std::vector<std::vector<RankActions>> kinds_of_step;
  if (p == 1)
    kinds_of_step.push_back(build_schedule(ScheduleKind::one_f_one_b, 1, given.micro_batches, 1));
  else if (kind == ScheduleKind::pipedream_2bw)
    for (Phase phase : {Phase::steady, Phase::first, Phase::last, Phase::whole})
      kinds_of_step.push_back(build_step_schedule(kind, p, given.micro_batches, m, phase));
  else
    kinds_of_step.push_back(build_schedule(kind, p, given.micro_batches, m));
  for (int row = 0; row < rows; ++row) {
    const size_t pipeline_rank = size_t(every_rank ? row / per_stage : row);
    std::vector<const RankActions*> lists;
    for (const auto& step_lists : kinds_of_step) lists.push_back(&step_lists[pipeline_rank]);
    check_order(sim.ranks[size_t(row)], lists, rank_of_row(row), path, given);
  }
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
  sim.bubble = sim.total_time > 0 ? sim.idle / (rows * sim.total_time) : 0.0;
  return sim;
}

}  // namespace lattice::parallel::pipeline
