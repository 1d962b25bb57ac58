#include "plan/collectives.hpp"

#include <algorithm>
#include <cmath>

#include "plan/comm_table.hpp"

namespace lattice::plan {
namespace {

int floor_log2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}
bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

void consider(CollectiveCost& best, double seconds, Algorithm a) {
  if (best.algorithm == Algorithm::none || seconds < best.seconds) best = {seconds, a};
}

// The measured time of `op` moving `bytes` (the full buffer) in g, when the bench measured it.
bool measured(const GroupTopology& g, MeasuredOp op, double bytes, CollectiveCost& out) {
  if (!g.measured || !g.measured->has(op, g.size)) return false;
  const double t = g.measured->seconds(op, g.size, g.stride, bytes, /*engine_async=*/false);
  if (!std::isfinite(t)) return false;
  out = {t, Algorithm::measured};
  return true;
}

}  // namespace

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::none: return "none";
    case Algorithm::ring: return "ring";
    case Algorithm::halving_doubling: return "halving-doubling";
    case Algorithm::tree: return "tree";
    case Algorithm::torus2d: return "2d-torus";
    case Algorithm::pairwise: return "pairwise";
    case Algorithm::measured: return "measured";
  }
  return "?";
}

GroupTopology group_topology(const Hardware& hw, int size, int stride) {
  GroupTopology g;
  g.size = size;
  g.intra = hw.intra;
  g.inter = hw.inter;
  // Ranks `stride` apart: a node of D devices holds D/stride of them (at least one).
  const int per_node = stride >= hw.devices_per_node ? 1 : hw.devices_per_node / stride;
  g.per_node = std::max(1, std::min(size, per_node));
  g.measured = hw.local.comm.get();
  g.stride = stride;
  return g;
}

double ring_all_reduce(int n, const Link& l, double bytes) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * l.alpha + 2.0 * (n - 1) / n * bytes * l.beta;
}

// Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling. With
// n not a power of two, the r = n - 2^k extra ranks first hand their whole vector to a partner
// and get the result back at the end (the seed's 13-server example): two extra full-size steps.
double halving_doubling_all_reduce(int n, const Link& l, double bytes) {
  if (n <= 1) return 0;
  const int k = floor_log2(n);
  const int core = 1 << k;
  double t = 2.0 * k * l.alpha + 2.0 * (core - 1) / core * bytes * l.beta;
  if (!power_of_two(n)) t += 2.0 * (l.alpha + bytes * l.beta);
  return t;
}

// Two pipelined binary trees (NCCL's double binary tree): each carries half the data through a
// reduce up and a broadcast down; latency grows with the depth, bandwidth term ~2·nβ.
double tree_all_reduce(int n, const Link& l, double bytes) {
  if (n <= 1) return 0;
  const double depth = std::ceil(std::log2(double(n)));
  return 2.0 * depth * l.alpha + 2.0 * bytes * l.beta;
}

// Hierarchical 2D torus: reduce-scatter along the node's row, all-reduce the 1/per_node shard
// across nodes, all-gather along the row.
double torus2d_all_reduce(int per_node, int nodes, const Link& intra, const Link& inter, double bytes) {
  return 2.0 * ring_half(per_node, intra, bytes) + ring_all_reduce(nodes, inter, bytes / per_node);
}

double ring_half(int n, const Link& l, double bytes) {
  if (n <= 1) return 0;
  return (n - 1) * l.alpha + double(n - 1) / n * bytes * l.beta;
}

// Recursive halving (reduce-scatter) or doubling (all-gather); non-power-of-two ranks fold in
// as for the all-reduce: one full-size step before, one shard-size step after.
double halving_doubling_half(int n, const Link& l, double bytes) {
  if (n <= 1) return 0;
  const int k = floor_log2(n);
  const int core = 1 << k;
  double t = k * l.alpha + double(core - 1) / core * bytes * l.beta;
  if (!power_of_two(n)) t += 2.0 * l.alpha + (bytes + bytes / n) * l.beta;
  return t;
}

double torus2d_half(int per_node, int nodes, const Link& intra, const Link& inter, double bytes) {
  return ring_half(per_node, intra, bytes) + ring_half(nodes, inter, bytes / per_node);
}

CollectiveCost all_reduce(const GroupTopology& g, double bytes) {
  CollectiveCost best;
  if (g.size <= 1 || measured(g, MeasuredOp::all_reduce, bytes, best)) return best;
  const Link& l = g.flat_link();
  consider(best, ring_all_reduce(g.size, l, bytes), Algorithm::ring);
  consider(best, halving_doubling_all_reduce(g.size, l, bytes), Algorithm::halving_doubling);
  consider(best, tree_all_reduce(g.size, l, bytes), Algorithm::tree);
  if (g.nodes() > 1 && g.per_node > 1 && g.size % g.per_node == 0)
    consider(best, torus2d_all_reduce(g.per_node, g.nodes(), g.intra, g.inter, bytes), Algorithm::torus2d);
  return best;
}

CollectiveCost reduce_scatter(const GroupTopology& g, double bytes) {
  CollectiveCost best;
  if (g.size <= 1 || measured(g, MeasuredOp::reduce_scatter, bytes, best)) return best;
  const Link& l = g.flat_link();
  consider(best, ring_half(g.size, l, bytes), Algorithm::ring);
  consider(best, halving_doubling_half(g.size, l, bytes), Algorithm::halving_doubling);
  if (g.nodes() > 1 && g.per_node > 1 && g.size % g.per_node == 0)
    consider(best, torus2d_half(g.per_node, g.nodes(), g.intra, g.inter, bytes), Algorithm::torus2d);
  return best;
}

CollectiveCost all_gather(const GroupTopology& g, double bytes) {
  CollectiveCost best;
  if (g.size > 1 && measured(g, MeasuredOp::all_gather, bytes, best)) return best;
  return reduce_scatter(GroupTopology{g.size, g.per_node, g.intra, g.inter, nullptr, g.stride}, bytes);
}

double pairwise_all_to_all(int n, int per_node, const Link& intra, const Link& inter, double sent_bytes) {
  if (n <= 1) return 0;
  const int k = std::max(1, std::min(per_node, n));
  const double m = sent_bytes / (n - 1);
  return (k - 1) * (intra.alpha + m * intra.beta) + (n - k) * (inter.alpha + m * inter.beta);
}

CollectiveCost all_to_all(const GroupTopology& g, double sent_bytes) {
  if (g.size <= 1) return {};
  CollectiveCost best;  // the bench's all-to-all moves n in all, (size−1)/size of it sent
  if (measured(g, MeasuredOp::all_to_all, sent_bytes * g.size / (g.size - 1), best)) return best;
  return {pairwise_all_to_all(g.size, g.per_node, g.intra, g.inter, sent_bytes), Algorithm::pairwise};
}

CollectiveCost point_to_point(const GroupTopology& g, double bytes) {
  CollectiveCost best;
  if (measured(GroupTopology{2, g.per_node, g.intra, g.inter, g.measured, g.stride}, MeasuredOp::p2p, bytes, best))
    return best;
  const Link l = g.flat_link();
  return {l.alpha + bytes * l.beta, Algorithm::pairwise};
}

}  // namespace lattice::plan
