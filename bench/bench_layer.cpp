// One transformer layer, forward and backward, under --recompute none | selective | full: the
// single-process analogue of the paper's Table 4 (per-layer forward/backward time and the cost of
// recomputation). Backward time includes the recomputation, exactly as GPT::backward runs it:
// selective re-creates the s² tensors from kept Q, K, V; full re-runs the layer from its kept input.
//
// Args: h, a, s, b, mode (0 none, 1 selective, 2 full), bf16, dropout (per mille).
// Counters: fwd_ms, bwd_ms (averages), kept_bytes (what the forward keeps for backward, measured by
// the tracking allocator), FLOP/s (model FLOPs of the layer: 72·b·s·h²·(1 + s/(6h)) per fwd+bwd).
// Extra shapes: --benchmark_filter and the BM_Layer/<h>/<a>/<s>/<b>/<mode>/<bf16>/<dropout> names.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "model/transformer_layer.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace {

using namespace lattice;

struct LayerParams {
  std::vector<float> ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  std::vector<uint16_t> qkv16, proj16, fc116, fc216;

  LayerParams(int64_t h, int layers) {
    std::mt19937 rng(7);
    auto normal = [&](int64_t n, float std) {
      std::normal_distribution<float> d(0.0f, std);
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = d(rng);
      return v;
    };
    const float resid = 0.02f / std::sqrt(2.0f * float(layers));
    ln1_w.assign(static_cast<size_t>(h), 1.0f), ln1_b.assign(static_cast<size_t>(h), 0.0f), ln2_w = ln1_w, ln2_b = ln1_b;
    qkv_w = normal(h * 3 * h, 0.02f), proj_w = normal(h * h, resid);
    fc1_w = normal(h * 4 * h, 0.02f), fc2_w = normal(4 * h * h, resid);
    qkv_b.assign(static_cast<size_t>(3 * h), 0.0f), proj_b.assign(static_cast<size_t>(h), 0.0f);
    fc1_b.assign(static_cast<size_t>(4 * h), 0.0f), fc2_b.assign(static_cast<size_t>(h), 0.0f);
    for (auto [src, dst] : {std::pair{&qkv_w, &qkv16}, {&proj_w, &proj16}, {&fc1_w, &fc116}, {&fc2_w, &fc216}}) {
      dst->resize(src->size());
      to_bf16(src->data(), dst->data(), int64_t(src->size()));
    }
  }
  LayerWeights weights(bool bf16) const {
    auto op = [&](const std::vector<float>& f, const std::vector<uint16_t>& h) {
      return bf16 ? GemmOperand{h.data(), DType::bf16} : GemmOperand{f.data(), DType::fp32};
    };
    return {ln1_w.data(), ln1_b.data(), qkv_b.data(), proj_b.data(), ln2_w.data(), ln2_b.data(), fc1_b.data(),
            fc2_b.data(), op(qkv_w, qkv16), op(proj_w, proj16), op(fc1_w, fc116), op(fc2_w, fc216), {}};
  }
};

struct LayerGradBuffers {
  std::vector<float> ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  explicit LayerGradBuffers(int64_t h) {
    for (auto [v, n] : {std::pair{&ln1_w, h}, {&ln1_b, h}, {&qkv_w, 3 * h * h}, {&qkv_b, 3 * h}, {&proj_w, h * h},
                        {&proj_b, h}, {&ln2_w, h}, {&ln2_b, h}, {&fc1_w, 4 * h * h}, {&fc1_b, 4 * h},
                        {&fc2_w, 4 * h * h}, {&fc2_b, h}})
      v->assign(static_cast<size_t>(n), 0.0f);
  }
  LayerGrads grads() {
    return {ln1_w.data(), ln1_b.data(), qkv_w.data(), qkv_b.data(), proj_w.data(), proj_b.data(),
            ln2_w.data(), ln2_b.data(), fc1_w.data(), fc1_b.data(), fc2_w.data(), fc2_b.data(), {}};
  }
};

