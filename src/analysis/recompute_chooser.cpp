// The per-layer recompute plan with the least recompute FLOPs whose stage peak fits a budget, exact
// under stage_activation_peak (docs/design.md §4).
//
// A plan's shape is (x segments holding y layers, z selective, w = n − y − z none). K and the FLOPs
// depend on the shape alone, so for each shape only M = max over units of [kept below + live] is
// minimised over the orders and segment lengths. M is the 1||max(C_j + q_j) problem (processing time
// kept(u), tail q(u) = live(u) − kept(u)): with every kept ≥ 0, an adjacent swap that puts the larger
// tail lower never raises it (Jackson's rule), so some order sorted by tail is optimal.
//   Fast path, when in_segment keeps nothing, its live is ≥ 0 and a one-layer segment's tail is at least
//   every allowed none/selective tail: a segment's tail only grows with its length, so the segments go
//   lowest, longest first, then the none/selective blocks by tail. Segment j then sits on j checkpoints
//   whatever the lengths, and the least max over lengths summing to y is a water-filling: the
//   (y − x)-th smallest of {j·kept_c + live_c + m·live_~ : j < x, m ≥ 1}, or (x − 1)·kept_c + live_c.
//   For each (x, y) the peak is convex in z between the ends, so O(1) z are evaluated: O(n² log n).
//   Otherwise (e.g. a selective tail above a one-layer segment's, as with 8-bit kept s² tensors): a DP
//   over the unit types in tail order for each (w, z), exact for any costs with kept ≥ 0 but O(n⁵/40),
//   so it is offered up to kMaxGeneralLayers layers a stage; beyond that the chooser says why.
// Whole-byte costs keep every sum exact in double, so the shapes' peaks equal stage_activation_peak's.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "analysis/recompute_choice.hpp"
#include "core/error.hpp"

namespace lattice::analysis {

namespace {

using Mode = LayerRecompute;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxGeneralLayers = 64;  // the general DP: about 3·10⁷ steps at 64 layers

const LayerModeCost& cost_of(const StageRecomputeCosts& c, Mode m) { return c.mode[static_cast<size_t>(m)]; }
double tail_of(const StageRecomputeCosts& c, Mode m) { return cost_of(c, m).live - cost_of(c, m).kept; }

struct Shape {
  int x = 0, y = 0, z = 0;  // segments, layers in segments, selective layers
};

struct Block {  // a run of none or selective layers
  Mode mode;
  int count;
};

// The none and selective blocks, larger tail first (selective first on a tie).
std::pair<Block, Block> constant_blocks(const StageRecomputeCosts& c, int z, int w) {
  if (tail_of(c, Mode::selective) >= tail_of(c, Mode::none)) return {{Mode::selective, z}, {Mode::none, w}};
  return {{Mode::none, w}, {Mode::selective, z}};
}

void append(std::vector<Mode>& plan, Mode m, int count) { plan.insert(plan.end(), count, m); }

void append_segment(std::vector<Mode>& plan, int length) {
  plan.push_back(Mode::checkpoint);
  append(plan, Mode::in_segment, length - 1);
}

// Fast path: least_segment_max_[x][y] is the least max over x segments of y layers at the bottom.
class CanonicalSolver {
 public:
  CanonicalSolver(const StageRecomputeCosts& c, int n) : c_(c), n_(n), least_segment_max_(n + 1) {
    const LayerModeCost& ck = cost_of(c, Mode::checkpoint);
    for (int x = 1; x <= n; ++x) {
      least_segment_max_[x].assign(n + 1, kInf);
      const double floor_term = (x - 1) * ck.kept + ck.live;
      least_segment_max_[x][x] = floor_term;
      int y = x;
      fill_lengths(x, n - x, [&](double value, int) { least_segment_max_[x][++y] = std::max(floor_term, value); });
    }
  }

