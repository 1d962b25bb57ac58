#pragma once
// What one optimizer step's time went to on each rank, measured from a `lattice train --trace` file,
// in the parts the planner predicts (plan/time_model.hpp, TimePlan), so the two can be set side by side.
//
// A rank's spans nest (core/trace.hpp: one recording thread), so every nanosecond of the step lies in
// exactly one innermost span, and goes to one part:
//   recompute    a recompute span and everything in it (its GEMMs, element-wise work, TP comm)
//   dp_comm      comm_dp (expert-DP too) and comm_embedding, wherever they are
//   bubble       receive_wait (a pipeline receive waiting for its peer), the send span (the
//                pipeline's drain of its sends at the end of the step) with what it holds, and a
//                comm_pp in the step itself, outside passes and optimizer: the loss's gather over
//                the stages, where a stage that finished early waits for the others (the last
//                stage's share of the pipeline's idle slots; 8 bytes, so no transfer to speak of)
//   gemm         gemm spans outside recompute
//   tp_comm, ep_comm, cp_comm, pp_comm   comm_tp, comm_ep, comm_cp (context parallelism's all-to-alls
//                and the ring's waits: what its blocks did not hide), comm_pp (and a receive's own time besides its
//                wait and its copy) outside recompute, the drain and the above
//   elementwise  the forward / backward / backward_input / backward_weight spans' own time
//   optimizer    the optimizer span's own time (its comm goes to that comm's part)
//   other        the step span's own time (the loader, loss reductions, bookkeeping) and comm_other
// The parts add up to the step span exactly (integer nanoseconds, converted once).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lattice {

struct StepSplit {
  int rank = 0;
  int64_t step = -1;  // the optimizer step (0-based, the trace's args.step)
  double step_s = 0;  // the step span
  double gemm_s = 0, elementwise_s = 0, recompute_s = 0, tp_comm_s = 0, ep_comm_s = 0, cp_comm_s = 0, pp_comm_s = 0,
         bubble_s = 0, dp_comm_s = 0, optimizer_s = 0, other_s = 0;  // add up to step_s exactly
};

// One optimizer step (-1: the last in the file) of a `lattice train --trace` file, one entry per
// rank in rank order. InputError on a file that is not a lattice trace, spans that overlap without
// nesting, a step that is not in the file, or a file with no step spans (written by an older lattice).
std::vector<StepSplit> split_step(const std::string& trace_path, int step = -1);

// Step `step` (args.step) of this rank's own recorded events (core/trace.hpp's flat records, from
// index `from` on: the caller's mark where the step began), split as above; nullopt when no span of
// that step is among them. The trainer calls it after every step (report/step_time.hpp).
std::optional<StepSplit> split_recorded_step(const std::vector<int64_t>& events, size_t from, int64_t step);

// The split in the three parts a straggler shows in (docs/recovery.md, "Stragglers"):
//   comm_wait  tp_comm + ep_comm + cp_comm + pp_comm + dp_comm: blocked in a collective or a pipeline
//              receive's copy, which includes waiting for a slower peer to arrive
//   bubble     the pipeline's idle time (above)
//   compute    the rest: GEMMs, element-wise work, recompute, the optimizer, and the step's own
//              bookkeeping ("other": the loader, world-group collectives such as fp16's overflow
//              vote); the three add up to step_s.
struct StepShares {
  double step_s = 0, compute_s = 0, comm_wait_s = 0, bubble_s = 0;
};
StepShares shares_of(const StepSplit& split);

// The parts in TimePlan's order with their names ("gemm", ...), for tables and JSON ("gemm_s").
struct SplitPart {
  const char* name;
  double StepSplit::*seconds;
};
const std::vector<SplitPart>& split_parts();

}  // namespace lattice
