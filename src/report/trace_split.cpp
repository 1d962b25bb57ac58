#include "report/trace_split.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "report/trace_file.hpp"

namespace lattice {

namespace {

using Kind = Trace::Kind;

enum Part { gemm, elementwise, recompute, tp_comm, ep_comm, cp_comm, pp_comm, bubble, dp_comm, optimizer, other, kParts };

struct Span {
  Kind kind;
  int64_t start, end;  // ns from the file's origin
  int64_t step;        // args.step, -1 when absent
};

// Where a span's own time goes, given what encloses it (see trace_split.hpp).
Part part_of(Kind kind, Kind parent, bool in_recompute, bool in_drain) {
  if (kind == Kind::comm_dp || kind == Kind::comm_embedding) return dp_comm;
  if (in_recompute || kind == Kind::recompute) return recompute;
  if (in_drain || kind == Kind::send) return bubble;
  if (kind == Kind::comm_pp && parent == Kind::step) return bubble;  // the stages waiting for each other
  switch (kind) {
    case Kind::gemm: return gemm;
    case Kind::comm_tp: return tp_comm;
    case Kind::comm_ep: return ep_comm;
    case Kind::comm_cp: return cp_comm;
    case Kind::comm_pp:
    case Kind::receive: return pp_comm;
    case Kind::receive_wait: return bubble;
    case Kind::forward:
    case Kind::backward:
    case Kind::backward_input:
    case Kind::backward_weight: return elementwise;
    case Kind::optimizer: return optimizer;
    default: return other;  // step, comm_other
  }
}

// Outer kinds first when two spans start and end at the same nanosecond.
int depth_order(Kind kind) {
  switch (kind) {
    case Kind::step: return 0;
    case Kind::optimizer:
    case Kind::send: return 1;
    case Kind::forward:
    case Kind::backward:
    case Kind::backward_input:
    case Kind::backward_weight:
    case Kind::receive: return 2;
    case Kind::recompute: return 3;
    case Kind::gemm:
    case Kind::receive_wait: return 5;
    default: return 4;  // comm
  }
}


// Every rank's spans, by rank (the track's tid), from the file read and checked once.
std::map<int, std::vector<Span>> spans_by_rank(const TraceFile& file) {
  std::map<int, std::vector<Span>> ranks;
  for (const TraceFileSpan& s : file.spans) ranks[s.rank].push_back({s.kind, s.start, s.end, s.step});
  return ranks;
}

// One rank's split of the step whose span is `root`, from its spans in any order; `source` names
// them in errors ("trace PATH").
StepSplit split_rank(const std::vector<Span>& all, const Span& root, int rank, const std::string& source) {
  // The step's spans, outer before inner; then a stack of the open ones gives each its parent.
  std::vector<const Span*> inside;
  for (const Span& s : all)
    if (&s != &root && s.start >= root.start && s.end <= root.end) inside.push_back(&s);
  std::sort(inside.begin(), inside.end(), [](const Span* x, const Span* y) {
    if (x->start != y->start) return x->start < y->start;
    if (x->end != y->end) return x->end > y->end;
    return depth_order(x->kind) < depth_order(y->kind);
  });
  struct Open {
    const Span* span;
    Part part;
    bool in_recompute, in_drain;
  };
  std::array<int64_t, kParts> ns{};
  std::vector<Open> open{{&root, other, false, false}};
  ns[other] += root.end - root.start;
  for (const Span* s : inside) {
    while (open.size() > 1 && open.back().span->end <= s->start) open.pop_back();
    const Open& parent = open.back();
    if (s->end > parent.span->end)
      fail(source + ": on rank " + std::to_string(rank) + " a " + Trace::name(s->kind) + " span overlaps a " +
           Trace::name(parent.span->kind) + " span without nesting in it (not one thread's spans)");
    if (s->kind == Kind::step) fail(source + " has a step span inside another on rank " + std::to_string(rank));
    const bool in_recompute = parent.in_recompute || parent.span->kind == Kind::recompute;
    const bool in_drain = parent.in_drain || parent.span->kind == Kind::send;
    const Part part = part_of(s->kind, parent.span->kind, in_recompute, in_drain);
    // Its time leaves its parent's part (the parent's own time is what its children leave).
    ns[part] += s->end - s->start;
    ns[parent.part] -= s->end - s->start;
    open.push_back({s, part, in_recompute, in_drain});
  }
  StepSplit r;
  r.rank = rank, r.step = root.step;
  const int64_t total = root.end - root.start;
  r.step_s = double(total) * 1e-9;
  int64_t listed = 0;
  for (int p = 0; p < kParts; ++p)
    if (p != other) listed += ns[size_t(p)];
  const auto s = [&](Part p) { return double(ns[size_t(p)]) * 1e-9; };
  r.gemm_s = s(gemm), r.elementwise_s = s(elementwise), r.recompute_s = s(recompute), r.tp_comm_s = s(tp_comm);
  r.ep_comm_s = s(ep_comm), r.cp_comm_s = s(cp_comm), r.pp_comm_s = s(pp_comm), r.bubble_s = s(bubble), r.dp_comm_s = s(dp_comm);
  r.optimizer_s = s(optimizer);
  r.other_s = double(total - listed) * 1e-9;  // = ns[other]: the parts tile the step
  return r;
}

std::vector<StepSplit> split_file(const TraceFile& file, const std::string& path, int step) {
  const std::map<int, std::vector<Span>> ranks = spans_by_rank(file);
  int64_t first = INT64_MAX, last = -1;
  for (const auto& [rank, spans] : ranks)
    for (const Span& s : spans)
      if (s.kind == Kind::step) first = std::min(first, s.step), last = std::max(last, s.step);
  if (last < 0)
    fail("trace " + path + " has no step spans (written by an older lattice: trace the run again to split its steps)");
  const int64_t want = step < 0 ? last : step;
  if (want < first || want > last)
    fail("trace " + path + " has no step " + std::to_string(want) + " (it holds steps " + std::to_string(first) +
         " to " + std::to_string(last) + ")");
  if (file.layout)  // every rank of the run it records: a rank with no spans is a trace cut short
    for (int rank = 0; rank < file.layout->world; ++rank)
      if (!ranks.count(rank))
        fail("trace " + path + " has no spans of rank " + std::to_string(rank) + " of the " +
             std::to_string(file.layout->world) + " it records: cut short");
  std::vector<StepSplit> out;
  for (const auto& [rank, all] : ranks) {
    const Span* root = nullptr;
    for (const Span& s : all)
      if (s.kind == Kind::step && s.step == want) {
        if (root)
          fail("trace " + path + " has two spans of step " + std::to_string(want) + " on rank " + std::to_string(rank));
        root = &s;
      }
    if (!root) fail("trace " + path + " has no step " + std::to_string(want) + " on rank " + std::to_string(rank));
    out.push_back(split_rank(all, *root, rank, "trace " + path));
  }
  return out;
}

}  // namespace

std::vector<StepSplit> split_step(const std::string& trace_path, int step) {
  return split_file(read_trace(trace_path), trace_path, step);
}

std::optional<StepSplit> split_recorded_step(const std::vector<int64_t>& events, size_t from, int64_t step) {
  std::vector<Span> spans;
  for (size_t i = from - from % 6; i + 6 <= events.size(); i += 6)
    spans.push_back({Kind(events[i]), events[i + 1], events[i + 2], events[i + 5]});
  for (const Span& s : spans)
    if (s.kind == Kind::step && s.step == step) return split_rank(spans, s, 0, "this rank's trace");
  return std::nullopt;
}

StepShares shares_of(const StepSplit& s) {
  StepShares r;
  r.step_s = s.step_s;
  r.comm_wait_s = s.tp_comm_s + s.ep_comm_s + s.cp_comm_s + s.pp_comm_s + s.dp_comm_s;
  r.bubble_s = s.bubble_s;
  r.compute_s = s.step_s - r.comm_wait_s - r.bubble_s;  // the parts tile the step
  return r;
}

const std::vector<SplitPart>& split_parts() {
  static const std::vector<SplitPart> parts = {
      {"gemm", &StepSplit::gemm_s},           {"elementwise", &StepSplit::elementwise_s},
      {"recompute", &StepSplit::recompute_s}, {"tp_comm", &StepSplit::tp_comm_s},
      {"ep_comm", &StepSplit::ep_comm_s},     {"cp_comm", &StepSplit::cp_comm_s},
      {"pp_comm", &StepSplit::pp_comm_s},
      {"bubble", &StepSplit::bubble_s},       {"dp_comm", &StepSplit::dp_comm_s},
      {"optimizer", &StepSplit::optimizer_s}, {"other", &StepSplit::other_s}};
  return parts;
}

}  // namespace lattice
