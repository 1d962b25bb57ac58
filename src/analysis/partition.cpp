#include "analysis/partition.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.hpp"
#include "core/stage_partition.hpp"

namespace lattice::analysis {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxPartitionedLayers = 2048;  // O(p·L²) cost evaluations: about a second at p = 8

std::string binary_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

// The largest `key` of one stage of the even split (the first L mod p stages one layer longer), when
// every stage of it passes `allowed`: a bound the least largest key cannot exceed. Infinite otherwise.
template <class Key, class Allowed>
double even_split_bound(const PartitionCosts& c, Key key, Allowed allowed) {
  double bound = 0;
  for (int r = 0, i = 0; r < c.stages; ++r) {
    const int j = i + c.layers / c.stages + (r < c.layers % c.stages ? 1 : 0);
    if (!allowed(r, i, j)) return kInf;
    bound = std::max(bound, double(key(r, i, j)));
    i = j;
  }
  return bound;
}

// One DP over (stage, end layer) minimising a cost that is the max over stages of `key`, with a
// second key (also max over stages) breaking ties; `allowed` filters stages. Returns the counts,
// or an empty vector when no partition passes.
// A (stage, first, last) whose key exceeds a feasible partition's (even_split_bound) is never weighed:
// every path through it costs more than the answer, so the answer and its counts, ties included, are
// those of the whole DP. As a stage's key grows with its layers (seconds and bytes both; infinite bytes
// aside), its first layer's loop stops there: about L/p lasts weighed per first instead of L, which is
// what makes --search's uneven stages affordable at hundreds of layers.
template <class Key, class Tie, class Allowed>
std::vector<int> minimise_max(const PartitionCosts& c, Key key, Tie tie, Allowed allowed) {
  const int L = c.layers, p = c.stages;
  const double bound = even_split_bound(c, key, allowed);
  struct Cell {
    double best = kInf, tie = kInf;
    int from = -1;
  };
  std::vector<std::vector<Cell>> A(size_t(p), std::vector<Cell>(size_t(L) + 1));
  for (int j = 1; j <= L - (p - 1); ++j)
    if (allowed(0, 0, j)) A[0][size_t(j)] = {key(0, 0, j), tie(0, 0, j), 0};
  // Stage r starts at i: a stage's bytes grow with its layers, so once [i, j) is refused no longer
  // stage from i fits; but for infinite bytes (a layer count uniform recompute's k does not divide).
  for (int r = 1; r < p; ++r)
    for (int i = r; i < L - (p - 1 - r); ++i) {
      const Cell prev = A[size_t(r - 1)][size_t(i)];
      if (prev.from < 0 || prev.best > bound) continue;
      for (int j = i + 1; j <= L - (p - 1 - r); ++j) {
        if (!allowed(r, i, j)) {
          if (c.bytes(r, i, j) == kInf) continue;
          break;
        }
        const double stage_key = key(r, i, j);
        if (stage_key > bound) {
          if (stage_key == kInf) continue;
          break;
        }
        const double best = std::max(prev.best, stage_key), second = std::max(prev.tie, tie(r, i, j));
        Cell& cell = A[size_t(r)][size_t(j)];
        if (best < cell.best || (best == cell.best && second < cell.tie)) cell = {best, second, i};
      }
    }
  if (A[size_t(p - 1)][size_t(L)].from < 0) return {};
  std::vector<int> counts(static_cast<size_t>(p));
  for (int r = p - 1, j = L; r >= 0; --r) {
    const int i = A[size_t(r)][size_t(j)].from;
    counts[size_t(r)] = j - i;
    j = i;
  }
  return counts;
}

}  // namespace

Partition evaluate_partition(const PartitionCosts& c, const std::vector<int>& counts) {
  Partition out{counts, 0, 0};
  int i = 0;
  for (int r = 0; r < int(counts.size()); ++r) {
    const int j = i + counts[size_t(r)];
    out.slowest_seconds = std::max(out.slowest_seconds, c.seconds(r, i, j));
    out.peak_bytes = std::max(out.peak_bytes, c.bytes(r, i, j));
    i = j;
  }
  return out;
}

Partition partition_layers(const PartitionCosts& c, double memory_cap) {
  require(c.stages >= 1 && c.layers >= c.stages,
          "--pipeline-layers auto: " + std::to_string(c.layers) + " layers cannot fill " + std::to_string(c.stages) +
              " pipeline stages (each needs at least one)");
  require(c.layers <= kMaxPartitionedLayers,
          "--pipeline-layers auto partitions at most " + std::to_string(kMaxPartitionedLayers) + " layers (got " +
              std::to_string(c.layers) + "): give the counts");
  const std::vector<int> counts = minimise_max(
      c, c.seconds, c.bytes, [&](int r, int i, int j) { return c.bytes(r, i, j) <= memory_cap; });
  if (!counts.empty()) return evaluate_partition(c, counts);
  const Partition least =
      evaluate_partition(c, minimise_max(c, c.bytes, c.seconds, [](int, int, int) { return true; }));
  fail("no partition of " + std::to_string(c.layers) + " layers over " + std::to_string(c.stages) +
       " pipeline stages fits in " + binary_bytes(memory_cap) + " per rank; the smallest peak is " + binary_bytes(least.peak_bytes) +
       " at " + layer_counts_text(least.counts));
}

}  // namespace lattice::analysis