void BM_Layer(benchmark::State& state) {
  const int64_t h = state.range(0), a = state.range(1), s = state.range(2), b = state.range(3);
  const int mode = int(state.range(4));  // 0 none, 1 selective, 2 full
  const bool bf16 = state.range(5) != 0;
  const float dropout = float(state.range(6)) / 1000.0f;
  const int64_t N = b * s;
  constexpr int kLayer = 0;

  const LayerParams params(h, 2);
  LayerGradBuffers gbuf(h);
  const LayerWeights w = params.weights(bf16);
  const LayerGrads g = gbuf.grads();
  LayerContext c;
  c.b = b, c.s = s, c.h = h, c.a = a;
  c.dtype = bf16 ? DType::bf16 : DType::fp32;
  c.dropout = dropout;
  c.stream = DropoutStream{1234, 0, kLayer, DropoutSite::attention};
  c.heads_total = a, c.seq_total = s;
  Workspace ws;
  ws.ensure(b, s, h, a, 128);

  std::vector<float> x0(static_cast<size_t>(N * h)), x(static_cast<size_t>(N * h)), dy(static_cast<size_t>(N * h)), dx(static_cast<size_t>(N * h));
  {
    std::mt19937 rng(11);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x0) v = d(rng);
    for (auto& v : dy) v = d(rng) * 1e-3f;
  }
  LayerKept kept;
  double fwd_s = 0, bwd_s = 0;
  int64_t kept_bytes = 0, iters = 0;
  auto one_step = [&](bool timed) {
    using clock = std::chrono::steady_clock;
    std::copy(x0.begin(), x0.end(), x.begin());
    std::copy(dy.begin(), dy.end(), dx.begin());
    const auto t0 = clock::now();
    layer_forward(x.data(), kept, /*keep_s2=*/mode != 1, w, c, ws);
    if (mode == 2) kept.release_all_but_input();
    const auto t1 = clock::now();
    kept_bytes = MemoryTracker::activations().live_bytes_of_layer(kLayer);
    if (mode == 2) {
      float* xr = ws.g2.data();
      const float* input = kept.ln1_in.load(ws.widen.data());
      std::copy(input, input + N * h, xr);
      layer_forward(xr, kept, /*keep_s2=*/true, w, c, ws);
    } else if (mode == 1) {
      layer_recompute_attention(kept, c, ws);
    }
    layer_backward(dx.data(), kept, w, g, c, ws);
    const auto t2 = clock::now();
    kept.release();
    const double f = std::chrono::duration<double>(t1 - t0).count(), bk = std::chrono::duration<double>(t2 - t1).count();
    if (timed) fwd_s += f, bwd_s += bk, ++iters;
    return f + bk;
  };
  one_step(false);  // warm-up: GEMM primitives, tracked-buffer pool, page faults
  for (auto _ : state) state.SetIterationTime(one_step(true));

  state.counters["fwd_ms"] = fwd_s / double(iters) * 1e3;
  state.counters["bwd_ms"] = bwd_s / double(iters) * 1e3;
  state.counters["kept_bytes"] = double(kept_bytes);
  const double flops = 72.0 * double(b) * double(s) * double(h) * double(h) * (1.0 + double(s) / (6.0 * double(h)));
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void LayerShapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"h", "a", "s", "b", "mode", "bf16", "dropout_pm"});
  for (int bf16 = 0; bf16 <= 1; ++bf16)
    for (int mode = 0; mode <= 2; ++mode) {
      bm->Args({1024, 16, 512, 2, mode, bf16, 100});  // Table 4 analogue (bench/table4.sh)
      bm->Args({768, 12, 256, 4, mode, bf16, 0});     // GPT-2-small layer of the speed target
    }
}
BENCHMARK(BM_Layer)->Apply(LayerShapes)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
