// One transformer layer, forward + backward, three ways at each sequence length: unfused attention
// with recompute none, unfused with selective recompute (backward re-creates the s² tensors first,
// as GPT::backward_chunk does), and fused attention (docs/design.md §3.1). The three run in
// interleaved rounds (config 1, 2, 3, 1, 2, 3, ...) so a change in the machine's load hits all of
// them alike; each reports its median time and the bytes its forward kept for backward (the
// tracking allocator's count for the layer), and the ratios come from the same run.
//
// Usage: bench_attention [--h 768] [--heads 12] [--b 1] [--dropout 0.1] [--rounds 7] [--bf16] S...
// Output: one JSON object per sequence length and configuration, then a table on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "model/transformer_layer.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace {

using namespace lattice;

std::vector<float> randn(int64_t n, uint32_t seed, float std) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(size_t(n), 0.0f);
  for (auto& x : v) x = d(rng);
  return v;
}

// GPT-2-like weights of one layer (fp32 and the bf16 copies) and their gradients.
struct Layer {
  std::vector<float> ln_w, ln_b, qkv_w, qkv_b, proj_w, proj_b, fc1_w, fc1_b, fc2_w, fc2_b;
  std::vector<uint16_t> qkv16, proj16, fc116, fc216;
  std::vector<float> g[12];
  explicit Layer(int64_t h) {
    ln_w.assign(size_t(h), 1.0f), ln_b.assign(size_t(h), 0.0f);
    qkv_w = randn(3 * h * h, 1, 0.02f), proj_w = randn(h * h, 2, 0.01f);
    fc1_w = randn(4 * h * h, 3, 0.02f), fc2_w = randn(4 * h * h, 4, 0.01f);
    qkv_b.assign(size_t(3 * h), 0.0f), proj_b.assign(size_t(h), 0.0f);
    fc1_b.assign(size_t(4 * h), 0.0f), fc2_b.assign(size_t(h), 0.0f);
    for (auto [src, dst] : {std::pair{&qkv_w, &qkv16}, {&proj_w, &proj16}, {&fc1_w, &fc116}, {&fc2_w, &fc216}}) {
      dst->resize(src->size());
      to_bf16(src->data(), dst->data(), int64_t(src->size()));
    }
    const int64_t sizes[12] = {h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h};
    for (int i = 0; i < 12; ++i) g[i].assign(size_t(sizes[i]), 0.0f);
  }
  LayerWeights weights(bool bf16) const {
    auto op = [&](const std::vector<float>& f, const std::vector<uint16_t>& b) {
      return bf16 ? GemmOperand{b.data(), DType::bf16} : GemmOperand{f.data(), DType::fp32};
    };
    return {ln_w.data(), ln_b.data(), qkv_b.data(), proj_b.data(), ln_w.data(), ln_b.data(), fc1_b.data(),
            fc2_b.data(), op(qkv_w, qkv16), op(proj_w, proj16), op(fc1_w, fc116), op(fc2_w, fc216), {}};
  }
  LayerGrads grads() {
    return {g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(),
            g[6].data(), g[7].data(), g[8].data(), g[9].data(), g[10].data(), g[11].data(), {}};
  }
};

struct Config {
  const char* name;
  bool selective, fused;
};
const Config kConfigs[] = {{"unfused_none", false, false}, {"unfused_selective", true, false}, {"fused", false, true}};

}  // namespace

int main(int argc, char** argv) {
  int64_t h = 768, a = 12, b = 1;
  float dropout = 0.1f;
  int rounds = 7;
  bool bf16 = false;
  std::vector<int64_t> seqs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) std::fprintf(stderr, "bench_attention: %s needs a value\n", argv[i]), std::exit(2);
      return argv[++i];
    };
    if (arg == "--h") h = std::atoll(next());
    else if (arg == "--heads") a = std::atoll(next());
    else if (arg == "--b") b = std::atoll(next());
    else if (arg == "--dropout") dropout = float(std::atof(next()));
    else if (arg == "--rounds") rounds = std::atoi(next());
    else if (arg == "--bf16") bf16 = true;
    else if (std::atoll(arg.c_str()) > 0) seqs.push_back(std::atoll(arg.c_str()));
    else return std::fprintf(stderr, "bench_attention: unknown argument %s\n", arg.c_str()), 2;
  }
  if (seqs.empty()) seqs = {256, 1024, 2048};
  Layer layer(h);
  const LayerWeights w = layer.weights(bf16);
  const LayerGrads g = layer.grads();
  constexpr int kLayer = 0;
  std::fprintf(stderr, "%-6s %-18s %12s %14s %10s %12s\n", "s", "config", "median ms", "kept MB/layer", "vs none",
               "kept vs none");
  for (const int64_t s : seqs) {
    const int64_t N = b * s;
    Workspace ws;
    ws.ensure(b, s, h, a, 128);
    const auto x0 = randn(N * h, 11, 1.0f), dy = randn(N * h, 12, 1e-3f);
    std::vector<float> x(size_t(N * h)), dx(size_t(N * h));
    std::vector<double> times[3];
    int64_t kept_bytes[3] = {};
    for (int r = 0; r <= rounds; ++r)  // round 0 warms up (GEMM primitives, buffer pool, page faults)
      for (int k = 0; k < 3; ++k) {
        const Config& cfg = kConfigs[k];
        LayerContext c;
        c.b = b, c.s = s, c.h = h, c.a = a, c.heads_total = a, c.seq_total = s;
        c.dtype = bf16 ? DType::bf16 : DType::fp32;
        c.dropout = dropout;
        c.stream = DropoutStream{1234, uint64_t(r), kLayer, DropoutSite::attention};
        c.fused_attention = cfg.fused;
        LayerKept kept;
        std::copy(x0.begin(), x0.end(), x.begin());
        std::copy(dy.begin(), dy.end(), dx.begin());
        const auto t0 = std::chrono::steady_clock::now();
        layer_forward(x.data(), kept, /*keep_s2=*/!cfg.selective, w, c, ws);
        const int64_t bytes = MemoryTracker::activations().live_bytes_of_layer(kLayer);
        if (cfg.selective) layer_recompute_attention(kept, c, ws);
        layer_backward(dx.data(), kept, w, g, c, ws);
        const auto t1 = std::chrono::steady_clock::now();
        kept.release();
        if (r == 0) continue;
        times[k].push_back(std::chrono::duration<double>(t1 - t0).count());
        kept_bytes[k] = bytes;
      }
    const double base = lattice::bench::median(times[0]);
    for (int k = 0; k < 3; ++k) {
      const double t = lattice::bench::median(times[k]);
      std::printf("{\"s\":%lld,\"h\":%lld,\"heads\":%lld,\"b\":%lld,\"dtype\":\"%s\",\"dropout\":%g,\"config\":\"%s\","
                  "\"median_s\":%.6f,\"rounds\":%d,\"kept_bytes\":%lld,\"time_vs_none\":%.4f,\"kept_vs_none\":%.4f}\n",
                  (long long)s, (long long)h, (long long)a, (long long)b, bf16 ? "bf16" : "fp32", double(dropout),
                  kConfigs[k].name, t, rounds, (long long)kept_bytes[k], t / base,
                  double(kept_bytes[k]) / double(kept_bytes[0]));
      std::fprintf(stderr, "%-6lld %-18s %12.1f %14.2f %10.3f %12.3f\n", (long long)s, kConfigs[k].name, t * 1e3,
                   double(kept_bytes[k]) / 1048576.0, t / base, double(kept_bytes[k]) / double(kept_bytes[0]));
    }
    std::fflush(stdout);
  }
  return 0;
}
