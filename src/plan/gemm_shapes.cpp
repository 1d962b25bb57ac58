#include "plan/gemm_shapes.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "plan/measure.hpp"
#include "tensor/bf16.hpp"

namespace lattice::plan {

double gemm_flops(const GemmShape& s) { return 2.0 * double(s.batch) * double(s.M) * double(s.N) * double(s.K); }

namespace {

GemmShape shape(int64_t batch, int64_t M, int64_t N, int64_t K, bool trans_a = false, bool trans_b = false,
                bool accumulate = false) {
  GemmShape s;
  s.batch = batch, s.M = M, s.N = N, s.K = K, s.trans_a = trans_a, s.trans_b = trans_b, s.accumulate = accumulate;
  return s;
}

// A linear layer y[N, out] = x[N, in] · W[in, out]: forward, dX = dy · Wᵀ, dW += xᵀ · dy.
void linear(std::vector<GemmCall>& calls, int64_t rows, int64_t in, int64_t out, bool mlp = false,
            bool forward16 = false, bool input_grad16 = false) {
  calls.push_back({shape(1, rows, out, in), GemmPass::forward, false, mlp, forward16});
  calls.push_back({shape(1, rows, in, out, false, true), GemmPass::backward_input, false, mlp, input_grad16});
  calls.push_back({shape(1, in, out, rows, true, false, true), GemmPass::backward_weight, false, mlp});
}

}  // namespace

std::vector<GemmCall> layer_gemms(const analysis::ActivationShape& x) {
  // Under context parallelism the linears see this rank's s/c positions, and attention (Ulysses) runs
  // a/(t·c) heads over the whole s.
  const int64_t rows = x.positions() * x.b, h = x.h, t = x.t, heads = x.a / x.t / x.cp, dh = x.h / x.a;
  std::vector<GemmCall> calls;
  linear(calls, rows, h, 3 * h / t, false, true);  // QKV
  const int64_t batch = x.b * heads;
  calls.push_back({shape(batch, x.s, x.s, dh, false, true), GemmPass::forward, true});           // QKᵀ
  calls.push_back({shape(batch, x.s, dh, x.s), GemmPass::forward, true});                        // P·V
  calls.push_back({shape(batch, x.s, x.s, dh, false, true), GemmPass::backward_input, true});    // dP = dctx·Vᵀ
  calls.push_back({shape(batch, x.s, dh, x.s, true, false), GemmPass::backward_input, true});    // dV = Pᵀ·dctx
  calls.push_back({shape(batch, x.s, dh, x.s), GemmPass::backward_input, true});                 // dQ = dS·K
  calls.push_back({shape(batch, x.s, dh, x.s, true, false), GemmPass::backward_input, true});    // dK = dSᵀ·Q
  linear(calls, rows, h / t, h);          // projection
  linear(calls, rows, h, 4 * h / t, true, true);         // FC1
  linear(calls, rows, 4 * h / t, h, true, false, true);  // FC2
  return calls;
}

std::vector<GemmCall> moe_block_gemms(const analysis::MoEKeptShape& m, int local_experts) {
  // The router GEMMs run on this rank's tokens (s/c positions under CP).
  const int64_t N = m.local_tokens(), h = m.h, E = m.experts, f = m.ffn_hidden / m.t;
  std::vector<GemmCall> calls;
  for (int router = 0; router < (m.noisy_router ? 2 : 1); ++router) {
    calls.push_back({shape(1, N, E, h), GemmPass::forward, false});
    calls.push_back({shape(1, h, E, N, true, false, true), GemmPass::backward_weight, false});
    calls.push_back({shape(1, N, h, E, false, true, true), GemmPass::backward_input, false});
  }
  const int experts = std::max(1, local_experts);
  for (int j = 0; j < experts; ++j) {
    // This expert's share of the received rows, in the engine's power-of-two chunks.
    int64_t rows = m.received / experts + (j < m.received % experts ? 1 : 0);
    while (rows > 0) {
      int64_t chunk = 1;
      while (chunk * 2 <= rows) chunk *= 2;
      linear(calls, chunk, h, f);  // FC1
      linear(calls, chunk, f, h);  // FC2
      rows -= chunk;
    }
  }
  return calls;
}

std::vector<GemmCall> head_gemms(const analysis::ActivationShape& x) {
  const int64_t rows = x.positions() * x.b, v = x.v / x.t;  // this rank's positions' logits
  return {{shape(1, rows, v, x.h, false, true), GemmPass::forward, false, false, true},
          {shape(1, rows, x.h, v), GemmPass::backward_input, false},
          {shape(1, v, x.h, rows, true, false, true), GemmPass::backward_weight, false}};
}

double GemmTimer::seconds(const GemmShape& s, bool bf16) {
  const auto key = std::make_tuple(s.batch, s.M, s.N, s.K, s.trans_a, s.trans_b, bf16);
  if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
  const size_t a_n = size_t(s.batch * s.M * s.K), b_n = size_t(s.batch * s.K * s.N), c_n = size_t(s.batch * s.M * s.N);
  // In a step a GEMM's operands come from memory, not from the cache the previous call left them in:
  // the calls cycle through copies that together pass 64 MiB (the caches' size many times over).
  const size_t set_bytes = (a_n + b_n) * (bf16 ? 2 : 4) + c_n * 4;
  const size_t copies = std::clamp<size_t>((size_t(64) << 20) / std::max<size_t>(set_bytes, 1) + 1, 1, 16);
  std::vector<std::vector<float>> a(copies, std::vector<float>(a_n, 0.5f)), b(copies, std::vector<float>(b_n, 0.25f)),
      c(copies, std::vector<float>(c_n, 0.0f));
  std::vector<std::vector<uint16_t>> a16(bf16 ? copies : 0, std::vector<uint16_t>(a_n)),
      b16(bf16 ? copies : 0, std::vector<uint16_t>(b_n));
  for (size_t i = 0; bf16 && i < copies; ++i) {
    to_bf16(a[i].data(), a16[i].data(), int64_t(a_n));
    to_bf16(b[i].data(), b16[i].data(), int64_t(b_n));
  }
  auto call = [&](size_t i) {
    const GemmOperand ao = bf16 ? GemmOperand{a16[i].data(), DType::bf16} : f32_operand(a[i].data());
    const GemmOperand bo = bf16 ? GemmOperand{b16[i].data(), DType::bf16} : f32_operand(b[i].data());
    gemm(s, ao, bo, c[i].data());
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads_);
  size_t next = 0;  // each call on the next copy of the operands
  const double seconds = median_call_seconds(0.3, [&] { call(next++ % copies); }, 50);
  omp_set_num_threads(saved);
  return cache_[key] = seconds;
}

namespace {
// A shape whose fused attention would take more than about half a second a call on this CPU is timed
// smaller and scaled, so that a plan never waits minutes on one timing: first on fewer heads (each
// head's work is separate, so the time is linear in b·a), then on a shorter sequence (the causal work
// grows as s², the factor applied; the tiles' edges make that slightly optimistic). `unit`: what s
// must stay a multiple of (the ring's 2c chunks of whole 64-row tiles).
constexpr double kTimedFlops = 2e10;
double causal_flops(const FlashShape& x) { return 2.0 * double(x.b * x.a) * double(x.s) * double(x.s) * double(x.dh); }
FlashShape timed_shape(const FlashShape& x, int64_t unit, double& factor) {
  FlashShape m = x;
  factor = 1.0;
  if (causal_flops(m) <= kTimedFlops) return m;
  int64_t heads = x.b * x.a;
  while (heads > 1 && causal_flops({1, heads, m.s, m.dh}) > kTimedFlops) heads = (heads + 1) / 2;
  m.b = 1, m.a = heads;
  factor = double(x.b * x.a) / double(heads);
  while (causal_flops(m) > kTimedFlops && m.s / 2 >= unit && (m.s / 2) % unit == 0) {
    m.s /= 2;
    factor *= 4.0;
  }
  return m;
}
}  // namespace

double GemmTimer::attention_seconds(const FlashShape& full, int c, bool dropout, bool backward) {
  const auto key = std::make_tuple(full.b, full.a, full.s, full.dh, c, dropout, backward);
  if (const auto it = attention_cache_.find(key); it != attention_cache_.end()) return it->second;
  double factor = 1.0;
  const FlashShape x = timed_shape(full, c > 0 ? 2 * int64_t(c) * 64 : 64, factor);
  // One rank's tensors: its S/c positions under the ring, the whole sequence otherwise.
  const int64_t positions = c > 0 ? x.s / c : x.s;
  const size_t n = size_t(x.b * x.a * positions * x.dh), rows = size_t(x.b * x.a * positions);
  std::vector<float> q(n), k(n), v(n), out(n), dout(n), dq(n), dk(n), dv(n), lse(rows);
  for (size_t i = 0; i < n; ++i) {  // varied, finite values: the softmax's exponentials differ
    q[i] = float(int(i * 7 % 13) - 6) * 0.05f;
    k[i] = float(int(i * 5 % 11) - 5) * 0.05f;
    v[i] = dout[i] = float(int(i % 9) - 4) * 0.1f;
  }
  AttentionDropout drop;
  drop.p = dropout ? 0.1f : 0.0f;
  const int64_t dh = x.dh;
  // The ring's steps on rank 0, every owner's K, V stood in for by this rank's (the values do not
  // change the work); the backward's blocks merge into the zeroed dQ and partial sums, as the ring's.
  auto ring_pass = [&](bool grads) {
    for (int t = 0; t < c; ++t)
      for_each_ring_block(x.b, x.a, x.s, dh, c, 0, (c - t) % c, [&](FlashBlock blk, int64_t qrow, int64_t krow) {
        if (!grads) {
          flash_block_forward(out.data() + qrow * dh, lse.data() + qrow, q.data() + qrow * dh, k.data() + krow * dh,
                              v.data() + krow * dh, blk, drop);
          return;
        }
        blk.merge = true;
        flash_block_backward(dq.data() + qrow * dh, dk.data() + krow * dh, dv.data() + krow * dh,
                             dout.data() + qrow * dh, q.data() + qrow * dh, k.data() + krow * dh, v.data() + krow * dh,
                             out.data() + qrow * dh, lse.data() + qrow, blk, drop);
      });
  };
  auto forward = [&] {
    if (c > 0) ring_pass(false);
    else flash_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), x, drop);
  };
  auto grads = [&] {
    if (c > 0) ring_pass(true);
    else flash_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                  out.data(), lse.data(), x, drop);
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads_);
  forward();  // the output and log-sum-exp the backward reads
  const double seconds = backward ? median_call_seconds(0.3, grads, 20) : median_call_seconds(0.3, forward, 20);
  omp_set_num_threads(saved);
  return attention_cache_[key] = seconds * factor;
}

}  // namespace lattice::plan
