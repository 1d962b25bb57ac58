#include "engine/schedule.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "core/error.hpp"

namespace lattice::parallel::pipeline {

namespace {

constexpr int kMaxPipeline = 4096, kMaxMicroBatches = 1 << 20, kMaxChunks = 1024, kMaxActions = 1 << 22;

std::string n(int v) { return std::to_string(v); }

// The action of `pass` for `micro_batch` on model chunk `chunk` of `rank`, with the peers its
// input comes from and its output goes to: the neighbouring global virtual stages.
Action make_action(Pass pass, int micro_batch, int chunk, int rank, int p, int m) {
  Action a;
  a.pass = pass;
  a.micro_batch = micro_batch;
  a.chunk = chunk;
  a.stage = chunk * p + rank;
  const int last = p * m - 1;
  const int prev = a.stage > 0 ? (a.stage - 1) % p : kNoPeer;
  const int next = a.stage < last ? (a.stage + 1) % p : kNoPeer;
  if (pass == Pass::backward_weight) return a;  // nothing to receive or send
  a.recv_from = pass == Pass::forward ? prev : next;
  a.send_to = pass == Pass::forward ? next : prev;
  return a;
}

RankActions gpipe(int rank, int p, int n_mb) {
  RankActions out;
  for (int mb = 0; mb < n_mb; ++mb) out.push_back(make_action(Pass::forward, mb, 0, rank, p, 1));
  for (int mb = 0; mb < n_mb; ++mb) out.push_back(make_action(Pass::backward, mb, 0, rank, p, 1));
  return out;
}

RankActions one_f_one_b(int rank, int p, int n_mb) {
  const int warmup = std::min(p - rank - 1, n_mb);
  RankActions out;
  for (int mb = 0; mb < warmup; ++mb) out.push_back(make_action(Pass::forward, mb, 0, rank, p, 1));
  for (int i = 0; i < n_mb - warmup; ++i) {
    out.push_back(make_action(Pass::forward, warmup + i, 0, rank, p, 1));
    out.push_back(make_action(Pass::backward, i, 0, rank, p, 1));
  }
  for (int mb = n_mb - warmup; mb < n_mb; ++mb) out.push_back(make_action(Pass::backward, mb, 0, rank, p, 1));
  return out;
}

RankActions zb_h1(int rank, int p, int n_mb) {
  RankActions out;
  for (Action a : one_f_one_b(rank, p, n_mb)) {
    if (a.pass == Pass::forward) {
      out.push_back(a);
      continue;
    }
    a.pass = Pass::backward_input;
    out.push_back(a);
    if (a.micro_batch >= rank) out.push_back(make_action(Pass::backward_weight, a.micro_batch - rank, 0, rank, p, 1));
  }
  for (int mb = std::max(0, n_mb - rank); mb < n_mb; ++mb)
    out.push_back(make_action(Pass::backward_weight, mb, 0, rank, p, 1));
  return out;
}

// PipeDream-2BW's step: F(j) of this batch, each followed by the backward w places behind it, which
// belongs to the previous batch while j < w; `last` appends this batch's last w backwards.
RankActions pipedream_2bw(int rank, int p, int n_mb, Phase phase) {
  const int w = std::min(p - rank - 1, n_mb);
  const bool tail_in = phase == Phase::steady || phase == Phase::last;
  RankActions out;
  for (int j = 0; j < n_mb; ++j) {
    out.push_back(make_action(Pass::forward, j, 0, rank, p, 1));
    if (j >= w) {
      out.push_back(make_action(Pass::backward, j - w, 0, rank, p, 1));
    } else if (tail_in) {
      out.push_back(make_action(Pass::backward, n_mb + j - w, 0, rank, p, 1));
      out.back().batch = -1;
    }
  }
  if (phase == Phase::whole || phase == Phase::last)
    for (int mb = n_mb - w; mb < n_mb; ++mb) out.push_back(make_action(Pass::backward, mb, 0, rank, p, 1));
  return out;
}

// Megatron's interleaving walks "virtual micro-batches" k = 0..m·n_mb-1: groups of p micro-batches
// per chunk, chunks ascending for forwards and descending for backwards.
Action interleaved_action(Pass pass, int k, int rank, int p, int m) {
  const int in_group = k % (p * m);
  int chunk = in_group / p;
  if (pass == Pass::backward) chunk = m - 1 - chunk;
  const int micro_batch = (k / (p * m)) * p + k % p;
  return make_action(pass, micro_batch, chunk, rank, p, m);
}

RankActions interleaved(int rank, int p, int n_mb, int m) {
  const int total = n_mb * m;
  // Megatron runs all forwards first when n_mb == p; otherwise later ranks start 1F1B sooner.
  const int warmup = n_mb == p ? total : std::min((p - rank - 1) * 2 + (m - 1) * p, total);
  RankActions out;
  for (int k = 0; k < warmup; ++k) out.push_back(interleaved_action(Pass::forward, k, rank, p, m));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(interleaved_action(Pass::forward, warmup + i, rank, p, m));
    out.push_back(interleaved_action(Pass::backward, i, rank, p, m));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(interleaved_action(Pass::backward, k, rank, p, m));
  return out;
}

}  // namespace

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  if (name == "zb-h1") return ScheduleKind::zb_h1;
  if (name == "pipedream-2bw") return ScheduleKind::pipedream_2bw;
  fail("unknown schedule '" + name + "' (choose gpipe, 1f1b, interleaved, zb-h1 or pipedream-2bw)");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb_h1: return "zb-h1";
    case ScheduleKind::pipedream_2bw: return "pipedream-2bw";
  }
  return "?";
}

