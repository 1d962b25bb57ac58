#pragma once
// Pipeline schedules as data (docs/design.md §6). build_schedule() is a pure function returning, for each
// pipeline rank, the ordered list of actions that rank runs in one training step. The executor
// runs these lists with non-blocking MPI point-to-point; the simulator, the SVG timeline and the
// tests read the same lists, so what is drawn and tested is what runs.
//
// Execution contract for a consumer of an Action list:
//   1. if recv_from != kNoPeer, wait for the tensor that rank sends for this (pass, micro_batch,
//      stage): activations for a forward, the output gradient for a backward;
//   2. run the pass of model chunk `chunk` on micro-batch `micro_batch`;
//   3. if send_to != kNoPeer, send the result (activations / input gradient) without waiting.
// A backward consumes the activations its own forward kept on this rank (a local dependency).
// Between any two ranks, messages of one kind (activations or gradients) are sent in exactly the
// order the receiver's list consumes them, so with MPI's non-overtaking rule one tag per kind is
// enough, and receives can be posted ahead in list order.
#include <string>
#include <vector>

namespace lattice::parallel::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1, pipedream_2bw };
// backward = the whole backward; a zero-bubble schedule splits it into backward_input (B: the
// input gradient, which the previous stage waits for) and backward_weight (W: the parameter
// gradients, which nobody waits for, so it fills the bubbles).
// step_end appears only in a run's lists (build_run): where a step ends and the trainer's collectives
// over the pipeline (loss, gradient norm, tied embedding) make every rank wait for every other.
enum class Pass { forward, backward, backward_input, backward_weight, step_end };

// PipeDream-2BW never flushes: a step's list may run backwards of the previous global batch (Action::batch
// −1). `whole` is a step alone (1F1B's list); `first` starts the stream (after a start, a resume or a
// drain), `steady` continues it, `last` drains it (docs/design.md §6.3). Other schedules: whole only.
enum class Phase { whole, first, steady, last };

inline constexpr int kNoPeer = -1;  // the ends: data loader before stage 0, the loss after the last

struct Action {
  Pass pass = Pass::forward;
  int micro_batch = 0;  // 0..n_mb-1
  int chunk = 0;        // model chunk on this rank, 0..m-1
  int stage = 0;        // global virtual stage = chunk·p + rank: layers [stage, stage+1)·L/(p·m)
  int recv_from = kNoPeer;  // rank producing this action's input (activations or output gradient)
  int send_to = kNoPeer;    // rank consuming this action's output (activations or input gradient)
  int batch = 0;            // the global batch, relative to the step's: −1 for PipeDream-2BW's previous one

  bool operator==(const Action&) const = default;
};

using RankActions = std::vector<Action>;

// A backward of either kind: receives an output gradient and sends an input gradient.
inline bool is_backward(Pass pass) { return pass == Pass::backward || pass == Pass::backward_input; }

// "gpipe" | "1f1b" | "interleaved" | "zb-h1" | "pipedream-2bw" (the --schedule spellings); InputError otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);
const char* schedule_name(ScheduleKind kind);

// Checks p ≥ 1, n_mb ≥ 1, m ≥ 1, m > 1 only (and always) for interleaved, interleaved needs p ≥ 2
// and n_mb a multiple of p (Megatron's classic constraint), PipeDream-2BW n_mb ≥ p (a stage's tail of
// one batch must end before the batch after the next starts there: two weight versions suffice).
// Throws lattice::InputError, one line.
void validate_schedule(ScheduleKind kind, int p, int n_mb, int m);

// For each rank 0..p-1, its actions in execution order (validates first).
//   gpipe:       all n_mb forwards, then all n_mb backwards (micro-batch order both times).
//   one_f_one_b: min(p−rank−1, n_mb) warm-up forwards, then forward/backward pairs, then the
//                cool-down backwards (PipeDream-flush as in Megatron-LM).
//   interleaved: Megatron-LM's virtual pipeline: chunks visited in groups of p micro-batches,
//                warm-up of (p−rank−1)·2 + (m−1)·p forwards (all m·n_mb when n_mb == p).
//   zb_h1:       Qi et al. 2023's ZB-H1: rank r's 1F1B list with each backward an input pass B,
//                the weight pass W(i−r) right after B(i) (i ≥ r), and the last r W's at the end. Its
//                F/B order is 1F1B's, W has no messages: as deadlock-free as 1F1B, rank 0 holds
//                1F1B's peak, and each W fills time 1F1B's rank r spends waiting.
//                (docs/design.md §6)
//   pipedream_2bw: the `whole` phase (a one-step run), which is 1F1B's list.
std::vector<RankActions> build_schedule(ScheduleKind kind, int p, int n_mb, int m);

// One step's lists in `phase`. Only PipeDream-2BW has phases other than whole: rank r runs the
// stream F(k+w) B(k), w = p−r−1, k the micro-batch's index over all batches, and a step's list is
// the stretch from the step's first forward up to the next step's: its n forwards, the last w
// backwards of the previous batch (batch −1; not in `first`) and its own first n−w backwards (all n
// in `last`).
std::vector<RankActions> build_step_schedule(ScheduleKind kind, int p, int n_mb, int m, Phase phase);
// The phase of a run's step: `first` after a drain (or at the start), `last` when it drains.
Phase step_phase(bool after_drain, bool drains);
// A run of steps in the given phases as one list per rank, for the simulator and the timeline:
// micro-batches numbered over the run (batch·n_mb + micro-batch, batch 0), each step closed by a
// step_end that every rank reaches before any goes on.
std::vector<RankActions> build_run(ScheduleKind kind, int p, int n_mb, int m, const std::vector<Phase>& phases);

// "F3" / "B3" / "W3" (a split backward's input pass is drawn B), with ".c1" for chunk 1 when m > 1 —
// the label drawn in the timeline.
std::string action_label(const Action& a, int m);
// One line for humans: "F3.c1 <-r2 ->r0" (arrows only where there is a peer).
std::string describe_action(const Action& a, int m);

}  // namespace lattice::parallel::pipeline