  double least_unit_max(const Shape& s) const {
    const int w = n_ - s.y - s.z;
    const auto [low, high] = constant_blocks(c_, s.z, w);
    double below = s.x * cost_of(c_, Mode::checkpoint).kept, m = 0;
    if (s.x > 0) m = least_segment_max_[s.x][s.y];
    for (const Block& b : {low, high}) {
      if (b.count == 0) continue;
      const LayerModeCost& u = cost_of(c_, b.mode);
      m = std::max(m, below + (b.count - 1) * u.kept + u.live);
      below += b.count * u.kept;
    }
    return m;
  }

  // For 1 ≤ z ≤ n − y − 1, the peak of x segments of y layers and z selective is the max of these
  // lines (value at z = 0, slope): K + H, the segments, the lower block, the upper block.
  std::array<std::pair<double, double>, 4> interior_lines(int x, int y) const {
    const LayerModeCost &ck = cost_of(c_, Mode::checkpoint), &s = cost_of(c_, Mode::selective),
                        &none = cost_of(c_, Mode::none);
    const int r = n_ - y;
    const double below = x * ck.kept, K0 = below + r * none.kept, dK = s.kept - none.kept, g = c_.in_flight - 1;
    const double base = g * K0 + c_.fixed, slope = g * dK;
    const double none_top = below + (r - 1) * none.kept + none.live;  // the none block's top layer at z = 0
    const bool selective_lower = constant_blocks(c_, 1, 1).first.mode == Mode::selective;
    const std::pair<double, double> lower = selective_lower ? std::pair(below - s.kept + s.live, s.kept)
                                                            : std::pair(none_top, -none.kept);
    const std::pair<double, double> upper = selective_lower ? std::pair(none_top, dK)
                                                            : std::pair(below + r * none.kept - s.kept + s.live, dK);
    return {{{base + K0 + c_.head, slope + dK},
             {base + (x > 0 ? least_segment_max_[x][y] : 0), slope},
             {base + lower.first, slope + lower.second},
             {base + upper.first, slope + upper.second}}};
  }

  std::vector<Mode> plan(const Shape& s) const {
    std::vector<int> lengths(s.x, 1);
    fill_lengths(s.x, s.y - s.x, [&](double, int slot) { ++lengths[slot]; });
    std::vector<Mode> plan;
    for (int length : lengths) append_segment(plan, length);
    const auto [low, high] = constant_blocks(c_, s.z, n_ - s.y - s.z);
    append(plan, low.mode, low.count);
    append(plan, high.mode, high.count);
    return plan;
  }

 private:
  // The `extra` smallest terms a layer added to one of x one-layer segments can make, smallest first
  // (ties to the lower segment): visit(term, segment).
  template <class Visit>
  void fill_lengths(int x, int extra, Visit visit) const {
    const LayerModeCost &ck = cost_of(c_, Mode::checkpoint), &in = cost_of(c_, Mode::in_segment);
    struct Next {
      double term;
      int slot, added;
      bool operator>(const Next& o) const { return term != o.term ? term > o.term : slot > o.slot; }
    };
    std::priority_queue<Next, std::vector<Next>, std::greater<Next>> next;
    for (int j = 0; j < x; ++j) next.push({j * ck.kept + ck.live + in.live, j, 1});
    for (int i = 0; i < extra; ++i) {
      Next t = next.top();
      next.pop();
      visit(t.term, t.slot);
      ++t.added;
      t.term = t.slot * ck.kept + ck.live + t.added * in.live;
      next.push(t);
    }
  }

  const StageRecomputeCosts& c_;
  int n_;
  std::vector<std::vector<double>> least_segment_max_;
};

// General path: for each (w, z), a DP over the unit types in tail order (segments of each length,
// none, selective) whose state is (segments so far, their layers); every partial plan reaching a state
// has the same kept bytes below, so the least max so far dominates.
class GeneralSolver {
 public:
  GeneralSolver(const StageRecomputeCosts& c, int n, bool allow_selective) : c_(c), n_(n) {
    for (int len = n; len >= 1; --len) types_.push_back({Mode::checkpoint, len, segment_tail(len)});
    if (allow_selective) types_.push_back({Mode::selective, 0, tail(Mode::selective)});
    types_.push_back({Mode::none, 0, tail(Mode::none)});
    std::stable_sort(types_.begin(), types_.end(), [](const Type& a, const Type& b) { return a.tail > b.tail; });
    least_.assign((n + 1) * (n + 1) * (n + 1), kInf);
    for (int z = 0; z <= (allow_selective ? n : 0); ++z)
      for (int w = 0; z + w <= n; ++w) {
        const int y = n - z - w;
        const Table dp = run(y, z, w, nullptr);
        for (int x = 0; x <= y; ++x) least_[index(x, y, z)] = dp[x * (y + 1) + y];
      }
  }

