// Kernel benchmarks at the GPT-2-small shapes (b = 4, s = 256, h = 768, a = 12, v = 8192):
// GEMM in fp32 and bf16 (the four layer projections, the logits, their backward shapes and the
// batched attention products), LayerNorm, GeLU, causal softmax and the attention core.
// Counters: FLOP/s for GEMMs and attention, bytes/s (read + written) for the memory-bound kernels.
// Threads: OMP_NUM_THREADS (default: all cores); the speed target uses 2.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/softmax.hpp"
#include "model/attention.hpp"
#include "tensor/bf16.hpp"

namespace {

using namespace lattice;

constexpr int64_t kB = 4, kS = 256, kH = 768, kA = 12, kV = 8192, kN = kB * kS;

std::vector<float> random_floats(int64_t n, float scale = 1.0f, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> to_bf16_vec(const std::vector<float>& f) {
  std::vector<uint16_t> h(f.size());
  to_bf16(f.data(), h.data(), int64_t(f.size()));
  return h;
}

// GEMM: C[M,N] = op(A)·op(B). Args: batch, M, N, K, trans_a, trans_b, bf16.
void BM_Gemm(benchmark::State& state) {
  GemmShape g;
  g.batch = state.range(0), g.M = state.range(1), g.N = state.range(2), g.K = state.range(3);
  g.trans_a = state.range(4) != 0, g.trans_b = state.range(5) != 0;
  const bool bf16 = state.range(6) != 0;
  const auto a = random_floats(g.batch * g.M * g.K, 1.0f, 1), b = random_floats(g.batch * g.K * g.N, 1.0f, 2);
  const auto a16 = to_bf16_vec(a), b16 = to_bf16_vec(b);
  std::vector<float> c(static_cast<size_t>(g.batch * g.M * g.N));
  const GemmOperand A = bf16 ? GemmOperand{a16.data(), DType::bf16} : GemmOperand{a.data(), DType::fp32};
  const GemmOperand B = bf16 ? GemmOperand{b16.data(), DType::bf16} : GemmOperand{b.data(), DType::fp32};
  gemm(g, A, B, c.data());  // create and cache the primitive outside the timing
  for (auto _ : state) {
    gemm(g, A, B, c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * double(g.batch) * double(g.M) * double(g.N) * double(g.K);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// name, batch, M, N, K, trans_a, trans_b — forward y = x·W (W [in, out]); backward dx = dy·Wᵀ, dW = xᵀ·dy.
void GemmShapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"batch", "M", "N", "K", "tA", "tB", "bf16"});
  const int64_t shapes[][6] = {
      {1, kN, 3 * kH, kH, 0, 0},       // QKV forward
      {1, kN, kH, kH, 0, 0},           // attention projection forward
      {1, kN, 4 * kH, kH, 0, 0},       // FC1 forward
      {1, kN, kH, 4 * kH, 0, 0},       // FC2 forward
      {1, kN, kH, 4 * kH, 0, 1},       // FC1 backward dx = dy·Wᵀ
      {1, kH, 4 * kH, kN, 1, 0},       // FC1 backward dW = xᵀ·dy
      {1, kN, kV, kH, 0, 1},           // logits = x·wteᵀ
      {1, kV, kH, kN, 1, 0},           // dwte = dlogitsᵀ·x
      {kB * kA, kS, kS, kH / kA, 0, 1},  // scores = Q·Kᵀ (per head)
      {kB * kA, kS, kH / kA, kS, 0, 0},  // context = P·V
  };
  for (int bf16 = 0; bf16 <= 1; ++bf16)
    for (const auto& s : shapes) bm->Args({s[0], s[1], s[2], s[3], s[4], s[5], bf16});
}
BENCHMARK(BM_Gemm)->Apply(GemmShapes)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LayerNormForward(benchmark::State& state) {
  const auto x = random_floats(kN * kH), w = random_floats(kH), b = random_floats(kH);
  std::vector<float> y(static_cast<size_t>(kN * kH)), mean(kN), rstd(kN);
  for (auto _ : state) {
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kN, kH);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] =
      benchmark::Counter(double(2 * kN * kH * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LayerNormForward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNormBackward(benchmark::State& state) {
  const auto x = random_floats(kN * kH), w = random_floats(kH), dy = random_floats(kN * kH);
  std::vector<float> y(static_cast<size_t>(kN * kH)), mean(kN), rstd(kN), dx(static_cast<size_t>(kN * kH)), dw(kH), db(kH);
  const auto b = random_floats(kH);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kN, kH);
  for (auto _ : state) {
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                       kN, kH);
    benchmark::ClobberMemory();
  }
  // reads x, dy, dx (accumulated); writes dx
  state.counters["bytes/s"] =
      benchmark::Counter(double(4 * kN * kH * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LayerNormBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluForward(benchmark::State& state) {
  const int64_t n = kN * 4 * kH;
  const auto x = random_floats(n);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : state) {
    gelu_forward(y.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(double(2 * n * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GeluForward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluBackward(benchmark::State& state) {
  const int64_t n = kN * 4 * kH;
  const auto x = random_floats(n), dy = random_floats(n);
  std::vector<float> dx(static_cast<size_t>(n));
  for (auto _ : state) {
    gelu_backward(dx.data(), x.data(), dy.data(), n);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(double(3 * n * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SoftmaxCausalForward(benchmark::State& state) {
  const int64_t batch = kB * kA, n = batch * kS * kS;
  const auto x = random_floats(n);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : state) {
    softmax_causal_forward(y.data(), x.data(), batch, kS);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(double(2 * n * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SoftmaxCausalForward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_SoftmaxCausalBackward(benchmark::State& state) {
  const int64_t batch = kB * kA, n = batch * kS * kS;
  const auto x = random_floats(n), dy = random_floats(n);
  std::vector<float> p(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  softmax_causal_forward(p.data(), x.data(), batch, kS);
  for (auto _ : state) {
    softmax_causal_backward(dx.data(), dy.data(), p.data(), batch, kS);
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(double(3 * n * 4), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SoftmaxCausalBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The attention core (QKᵀ, causal softmax, dropout, P·V) forward and backward from kept Q, K, V.
// FLOPs as the model counts them: 4·b·s²·h forward (two GEMMs), twice that backward.
// Args: bf16 storage, backward (0 = forward only).
void BM_AttentionCore(benchmark::State& state) {
  const DType dt = state.range(0) ? DType::bf16 : DType::fp32;
  const bool backward = state.range(1) != 0;
  LayerContext c;
  c.b = kB, c.s = kS, c.h = kH, c.a = kA, c.dtype = dt, c.dropout = 0.0f;
  c.heads_total = kA, c.seq_total = kS;
  Workspace ws;
  ws.ensure(kB, kS, kH, kA, kV);
  const auto q = random_floats(kN * kH, 1.0f, 3), k = random_floats(kN * kH, 1.0f, 4),
             v = random_floats(kN * kH, 1.0f, 5), dctx = random_floats(kN * kH, 1.0f, 6);
  std::vector<float> ctx(static_cast<size_t>(kN * kH)), dq(static_cast<size_t>(kN * kH)), dk(static_cast<size_t>(kN * kH)), dv(static_cast<size_t>(kN * kH));
  LayerKept kept;
  kept.q = Stored(kN * kH, dt, 0, "q"), kept.k = Stored(kN * kH, dt, 0, "k"), kept.v = Stored(kN * kH, dt, 0, "v");
  kept.q.store(q.data()), kept.k.store(k.data()), kept.v.store(v.data());
  for (auto _ : state) {
    kept.release_attention_s2();
    attention_core_forward(kept, /*keep_s2=*/true, ctx.data(), c, ws);
    if (backward) attention_core_backward(dq.data(), dk.data(), dv.data(), dctx.data(), kept, c, ws);
    benchmark::ClobberMemory();
  }
  const double fwd = 4.0 * double(kB) * double(kS) * double(kS) * double(kH);
  state.counters["FLOP/s"] =
      benchmark::Counter(backward ? 3.0 * fwd : fwd, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionCore)
    ->ArgNames({"bf16", "bwd"})
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
