#pragma once
// α–β costs of the collectives a layout issues (seeds: ring, halving-doubling with
// non-power-of-two ranks after Rabenseifner, tree, 2D torus). The cheapest algorithm the group's
// topology allows is chosen, as NCCL/MPI tuners do by message size and topology.
#include <string>

#include "plan/hardware.hpp"

namespace lattice::plan {

enum class Algorithm { none, ring, halving_doubling, tree, torus2d, pairwise, measured };
const char* to_string(Algorithm a);

// Where a group's ranks sit: `size` ranks, `per_node` of them in each node (size when the group
// fits in one node). Flat algorithms over several nodes run at the inter-node link's speed.
struct GroupTopology {
  int size = 1;
  int per_node = 1;
  Link intra, inter;
  // --hardware local: this machine's measured MPI times (a group of `size` ranks `stride` apart),
  // used instead of the α–β algorithms wherever the bench measured the operation.
  const CommTable* measured = nullptr;
  int stride = 1;
  int nodes() const { return (size + per_node - 1) / per_node; }
  Link flat_link() const { return nodes() > 1 ? inter : intra; }
};
// Topology of a group of `size` ranks spaced `stride` apart in the global rank order.
GroupTopology group_topology(const Hardware& hw, int size, int stride);

struct CollectiveCost {
  double seconds = 0;
  Algorithm algorithm = Algorithm::none;
};

// All-reduce of `bytes` per rank, each algorithm on its own.
double ring_all_reduce(int n, const Link& l, double bytes);              // 2(n-1)α + 2(n-1)/n·nβ
double halving_doubling_all_reduce(int n, const Link& l, double bytes);  // 2log2(n)α + 2(n-1)/n·nβ
double tree_all_reduce(int n, const Link& l, double bytes);              // pipelined double tree
double torus2d_all_reduce(int per_node, int nodes, const Link& intra, const Link& inter,
                          double bytes);

// Reduce-scatter and all-gather of a `bytes` buffer (each rank ends with / starts from bytes/n).
double ring_half(int n, const Link& l, double bytes);              // (n-1)α + (n-1)/n·nβ
double halving_doubling_half(int n, const Link& l, double bytes);  // log2(n)α + (n-1)/n·nβ
double torus2d_half(int per_node, int nodes, const Link& intra, const Link& inter, double bytes);

// All-to-all in which each of the n ranks sends `sent_bytes` in all, spread evenly over the n−1 others
// (pairwise exchange: n−1 steps of one sent/(n−1)-byte message each, the per_node−1 peers inside the
// node over the intra-node link, the rest over the inter-node link):
// (k−1)(α_intra + mβ_intra) + (n−k)(α_inter + mβ_inter), m = sent/(n−1), k = per_node.
double pairwise_all_to_all(int n, int per_node, const Link& intra, const Link& inter, double sent_bytes);

// The cheapest algorithm for this group and size (the measured time where the group has one).
CollectiveCost all_reduce(const GroupTopology& g, double bytes);
CollectiveCost reduce_scatter(const GroupTopology& g, double bytes);  // same cost as all-gather
CollectiveCost all_gather(const GroupTopology& g, double bytes);
CollectiveCost all_to_all(const GroupTopology& g, double sent_bytes);  // pairwise exchange
CollectiveCost point_to_point(const GroupTopology& g, double bytes);   // one message of `bytes` to a neighbour

}  // namespace lattice::plan