void validate_schedule(ScheduleKind kind, int p, int n_mb, int m) {
  require(p >= 1 && p <= kMaxPipeline,
          "pipeline-model-parallel size must be between 1 and " + n(kMaxPipeline) + " (got " + n(p) + ")");
  require(n_mb >= 1 && n_mb <= kMaxMicroBatches,
          "micro-batches must be between 1 and " + n(kMaxMicroBatches) + " (got " + n(n_mb) + ")");
  require(m >= 1 && m <= kMaxChunks, "virtual stages must be between 1 and " + n(kMaxChunks) + " (got " + n(m) + ")");
  require(int64_t(p) * n_mb * m <= kMaxActions,
          "p · micro-batches · virtual stages must be at most " + n(kMaxActions) + " (got " +
              std::to_string(int64_t(p) * n_mb * m) + "): the schedule would not fit in memory");
  if (kind == ScheduleKind::pipedream_2bw)
    require(n_mb >= p, "pipedream-2bw needs at least p = " + n(p) + " micro-batches per step (got " + n(n_mb) +
                           "): with fewer, a stage would need a third weight version");
  if (kind != ScheduleKind::interleaved) {
    require(m == 1, "virtual stages > 1 need the interleaved schedule (got m = " + n(m) + " with " +
                        schedule_name(kind) + ")");
    return;
  }
  require(m >= 2, "the interleaved schedule needs virtual stages m >= 2 (with m = 1 use 1f1b)");
  require(p >= 2, "the interleaved schedule needs pipeline-model-parallel size p >= 2");
  require(n_mb % p == 0, "the interleaved schedule needs micro-batches (" + n(n_mb) +
                             ") to be a multiple of the pipeline-model-parallel size p = " + n(p));
  require(int64_t(n_mb) * m <= kMaxMicroBatches,
          "micro-batches × virtual stages must be at most " + n(kMaxMicroBatches));
}

std::vector<RankActions> build_schedule(ScheduleKind kind, int p, int n_mb, int m) {
  return build_step_schedule(kind, p, n_mb, m, Phase::whole);
}

std::vector<RankActions> build_step_schedule(ScheduleKind kind, int p, int n_mb, int m, Phase phase) {
  validate_schedule(kind, p, n_mb, m);
  if (kind != ScheduleKind::pipedream_2bw && phase != Phase::whole)
    throw std::logic_error("build_step_schedule: only pipedream-2bw has phases");
  std::vector<RankActions> ranks;
  ranks.reserve(static_cast<size_t>(p));
  for (int rank = 0; rank < p; ++rank) {
    switch (kind) {
      case ScheduleKind::gpipe: ranks.push_back(gpipe(rank, p, n_mb)); break;
      case ScheduleKind::one_f_one_b: ranks.push_back(one_f_one_b(rank, p, n_mb)); break;
      case ScheduleKind::interleaved: ranks.push_back(interleaved(rank, p, n_mb, m)); break;
      case ScheduleKind::zb_h1: ranks.push_back(zb_h1(rank, p, n_mb)); break;
      case ScheduleKind::pipedream_2bw: ranks.push_back(pipedream_2bw(rank, p, n_mb, phase)); break;
    }
  }
  return ranks;
}

Phase step_phase(bool after_drain, bool drains) {
  if (after_drain) return drains ? Phase::whole : Phase::first;
  return drains ? Phase::last : Phase::steady;
}

std::vector<RankActions> build_run(ScheduleKind kind, int p, int n_mb, int m, const std::vector<Phase>& phases) {
  validate_schedule(kind, p, n_mb, m);
  // The whole run is held: its steps together within the one schedule's bound.
  const int64_t actions = int64_t(p) * n_mb * m * int64_t(phases.size());
  require(actions <= kMaxActions, "p · micro-batches · virtual stages · steps must be at most " + n(kMaxActions) +
                                      " (got " + std::to_string(actions) + "): the run would not fit in memory");
  std::vector<RankActions> run(static_cast<size_t>(p));
  for (size_t t = 0; t < phases.size(); ++t) {
    const auto step = build_step_schedule(kind, p, n_mb, m, phases[t]);
    for (size_t r = 0; r < step.size(); ++r) {
      for (Action a : step[r]) {
        const int64_t k = (int64_t(t) + a.batch) * n_mb + a.micro_batch;
        require(k >= 0 && k <= INT32_MAX, "build_run: the run's first step must start the stream (phase first or whole)");
        a.micro_batch = int(k), a.batch = 0;
        run[r].push_back(a);
      }
      Action end;
      end.pass = Pass::step_end, end.micro_batch = int(t), end.stage = int(r);
      run[r].push_back(end);
    }
  }
  return run;
}

std::string action_label(const Action& a, int m) {
  if (a.pass == Pass::step_end) {
    std::string end = "|";  // appended, not "|" + …: GCC 12 -Wrestrict
    end += n(a.micro_batch);
    return end;
  }
  std::string s(1, a.pass == Pass::forward ? 'F' : a.pass == Pass::backward_weight ? 'W' : 'B');  // appended: GCC 12 -Wrestrict
  if (a.batch != 0) s += "'";  // the previous batch's
  s += n(a.micro_batch);
  if (m > 1) s += ".c" + n(a.chunk);
  return s;
}

std::string describe_action(const Action& a, int m) {
  std::string s = action_label(a, m);
  if (a.recv_from != kNoPeer) s += " <-r" + n(a.recv_from);
  if (a.send_to != kNoPeer) s += " ->r" + n(a.send_to);
  return s;
}

}  // namespace lattice::parallel::pipeline