  double least_unit_max(const Shape& s) const { return least_[index(s.x, s.y, s.z)]; }

  std::vector<Mode> plan(const Shape& s) const {
    const int y = s.y, w = n_ - s.y - s.z;
    std::vector<std::vector<int>> copies;  // per type, per state: copies of it taken to reach the state
    run(y, s.z, w, &copies);
    std::vector<std::pair<const Type*, int>> runs;  // top first
    int x = s.x, at = y;
    for (size_t t = types_.size(); t-- > 0;) {
      const Type& u = types_[t];
      if (u.mode != Mode::checkpoint) {
        runs.push_back({&u, u.mode == Mode::none ? w : s.z});
        continue;
      }
      const int k = copies[t][x * (y + 1) + at];
      runs.push_back({&u, k});
      x -= k, at -= k * u.length;
    }
    std::vector<Mode> plan;
    for (size_t r = runs.size(); r-- > 0;)
      for (int i = 0; i < runs[r].second; ++i) {
        if (runs[r].first->mode == Mode::checkpoint) append_segment(plan, runs[r].first->length);
        else plan.push_back(runs[r].first->mode);
      }
    return plan;
  }

 private:
  using Table = std::vector<double>;
  struct Type {
    Mode mode;  // checkpoint for a segment of `length` layers
    int length;
    double tail;
  };

  double tail(Mode m) const { return tail_of(c_, m); }
  double segment_live(int len) const {
    return cost_of(c_, Mode::checkpoint).live + (len - 1) * cost_of(c_, Mode::in_segment).live;
  }
  double segment_tail(int len) const { return tail(Mode::checkpoint) + (len - 1) * tail(Mode::in_segment); }
  size_t index(int x, int y, int z) const { return (size_t(z) * (n_ + 1) + y) * (n_ + 1) + x; }

  // The least max so far for each (segments, layers) state, y layers in segments in all; records the
  // copies taken of each segment type when `copies` is given.
  Table run(int y, int z, int w, std::vector<std::vector<int>>* copies) const {
    const int side = y + 1;
    Table dp(side * side, kInf);
    dp[0] = 0;  // stage_activation_peak's max starts at 0
    const double kc = cost_of(c_, Mode::checkpoint).kept, ki = cost_of(c_, Mode::in_segment).kept;
    double blocks_below = 0;
    auto below = [&](int x, int layers) { return x * kc + (layers - x) * ki + blocks_below; };
    for (const Type& u : types_) {
      std::vector<int> taken(copies ? side * side : 0, 0);
      if (u.mode != Mode::checkpoint) {
        const int count = u.mode == Mode::none ? w : z;
        const LayerModeCost& m = cost_of(c_, u.mode);
        if (count > 0) {
          for (int x = 0; x <= y; ++x)
            for (int l = x; l <= y; ++l)
              if (dp[x * side + l] < kInf)
                dp[x * side + l] = std::max(dp[x * side + l], below(x, l) + (count - 1) * m.kept + m.live);
          blocks_below += count * m.kept;
        }
      } else if (u.length <= y) {
        const double live = segment_live(u.length);
        for (int l = 0; l + u.length <= y; ++l)
          for (int x = 0; x <= l; ++x) {
            if (dp[x * side + l] == kInf) continue;
            const double term = std::max(dp[x * side + l], below(x, l) + live);
            double& to = dp[(x + 1) * side + l + u.length];
            if (term < to) {
              to = term;
              if (copies) taken[(x + 1) * side + l + u.length] = taken[x * side + l] + 1;
            }
          }
      }
      if (copies) copies->push_back(std::move(taken));
    }
    return dp;
  }

