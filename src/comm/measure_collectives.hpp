#pragma once
// `lattice bench` under mpirun: the seconds each collective takes through this project's own
// Communicator (so the ring's scratch and its sum loop are paid), for every group shape a layout on
// the world's ranks can use, with all the groups of one split running at once as they do in a run.
// Plain structs: cli/bench_cmd.cpp writes them as JSON and plan/measure.cpp reads that into a
// plan::CommTable.
//
// Needs MPI started (an MpiSession); every function below is collective over MPI_COMM_WORLD.
#include <cstdint>
#include <vector>

namespace lattice::comm {

// What is timed, in the blocking form and in the non-blocking form the engine calls (then waits):
//   all_reduce      all_reduce                | all_reduce_async            (DP/ZeRO-0 buckets)
//   reduce_scatter  reduce_scatter (ring)     | reduce_scatter_v_async      (ZeRO 1-3)
//   all_gather      all_gather (MPI_Allgather)| all_gather_v_async (ring)   (ZeRO 1-3)
//   all_to_all      all_to_all                | all_to_all_v                (MoE dispatch/combine)
//   p2p             send + recv ping-pong     | send_async + recv, then wait (the pipeline executor)
enum class BenchOp { all_reduce, reduce_scatter, all_gather, all_to_all, p2p };
inline constexpr BenchOp kBenchOps[] = {BenchOp::all_reduce, BenchOp::reduce_scatter, BenchOp::all_gather,
                                        BenchOp::all_to_all, BenchOp::p2p};
const char* bench_op_name(BenchOp op);  // "all_reduce", ..., "p2p" (the JSON keys)

// `bytes` is the whole buffer as the engine passes it: all-reduce's n, reduce-scatter's input,
// all-gather's output, all-to-all's total per rank, one p2p message. `seconds` is the median of the
// timed calls, each the slowest rank's time (a p2p call is half a round trip: one message).
struct BenchSample {
  double bytes = 0, seconds = 0;
  int calls = 0;  // timed calls behind the median
};
struct BenchCurve {
  BenchOp op = BenchOp::all_reduce;
  bool engine_async = false;
  std::vector<BenchSample> samples;  // ascending bytes; may stop early when the budget ran out
};
// Ranks {first + j·stride : j < size} form a group; the world splits into world/size such groups.
struct GroupShape {
  int size = 2, stride = 1;
};
struct GroupBench {
  GroupShape shape;
  int concurrent = 1;  // groups of this shape running at once
  std::vector<BenchCurve> curves;
};

struct CollectiveBenchOptions {
  double budget_s = 30;                        // the whole measurement, communicators and buffers included
  int64_t max_bytes = int64_t(256) << 20;      // all-reduce, reduce-scatter, all-gather
  int64_t max_small_bytes = int64_t(16) << 20; // p2p and all-to-all (capped by max_bytes too)
  int min_calls = 3, max_calls = 25;           // timed calls per cell (2 at and past 64 MiB)
};

struct CollectiveBench {
  int ranks = 1, ranks_on_host = 1;
  int64_t max_bytes = 0, max_small_bytes = 0;  // the caps used (lowered to fit in memory)
  double seconds = 0;                          // wall time spent
  int skipped = 0;                             // cells left out when the budget ran out
  std::vector<GroupBench> groups;
};

// Every (size g, stride k) with g >= 2 and g·k dividing the world: (2,1) on 2 ranks; (2,1), (2,2),
// (4,1) on 4 — the TP, DP, PP and EP groups any layout of that many ranks forms.
std::vector<GroupShape> layout_group_shapes(int world);

// Sizes 8 B, 64 B, ... (×8) and the cap itself when it is not one of them. Each (size, group shape,
// op, form) cell makes one untimed call, then timed calls (world barrier, call, the slowest rank's
// time) until rank 0, which alone decides and tells every rank after each call, sees enough: at
// least min_calls and the cell's share of the remaining budget spent, or max_calls. Sizes go
// ascending over every cell, so a budget that runs out drops the largest sizes; a cell whose
// predicted time (its previous size's, scaled) would pass the budget is skipped with all its larger
// sizes. Caps are lowered until three buffers per rank fit in half the memory.
CollectiveBench measure_collectives(const CollectiveBenchOptions& options);

// World helpers for the rest of the bench (collective over MPI_COMM_WORLD).
int world_rank();
int world_size();
int world_ranks_on_host();
void world_barrier();
double world_min(double value);
double world_max(double value);

}  // namespace lattice::comm
