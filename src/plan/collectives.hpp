#pragma once
// α–β costs of the collectives a layout issues (seeds: ring, halving-doubling with
// non-power-of-two ranks after Rabenseifner, tree, 2D torus). The cheapest algorithm the group's
// topology allows is chosen, as NCCL/MPI tuners do by message size and topology.
#include <string>

#include "plan/hardware.hpp"

namespace lattice::plan {

enum class Algorithm { none, ring, halving_doubling, tree, torus2d };
const char* to_string(Algorithm a);

// Where a group's ranks sit: `size` ranks, `per_node` of them in each node (size when the group
// fits in one node). Flat algorithms over several nodes run at the inter-node link's speed.
struct GroupTopology {
  int size = 1;
  int per_node = 1;
  Link intra, inter;
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

// The cheapest algorithm for this group and size.
CollectiveCost all_reduce(const GroupTopology& g, double bytes);
CollectiveCost reduce_scatter(const GroupTopology& g, double bytes);  // same cost as all-gather
CollectiveCost all_gather(const GroupTopology& g, double bytes);

}  // namespace lattice::plan