  const StageRecomputeCosts& c_;
  int n_;
  std::vector<Type> types_;
  Table least_;
};

// Ordered by FLOPs or by peak, then by the other, by checkpoints, and (for a deterministic answer) by
// layers in segments and selective layers.
struct Candidate {
  Shape shape;
  double peak, flops;
  auto by_flops() const { return std::tuple(flops, peak, shape.x, shape.y, shape.z); }
  auto by_peak() const { return std::tuple(peak, flops, shape.x, shape.y, shape.z); }
};

class Chooser {
 public:
  Chooser(const StageRecomputeCosts& c, int n, bool allow_selective)
      : c_(folded(c)), exact_(c), n_(n), allow_selective_(allow_selective) {
    require(n >= 0, "recompute chooser: a stage of " + std::to_string(n) + " layers");
    for (const LayerModeCost& m : c.mode)
      require(std::isfinite(m.kept) && std::isfinite(m.live) && std::isfinite(m.flops) && m.kept >= 0,
              "recompute chooser: a layer mode's kept bytes must be finite and ≥ 0, its live bytes and FLOPs finite");
    require(std::isfinite(c_.head) && std::isfinite(c_.in_flight) && std::isfinite(c_.fixed),
            "recompute chooser: the head, in-flight, fixed and extra terms must be finite");
    const LayerModeCost& in = cost_of(c_, Mode::in_segment);
    const double one_segment_tail = tail_of(c_, Mode::checkpoint);
    canonical_ = in.kept == 0 && in.live >= 0 && one_segment_tail >= tail_of(c_, Mode::none) &&
                 (!allow_selective || one_segment_tail >= tail_of(c_, Mode::selective));
    if (canonical_) {
      canonical_solver_.emplace(c_, n);
    } else {
      require(n <= kMaxGeneralLayers,
              "recompute chooser: these costs (an in_segment layer that keeps bytes, or a none/selective layer whose "
              "live − kept exceeds a one-layer segment's) need the general search, offered up to " +
                  std::to_string(kMaxGeneralLayers) + " layers a stage, and this stage has " + std::to_string(n) +
                  (allow_selective ? "; choose without selective" : ""));
      general_solver_.emplace(c_, n, allow_selective);
    }
  }

  // Visits the shapes that can win, with their least peaks and their FLOPs: within `budget` by FLOPs,
  // or (no budget) by peak.
  template <class Visit>
  void each_shape(const double* budget, Visit visit) const {
    const LayerModeCost &ck = cost_of(c_, Mode::checkpoint), &in = cost_of(c_, Mode::in_segment),
                        &sel = cost_of(c_, Mode::selective), &none = cost_of(c_, Mode::none);
    for (int y = 0; y <= n_; ++y)
      for (int x = y > 0 ? 1 : 0; x <= y; ++x) {
        auto visit_z = [&](int z) {
          const Shape s{x, y, z};
          const int w = n_ - y - z;
          const double kept = x * ck.kept + (y - x) * in.kept + z * sel.kept + w * none.kept;
          const double m = canonical_ ? canonical_solver_->least_unit_max(s) : general_solver_->least_unit_max(s);
          if (m == kInf) return;
          const double peak = (c_.in_flight - 1) * kept + std::max(kept + c_.head, m) + c_.fixed;
          visit(s, peak, x * ck.flops + (y - x) * in.flops + z * sel.flops + w * none.flops);
        };
        if (!allow_selective_) visit_z(0);
        else if (canonical_) selective_counts(x, y, budget, visit_z);
        else
          for (int z = 0; z <= n_ - y; ++z) visit_z(z);
      }
  }

  RecomputeChoice materialise(const Candidate& best) const {
    RecomputeChoice choice;
    choice.plan = canonical_ ? canonical_solver_->plan(best.shape) : general_solver_->plan(best.shape);
    choice.peak = stage_activation_peak(exact_, choice.plan);
    choice.flops = recompute_flops(c_, choice.plan);
    return choice;
  }

