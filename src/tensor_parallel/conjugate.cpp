#include "tensor_parallel/conjugate.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/device_ops.hpp"
#include "core/region.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

namespace {

float* pack_buffer(int64_t n) {
  static ScratchArray<float> buf(MemoryCategory::communication, "sp_pack");  // collectives: one thread
  return buf.ensure(n);
}

// [b, s, h] ⇄ [t][b, s/t, h]: the rank-major order the collectives exchange chunks in.
void to_rank_major(const float* full, float* chunks, const SequenceShape& x, int t) {
  const int64_t sl = x.s / t, row = sl * x.h;
  for (int r = 0; r < t; ++r)
    for (int64_t bi = 0; bi < x.b; ++bi)
      dev::copy(chunks + (r * x.b + bi) * row, full + (bi * x.s + r * sl) * x.h, row);
}
void from_rank_major(const float* chunks, float* full, const SequenceShape& x, int t) {
  const int64_t sl = x.s / t, row = sl * x.h;
  for (int r = 0; r < t; ++r)
    for (int64_t bi = 0; bi < x.b; ++bi)
      dev::copy(full + (bi * x.s + r * sl) * x.h, chunks + (r * x.b + bi) * row, row);
}

double ring_share(const comm::Communicator& tp, double bytes, double halves) {
  const double t = tp.size();
  return halves * (t - 1) / t * bytes;
}

}  // namespace

ConjugateTraffic& conjugate_traffic() {
  static ConjugateTraffic traffic;
  return traffic;
}

namespace {
// Adds to one counter and to the layer the model is running (core/region.hpp), if any.
void count(double& counter, double bytes) {
  counter += bytes;
  if (current_layer() >= 0) conjugate_traffic().by_layer[current_layer()] += bytes;
}
}  // namespace

void f_forward(const float* x, float* y, int64_t n) {
  dev::copy(y, x, n);  // nothing to do when x is y
}
void f_backward(comm::Communicator& tp, float* grad, int64_t n) {
  tp.all_reduce({grad, size_t(n)});
  count(conjugate_traffic().f, ring_share(tp, double(n) * 4, 2));
}

void fbar_forward(comm::Communicator& tp, float* x, int64_t n) {
  tp.all_reduce({x, size_t(n)});
  count(conjugate_traffic().fbar, ring_share(tp, double(n) * 4, 2));
}
void fbar_backward(const float* grad_out, float* grad_in, int64_t n) { f_forward(grad_out, grad_in, n); }

namespace {
void gather_sequence(comm::Communicator& tp, const float* shard, float* full, const SequenceShape& x) {
  const int t = tp.size();
  const int64_t local = x.b * (x.s / t) * x.h;
  float* chunks = pack_buffer(local * t);
  tp.all_gather({shard, size_t(local)}, {chunks, size_t(local * t)});
  from_rank_major(chunks, full, x, t);
}

void scatter_sequence(comm::Communicator& tp, const float* grad_full, float* grad_shard, const SequenceShape& x) {
  const int t = tp.size();
  const int64_t local = x.b * (x.s / t) * x.h;
  float* chunks = pack_buffer(local * t);
  to_rank_major(grad_full, chunks, x, t);
  tp.reduce_scatter({chunks, size_t(local * t)}, {grad_shard, size_t(local)});
}
double full_bytes(const SequenceShape& x) { return double(x.b * x.s * x.h) * 4; }
}  // namespace

void g_forward(comm::Communicator& tp, const float* shard, float* full, const SequenceShape& x) {
  gather_sequence(tp, shard, full, x);
  count(conjugate_traffic().g, ring_share(tp, full_bytes(x), 1));
}
void g_backward(comm::Communicator& tp, const float* grad_full, float* grad_shard, const SequenceShape& x) {
  scatter_sequence(tp, grad_full, grad_shard, x);
  count(conjugate_traffic().g, ring_share(tp, full_bytes(x), 1));
}
void gbar_forward(comm::Communicator& tp, const float* partial_full, float* shard, const SequenceShape& x) {
  scatter_sequence(tp, partial_full, shard, x);
  count(conjugate_traffic().gbar, ring_share(tp, full_bytes(x), 1));
}
void gbar_backward(comm::Communicator& tp, const float* grad_shard, float* grad_full, const SequenceShape& x) {
  gather_sequence(tp, grad_shard, grad_full, x);
  count(conjugate_traffic().gbar, ring_share(tp, full_bytes(x), 1));
}

const float* enter_forward(const TensorParallel& tp, const float* x_local, float* full, const SequenceShape& x,
                           bool regather) {
  if (!tp.active() || !tp.sequence_parallel) return x_local;  // f: identity
  if (regather) {
    gather_sequence(*tp.group, x_local, full, x);
    count(conjugate_traffic().regather, ring_share(*tp.group, full_bytes(x), 1));
  } else {
    g_forward(*tp.group, x_local, full, x);
  }
  return full;
}

void enter_backward(const TensorParallel& tp, float* grad_full, float* grad_local, const SequenceShape& x) {
  if (!tp.active()) {
    f_forward(grad_full, grad_local, x.b * x.s * x.h);
  } else if (tp.sequence_parallel) {
    g_backward(*tp.group, grad_full, grad_local, x);
  } else {
    f_backward(*tp.group, grad_full, x.b * x.s * x.h);
    f_forward(grad_full, grad_local, x.b * x.s * x.h);
  }
}

void leave_forward(const TensorParallel& tp, float* partial_full, float* out_local, const SequenceShape& x) {
  if (!tp.active()) {
    f_forward(partial_full, out_local, x.b * x.s * x.h);
  } else if (tp.sequence_parallel) {
    gbar_forward(*tp.group, partial_full, out_local, x);
  } else {
    fbar_forward(*tp.group, partial_full, x.b * x.s * x.h);
    f_forward(partial_full, out_local, x.b * x.s * x.h);
  }
}

const float* leave_backward(const TensorParallel& tp, const float* grad_local, float* grad_full,
                            const SequenceShape& x) {
  if (!tp.active() || !tp.sequence_parallel) return grad_local;  // f̄ backward: identity
  gbar_backward(*tp.group, grad_local, grad_full, x);
  return grad_full;
}

}  // namespace lattice::parallel
