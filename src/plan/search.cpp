#include "plan/search.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <system_error>
#include <thread>

#include "core/error.hpp"
#include "core/stage_partition.hpp"
#include "plan/auto_partition.hpp"
#include "plan/recompute_auto.hpp"

namespace lattice::plan {

namespace {

std::vector<int> divisors(int n, int limit) {
  std::vector<int> out;
  for (int k = 1; k <= n && k <= limit; ++k)
    if (n % k == 0) out.push_back(k);
  return out;
}

struct Candidate {
  double seconds;
  double bytes;
  PlanRequest request;
};

// The layers of r's longest (virtual) stage: block N at that count recomputes every layer.
int longest_stage(const PlanRequest& r) {
  const std::vector<int> counts = StagePartition::of(r.layout, r.model.layers).counts();
  return *std::max_element(counts.begin(), counts.end());
}

// Full recompute of the first N layers of each stage: memory falls and time rises with N, so the best
// N is the smallest that fits; binary search it up to the longest stage's layers (every layer).
// Returns that count when only every layer fits, -1 when not even that fits.
int fewest_recomputed_layers(PlanRequest r) {
  int lo = 1, hi = longest_stage(r);
  r.layout.recompute_layers = hi;
  if (!plan_memory(r).fits()) return -1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    r.layout.recompute_layers = mid;
    if (plan_memory(r).fits()) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// How a searched layout's CP ranks share attention: the request's way, except that the ring runs on the
// fused kernel only, so with unfused attention Ulysses'.
CpComm search_cp_comm(const PlanRequest& base) {
  return base.layout.attention == AttentionKernel::fused ? base.layout.cp_comm : CpComm::a2a;
}

// The context-parallel sizes a search tries with t-way TP: powers of two c (as Ulysses' head split and
// the 2c-chunk balance favour) dividing the devices left after t, with 2c dividing the sequence and,
// for Ulysses, c the heads of a TP rank (context_parallel_problem); MoE models too, whose EP then
// folds over DP × CP.
std::vector<int> cp_sizes(const PlanRequest& base, int t) {
  std::vector<int> out{1};
  const bool heads_split = search_cp_comm(base) == CpComm::a2a;
  for (int c = 2; c <= base.gpus / t; c *= 2)
    if ((base.gpus / t) % c == 0 && (!heads_split || (base.model.heads / t) % c == 0) &&
        base.model.seq_len % (2 * c) == 0)
      out.push_back(c);
  return out;
}

}  // namespace

// The longest stage the search gives a per-stage recompute plan (longer ones: block N).
constexpr int kMostLayersPlanned = 256;

namespace {

// One layout of the search before its recompute mode: what the loops over the devices fix.
struct LayoutPoint {
  int t, c, p, dp, e, m, b, sp, zero;
};

// What weighing one point found: the layouts it counted and those of them that fit.
struct PointOutcome {
  size_t considered = 0;
  std::vector<Candidate> fitting;
};

// Every point of `gpus` devices, in the order the ranking breaks exact ties by.
std::vector<LayoutPoint> layout_points(const PlanRequest& base, const Hardware& hw) {
  std::vector<LayoutPoint> points;
  const int L = base.model.layers;
  for (int t : divisors(base.gpus, hw.devices_per_node)) {
    if (base.model.heads % t != 0) continue;
    for (int c : cp_sizes(base, t))
    for (int p : divisors(base.gpus / (t * c), L)) {
      // With c > 1 the search keeps to even stages: the partitioner's uneven ones cost most of a
      // search's time, and trying them for every c would multiply it (--pipeline-layers auto still
      // balances a CP layout's stages when asked).
      if (c > 1 && L % p != 0) continue;
      const int dp = base.gpus / (t * c * p);
      if (base.global_batch % dp != 0) continue;
      // An MoE model also tries every expert-parallel size e dividing DP × CP (EP folds over both,
      // as Megatron-Core's does) and the expert count.
      std::vector<int> eps{1};
      if (base.model.moe.enabled()) {
        eps.clear();
        for (int e : divisors(dp * c, dp * c))
          if (base.model.moe.experts % e == 0) eps.push_back(e);
      }
      for (int m : p == 1 || L % p != 0 ? std::vector<int>{1} : divisors(L / p, L))
        for (int b : divisors(base.global_batch / dp, 64))
          for (int sp = 0; sp <= (t > 1 ? 1 : 0); ++sp)
            for (int e : eps)
              for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) points.push_back({t, c, p, dp, e, m, b, sp, zero});
    }
  }
  return points;
}

// The point's layouts under no, selective and full recompute (the last the cheapest per-stage plan
// that fits, or block N), each counted and, where it fits, kept.
PointOutcome weigh_point(const PlanRequest& base, const Hardware& hw, const LayoutPoint& at) {
  PointOutcome out;
  const int L = base.model.layers;
  // The partitioner's counts for r (m = 1) within the device memory; false when none fits.
  auto partition = [&](PlanRequest& r) {
    r.layout.stage_layers.clear();
    try {
      r.layout.stage_layers = auto_partition(r, hw, double(r.gpu_memory)).counts;
      return true;
    } catch (const InputError&) {
      ++out.considered;
      return false;
    }
  };
  auto consider = [&](const PlanRequest& r) {
    if (!layout_problem(r).empty()) return;
    ++out.considered;
    const MemoryPlan mem = plan_memory(r);
    if (!mem.fits()) return;
    out.fitting.push_back({plan_time(r, hw).iteration_s, mem.total_bytes, r});
  };
  PlanRequest r = base;
  r.engine_scratch = false;  // a cluster's layouts: no CPU engine's GEMM scratchpads (and 5x faster)
  r.layout.tp = at.t;
  r.layout.cp = at.c;
  r.layout.cp_comm = search_cp_comm(base);
  r.layout.pp = at.p;
  r.layout.virtual_stages = at.m;
  r.zero_bubble = base.zero_bubble && at.m == 1;  // --schedule zb-h1: the non-interleaved layouts
  r.pipedream_2bw = base.pipedream_2bw && at.m == 1;
  r.layout.dp = at.dp;
  r.layout.ep = at.e;
  r.layout.sequence_parallel = at.sp == 1;
  r.layout.zero = at.zero;
  r.layout.recompute_layers = -1;
  r.layout.recompute_method = RecomputeMethod::block;  // the search's full is block N
  r.layout.recompute_plan.clear();
  r.micro_batch = at.b;
  r.layout.stage_layers.clear();
  // p not dividing L: stages of uneven sizes, as the partitioner balances them.
  const bool uneven = at.m == 1 && L % at.p != 0 && !base.model.moe.enabled();
  for (Recompute mode : {Recompute::none, Recompute::selective}) {
    r.layout.recompute = mode;
    if (uneven && !partition(r)) continue;
    consider(r);
  }
  r.layout.recompute = Recompute::full;
  if (uneven && !partition(r)) return out;
  if (!layout_problem(r).empty()) return out;
  if (!base.model.moe.enabled() && !uneven && at.m == 1 && L / at.p <= kMostLayersPlanned) {
    // Dense, even stages: each stage's cheapest recompute plan whose accounted peak fits
    // (plan/recompute_auto.hpp), not only block N. Its chooser is quadratic in a stage's
    // layers (0.8 s a layout at 2,000): longer stages take block N, as before the chooser.
    try {
      PlanRequest chosen = r;
      chosen.accounted_budget = true;
      const AutoRecompute plan = choose_recompute_plan(chosen, chosen.gpu_memory);
      // Every layer none, or every layer selective: the layout already weighed above (it
      // fits by the paper's count if by the accounted one), not a second row of it.
      const bool uniform = std::all_of(plan.plan.begin(), plan.plan.end(), [&](LayerRecompute x) {
        return x == plan.plan.front() && !forward_recomputed(x);
      });
      if (uniform && !plan.plan.empty()) return out;
      chosen.layout.recompute_plan = plan.plan;
      chosen.layout.recompute = strongest_mode(plan.plan);
      consider(chosen);
    } catch (const InputError&) {
      ++out.considered;  // no plan fits this layout
    }
    return out;
  }
  const int n = fewest_recomputed_layers(r);
  if (n < 0) {
    ++out.considered;
    return out;
  }
  r.layout.recompute_layers = n == longest_stage(r) ? -1 : n;
  if (uneven && !partition(r)) return out;  // balanced for the layers actually recomputed
  consider(r);
  return out;
}

// The CPUs this process may run on (its affinity mask, as taskset and cgroups' cpusets narrow it).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

}  // namespace

SearchResult search_layouts(const PlanRequest& base, const Hardware& hw, size_t top, double peak_flops,
                            const std::function<void(size_t, size_t, size_t, double)>& progress, int threads) {
  SearchResult result;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<LayoutPoint> points = layout_points(base, hw);
  // The points are weighed on every usable CPU, each taking the next unweighed one; their outcomes
  // are kept by point and merged in the points' order, so the ranking (its ties included) and the
  // counts are those of one thread, and so is an error: the lowest point's that failed. This machine's
  // own rates (--hardware local) time each GEMM shape once, when first asked, into a cache: one thread
  // then, so that no timing runs beside the search's other work.
  std::vector<PointOutcome> outcomes(points.size());
  std::vector<std::exception_ptr> errors(points.size());
  std::atomic<size_t> next{0}, considered{0}, done{0};
  std::atomic<bool> stop{false};
  const auto work = [&](bool reports) {
    double next_report = 10.0;
    for (size_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < points.size();) {
      try {
        outcomes[i] = weigh_point(base, hw, points[i]);
        considered += outcomes[i].considered;
        ++done;
        if (reports && progress) {  // on the calling thread only: the callback need not be thread-safe
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
          if (s >= next_report) progress(considered.load(), done.load(), points.size(), s), next_report = s + 10.0;
        }
      } catch (...) {
        errors[i] = std::current_exception();
        stop = true;  // points claimed before this one still finish: one of them may fail first
        return;
      }
    }
  };
  const int wanted = hw.local.active() ? 1 : threads > 0 ? threads : usable_cpus();
  std::vector<std::thread> pool;
  pool.reserve(size_t(wanted));  // so that only a thread's creation can throw below
  try {
    for (size_t k = 1; k < std::min(points.size(), size_t(wanted)); ++k) pool.emplace_back(work, false);
  } catch (const std::system_error&) {
    // No more threads to be had (a limit on processes): the ones made, and this one, do the work.
  }
  work(true);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);

  std::vector<Candidate> fitting;
  for (PointOutcome& o : outcomes) {
    result.considered += o.considered;
    for (Candidate& c : o.fitting) fitting.push_back(std::move(c));
  }
  result.fitting = fitting.size();
  const size_t keep = std::min(top, fitting.size());
  std::partial_sort(fitting.begin(), fitting.begin() + keep, fitting.end(),
                    [](const Candidate& x, const Candidate& y) {
                      return x.seconds != y.seconds ? x.seconds < y.seconds : x.bytes < y.bytes;
                    });
  for (size_t i = 0; i < keep; ++i) result.best.push_back(evaluate(fitting[i].request, hw, 0, peak_flops));
  return result;
}

}  // namespace lattice::plan
