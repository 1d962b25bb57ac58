#include "tensor_parallel/ring_attention.hpp"

#include "backend/device_ops.hpp"
#include "kernels/flash_attention.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

namespace {

// Tags of the ring's four streams between a pair of ranks (each in order, apart from the others).
enum RingTag : int { kTagK = 1, kTagV = 2, kTagDK = 3, kTagDV = 4 };

// The ring's buffers (see the header), grown once and reused; collectives come from one thread.
float* ring_buffers(int64_t n) {
  static ScratchArray<float> buf(MemoryCategory::communication, "cp_ring");
  return buf.ensure(n);
}

// One rank's ring: its neighbours, whose K, V it holds in each step, and its blocks (where a rank's
// chunks are: kernels/flash_attention.hpp's for_each_ring_block).
struct Ring {
  const ContextParallel& cp;
  HeadBlocks x;
  int c, r;
  int64_t n;  // elements of one local tensor
  Ring(const ContextParallel& cp_, const HeadBlocks& x_)
      : cp(cp_), x(x_), c(cp_.size()), r(cp_.rank()), n(x_.b * x_.a * (x_.S / cp_.size()) * x_.dh) {}
  int next() const { return (r + 1) % c; }
  int prev() const { return (r + c - 1) % c; }
  int owner(int step) const { return (r - step + c) % c; }  // whose K, V this rank holds in `step`

  // Step t's K, V on to rank r + 1 while the next pair arrives from r − 1 into `arriving` (K, then
  // V); nothing in the last step. Resetting (or destroying) the Pass waits for all four.
  struct Pass {
    comm::Handle send_k, send_v, recv_k, recv_v;
  };
  Pass pass_kv(int t, const float* k, const float* v, float* arriving) const {
    Pass p;
    if (t + 1 == c) return p;
    p.recv_k = cp.group->recv_async({arriving, size_t(n)}, prev(), kTagK);
    p.recv_v = cp.group->recv_async({arriving + n, size_t(n)}, prev(), kTagV);
    p.send_k = cp.group->send_async({k, size_t(n)}, next(), kTagK);
    p.send_v = cp.group->send_async({v, size_t(n)}, next(), kTagV);
    return p;
  }
  // fn(block, query row offset, key row offset) for each of this rank's blocks against `owner`'s K, V
  // (kernels/flash_attention.hpp's for_each_ring_block).
  template <class F>
  void blocks(int owner, F&& fn) const {
    for_each_ring_block(x.b, x.a, x.S, x.dh, c, r, owner, fn);
  }
};

}  // namespace

void ring_attention_forward(const ContextParallel& cp, float* out, float* lse, const float* q, const float* k,
                            const float* v, const HeadBlocks& x, const AttentionDropout& drop) {
  const Ring ring(cp, x);
  const int64_t n = ring.n, dh = x.dh;
  float* kv = ring_buffers(4 * n);  // two K, V pairs
  const float *cur_k = k, *cur_v = v;
  for (int t = 0; t < ring.c; ++t) {
    float* next = kv + (t % 2) * 2 * n;
    Ring::Pass pass = ring.pass_kv(t, cur_k, cur_v, next);
    ring.blocks(ring.owner(t), [&](const FlashBlock& blk, int64_t qrow, int64_t krow) {
      dev::flash_block_forward(out + qrow * dh, lse + qrow, q + qrow * dh, cur_k + krow * dh, cur_v + krow * dh, blk,
                               drop);
    });
    pass = {};  // waited for
    cur_k = next, cur_v = next + n;
  }
}

void ring_attention_backward(const ContextParallel& cp, float* dq, float* dk, float* dv, const float* dout,
                             const float* q, const float* k, const float* v, const float* out, const float* lse,
                             const HeadBlocks& x, const AttentionDropout& drop) {
  const Ring ring(cp, x);
  const int64_t n = ring.n, dh = x.dh;
  float* buffers = ring_buffers(10 * n);
  float* kv = buffers;                // two K, V pairs
  float* partial = buffers + 4 * n;   // two dK, dV partial sums
  float* arriving = buffers + 8 * n;  // the partial sum from rank r − 1
  dev::fill_zero(dq, n);
  const float *cur_k = k, *cur_v = v;
  comm::Handle sent_dk, sent_dv;  // the last step's partial sum, leaving
  for (int t = 0; t < ring.c; ++t) {
    float* next = kv + (t % 2) * 2 * n;
    Ring::Pass pass = ring.pass_kv(t, cur_k, cur_v, next);
    comm::Handle recv_dk, recv_dv;
    if (t > 0) {  // what ranks r − t … r − 1 added to the owner's dK, dV
      recv_dk = cp.group->recv_async({arriving, size_t(n)}, ring.prev(), kTagDK);
      recv_dv = cp.group->recv_async({arriving + n, size_t(n)}, ring.prev(), kTagDV);
    }
    float* mine = partial + (t % 2) * 2 * n;  // free: its send (step t − 2) was waited in step t − 1
    dev::fill_zero(mine, 2 * n);
    ring.blocks(ring.owner(t), [&](FlashBlock blk, int64_t qrow, int64_t krow) {
      blk.merge = true;  // into the zeroed dQ and partial sums
      dev::flash_block_backward(dq + qrow * dh, mine + krow * dh, mine + n + krow * dh, dout + qrow * dh, q + qrow * dh,
                                cur_k + krow * dh, cur_v + krow * dh, out + qrow * dh, lse + qrow, blk, drop);
    });
    if (t > 0) {
      recv_dk.wait(), recv_dv.wait();
      dev::residual_add(mine, arriving, 2 * n);
    }
    sent_dk.wait(), sent_dv.wait();
    sent_dk = cp.group->send_async({mine, size_t(n)}, ring.next(), kTagDK);
    sent_dv = cp.group->send_async({mine + n, size_t(n)}, ring.next(), kTagDV);
    pass = {};  // waited for
    cur_k = next, cur_v = next + n;
  }
  // Step c − 1 sent each partial sum to its owner, complete: this rank's comes from r − 1.
  comm::Handle recv_dk = cp.group->recv_async({dk, size_t(n)}, ring.prev(), kTagDK);
  comm::Handle recv_dv = cp.group->recv_async({dv, size_t(n)}, ring.prev(), kTagDV);
  recv_dk.wait(), recv_dv.wait(), sent_dk.wait(), sent_dv.wait();
}

}  // namespace lattice::parallel