 private:
  // Backward's extras as constants: every unit is charged the larger of X_top and X_rest (a unit
  // term the same for all units keeps the search's structure), so where they differ (ZeRO-2/3) a
  // choice may hold a little less than the budget allows; the peak it reports is exact.
  static StageRecomputeCosts folded(StageRecomputeCosts c) {
    const double unit = std::max(c.top_extra, c.rest_extra);
    c.head += c.head_extra - unit, c.fixed += unit;
    c.head_extra = c.top_extra = c.rest_extra = 0;
    return c;
  }
  StageRecomputeCosts c_;               // the search's costs
  const StageRecomputeCosts& exact_;    // the caller's
  int n_;
  bool allow_selective_;
  bool canonical_ = false;

  // Fast path, x segments of y layers: for 1 ≤ z ≤ r − 1 (r = n − y) both blocks are there and the peak
  // is the max of four lines in z, so convex. Within a budget the fitting z form an interval, whose ends
  // (from the lines, ±1 against rounding) hold the least-FLOPs z; the least peak is at an end of
  // [1, r − 1] or next to where two lines cross. Also z = 0 and z = r.
  template <class Each>
  void selective_counts(int x, int y, const double* budget, Each each) const {
    const int r = n_ - y;
    each(0);
    if (r >= 1) each(r);
    if (r < 2) return;
    auto clipped = [&](double z) { return std::isnan(z) ? 1 : int(std::clamp(z, 1.0, r - 1.0)); };
    const auto lines = canonical_solver_->interior_lines(x, y);
    if (budget) {
      double lo = 1, hi = r - 1;
      for (const auto& [at0, slope] : lines) {
        if (slope > 0) hi = std::min(hi, (*budget - at0) / slope);
        if (slope < 0) lo = std::max(lo, (*budget - at0) / slope);
      }
      for (int d = -1; d <= 1; ++d) each(std::clamp(clipped(std::ceil(lo)) + d, 1, r - 1)),
                                    each(std::clamp(clipped(std::floor(hi)) + d, 1, r - 1));
      if (cost_of(c_, Mode::selective).flops != cost_of(c_, Mode::none).flops) return;
    }
    each(1), each(r - 1);
    for (size_t i = 0; i < lines.size(); ++i)
      for (size_t j = i + 1; j < lines.size(); ++j) {
        if (lines[i].second == lines[j].second) continue;
        const double cross = (lines[j].first - lines[i].first) / (lines[i].second - lines[j].second);
        each(clipped(std::floor(cross))), each(clipped(std::ceil(cross)));
      }
  }

  std::optional<CanonicalSolver> canonical_solver_;  // one of the two, by canonical_
  std::optional<GeneralSolver> general_solver_;
};

Candidate least_peak_shape(const Chooser& chooser) {
  std::optional<Candidate> best;
  chooser.each_shape(nullptr, [&](const Shape& s, double peak, double flops) {
    const Candidate c{s, peak, flops};
    if (!best || c.by_peak() < best->by_peak()) best = c;
  });
  return *best;
}

}  // namespace

RecomputeChoice choose_recompute(const StageRecomputeCosts& costs, int layers, double budget, bool allow_selective) {
  const Chooser chooser(costs, layers, allow_selective);
  std::optional<Candidate> best;
  chooser.each_shape(&budget, [&](const Shape& s, double peak, double flops) {
    const Candidate c{s, peak, flops};
    if (peak <= budget && (!best || c.by_flops() < best->by_flops())) best = c;
  });
  if (!best) {
    const Candidate least_shape = least_peak_shape(chooser);
    const RecomputeChoice least = chooser.materialise(least_shape);
    fail("no recompute plan fits " + mib_text(budget) + ": the least peak is " + mib_text(least_shape.peak) + " (" +
         recompute_plan_text(least.plan) + ")");
  }
  return chooser.materialise(*best);
}

RecomputeChoice least_peak_recompute(const StageRecomputeCosts& costs, int layers, bool allow_selective) {
  const Chooser chooser(costs, layers, allow_selective);
  return chooser.materialise(least_peak_shape(chooser));
}

std::string mib_text(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

}  // namespace lattice::analysis
