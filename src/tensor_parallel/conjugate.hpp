#pragma once
// Megatron-LM's conjugate operators (docs/design.md §5), one definition each with its forward and backward
// collective side by side. Activations are [b, s, h] (rows = b·s tokens); under sequence
// parallelism a rank holds the sequence shard [b, s/t, h] of positions [r·s/t, (r+1)·s/t).
//
//   op   region            forward                         backward
//   f    enter TP          identity                        all-reduce
//   f̄    leave TP          all-reduce                      identity
//   g    enter TP (SP)     all-gather along the sequence   reduce-scatter along the sequence
//   ḡ    leave TP (SP)     reduce-scatter along sequence   all-gather along the sequence
#include <cstdint>
#include <map>

#include "comm/communicator.hpp"

namespace lattice::parallel {

struct SequenceShape {
  int64_t b = 0, s = 0, h = 0;  // s = the full sequence; each rank holds s / group size positions
};

// Bytes each operator made this rank send (ring accounting, docs/design.md §5), so a report can show that
// TP and TP+SP move the same bytes through f, f̄, g, ḡ (paper §4.3). `regather` counts the
// sequence-parallel backward's second all-gather of a column-parallel GEMM's input (kept as a
// shard to save memory, gathered again for the weight gradient), which the paper's count leaves out.
struct ConjugateTraffic {
  double f = 0, fbar = 0, g = 0, gbar = 0, regather = 0;
  std::map<int, double> by_layer;  // all of the above, by the transformer layer that sent it
  double conjugate() const { return f + fbar + g + gbar; }
};
ConjugateTraffic& conjugate_traffic();  // this process's counters; reset by assigning {}

// f
void f_forward(const float* x, float* y, int64_t n);  // copy (identity) unless y == x
void f_backward(comm::Communicator& tp, float* grad, int64_t n);
// f̄
void fbar_forward(comm::Communicator& tp, float* x, int64_t n);
void fbar_backward(const float* grad_out, float* grad_in, int64_t n);  // identity
// g: shard [b, s/t, h] → full [b, s, h]; backward full-gradient → shard gradient (summed)
void g_forward(comm::Communicator& tp, const float* shard, float* full, const SequenceShape& shape);
void g_backward(comm::Communicator& tp, const float* grad_full, float* grad_shard, const SequenceShape& shape);
// ḡ: partial full [b, s, h] → summed shard [b, s/t, h]; backward shard gradient → full
void gbar_forward(comm::Communicator& tp, const float* partial_full, float* shard, const SequenceShape& shape);
void gbar_backward(comm::Communicator& tp, const float* grad_shard, float* grad_full, const SequenceShape& shape);

// Entering / leaving the TP region as the layer sees it: f/f̄ without SP, g/ḡ with SP.
// The tensor-parallel context a layer runs under; group == nullptr means one rank.
struct TensorParallel {
  comm::Communicator* group = nullptr;
  bool sequence_parallel = false;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return group && group->size() > 1; }
};
// x_local → the full-sequence input of a column-parallel GEMM (returns x_local itself without SP).
// `regather` marks the backward's second gather of a kept input (counted apart, see above).
const float* enter_forward(const TensorParallel& tp, const float* x_local, float* full, const SequenceShape& shape,
                           bool regather = false);
// partial full-sequence input gradient (summed over ranks) → gradient of x_local (in place without SP).
void enter_backward(const TensorParallel& tp, float* grad_full, float* grad_local, const SequenceShape& shape);
// partial output of a row-parallel GEMM → summed local output (in place without SP).
void leave_forward(const TensorParallel& tp, float* partial_full, float* out_local, const SequenceShape& shape);
// gradient of the local output → gradient of the full partial output (returns grad_local without SP).
const float* leave_backward(const TensorParallel& tp, const float* grad_local, float* grad_full,
                            const SequenceShape& shape);

}  // namespace lattice::parallel
