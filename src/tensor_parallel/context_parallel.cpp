#include "tensor_parallel/context_parallel.hpp"

#include "backend/device_ops.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

namespace {

// The exchange's rank-major staging: what goes to (or came from) rank j is chunk j. Grown once, reused;
// collectives are issued from one thread.
float* send_buffer(int64_t n) {
  static ScratchArray<float> buf(MemoryCategory::communication, "cp_send");
  return buf.ensure(n);
}
float* recv_buffer(int64_t n) {
  static ScratchArray<float> buf(MemoryCategory::communication, "cp_recv");
  return buf.ensure(n);
}

// Chunk i of the exchange in sequence layout is [b, a/c, S/c, dh], rank i's local positions of one
// head block; fn(offset in the chunks, offset in [b, a/c, S, dh], floats) for each run of C positions.
template <class F>
void for_each_run(const HeadBlocks& x, const SequenceSplit& whole, F&& fn) {
  const int c = whole.c;
  const int64_t ah = x.a / c, sl = whole.local(), C = whole.chunk();
  for (int i = 0; i < c; ++i) {
    const SequenceSplit of_i{x.S, c, i};
    for (int64_t bh = 0; bh < x.b * ah; ++bh)
      for (int k = 0; k < 2; ++k)
        fn(((int64_t(i) * x.b * ah + bh) * sl + k * C) * x.dh, (bh * x.S + of_i.global(k * C)) * x.dh, C * x.dh);
  }
}

}  // namespace

void sequence_to_heads(const ContextParallel& cp, const float* local, float* heads, const HeadBlocks& x) {
  const int c = cp.size();
  const SequenceSplit whole = cp.split(x.S);
  const int64_t ah = x.a / c, block = ah * whole.local() * x.dh, n = x.b * x.a * whole.local() * x.dh;
  float* send = send_buffer(n);
  float* recv = recv_buffer(n);
  // Head block j of every row goes to rank j: in [b, a, S/c, dh] it is contiguous per row.
  for (int j = 0; j < c; ++j)
    for (int64_t bi = 0; bi < x.b; ++bi)
      dev::copy(send + (int64_t(j) * x.b + bi) * block, local + (bi * x.a + int64_t(j) * ah) * whole.local() * x.dh,
                block);
  cp.group->all_to_all({send, size_t(n)}, {recv, size_t(n)});
  for_each_run(x, whole, [&](int64_t chunk, int64_t global, int64_t len) { dev::copy(heads + global, recv + chunk, len); });
}

void heads_to_sequence(const ContextParallel& cp, const float* heads, float* local, const HeadBlocks& x) {
  const int c = cp.size();
  const SequenceSplit whole = cp.split(x.S);
  const int64_t ah = x.a / c, block = ah * whole.local() * x.dh, n = x.b * x.a * whole.local() * x.dh;
  float* send = send_buffer(n);
  float* recv = recv_buffer(n);
  for_each_run(x, whole, [&](int64_t chunk, int64_t global, int64_t len) { dev::copy(send + chunk, heads + global, len); });
  cp.group->all_to_all({send, size_t(n)}, {recv, size_t(n)});
  for (int j = 0; j < c; ++j)
    for (int64_t bi = 0; bi < x.b; ++bi)
      dev::copy(local + (bi * x.a + int64_t(j) * ah) * whole.local() * x.dh, recv + (int64_t(j) * x.b + bi) * block,
                block);
}

}  // namespace lattice::parallel
