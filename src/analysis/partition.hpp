#pragma once
// PipeDream's partitioner (Narayanan et al. 2019, without stage replication): split L layers into p
// contiguous stages so that the slowest stage is as fast as possible while every stage fits a
// memory cap (docs/design.md §6). With T_r(i, j) and M_r(i, j) the time and memory of stage r
// holding layers [i, j):
//   A[0][j] = T_0(0, j),  A[r][j] = min over i of max(A[r−1][i], T_r(i, j)),  answer A[p−1][L],
// over the (i, j) whose M_r(i, j) fits. At most O(p·L²) evaluations of each cost, about O(L²) when
// the even split fits (no stage costlier than its slowest is weighed); a stage's time and bytes must
// not shrink as it takes more layers (the search stops growing a stage at the first that does not fit).
#include <functional>
#include <string>
#include <vector>

namespace lattice::analysis {

struct PartitionCosts {
  int layers = 0, stages = 0;
  // Seconds of one micro-batch's forward and backward on stage r holding layers [i, j) (the
  // embedding on the first stage and the head on the last included by the caller).
  std::function<double(int r, int i, int j)> seconds;
  // Bytes a rank of stage r holds with layers [i, j): its peak, everything included.
  std::function<double(int r, int i, int j)> bytes;
};

struct Partition {
  std::vector<int> counts;     // layers per stage
  double slowest_seconds = 0;  // the slowest stage's time
  double peak_bytes = 0;       // the largest stage's memory
};

// A partition with the least slowest-stage time among those whose every stage fits in
// `memory_cap` bytes (ties broken towards a smaller peak where the recursion compares them: a
// deterministic choice, not always the least peak). Throws InputError when none fits, naming the
// smallest peak any partition reaches and that partition; at most 2048 layers.
Partition partition_layers(const PartitionCosts& costs, double memory_cap);

// A partition's figures under the costs (for checks and reports).
Partition evaluate_partition(const PartitionCosts& costs, const std::vector<int>& counts);

}  // namespace lattice::analysis
