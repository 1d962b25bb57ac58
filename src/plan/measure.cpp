#include "plan/measure.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/memory_limit.hpp"
#include "kernels/gemm.hpp"
#include "tensor/memory_tracker.hpp"
#include "tensor/bf16.hpp"

namespace lattice::plan {

namespace {

// Repeats `body` until `seconds` have passed; returns seconds per call (after one warm-up call).
template <class F>
double time_per_call(double seconds, F&& body) {
  body();
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  double elapsed = 0;
  do {
    body();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed / calls;
}

double gemm_rate(bool bf16, double seconds) {
  // The FC1 shape of a GPT-2-small step: 1024 tokens × 768 → 3072.
  const int64_t M = 1024, N = 3072, K = 768;
  std::vector<float> a(size_t(M * K), 0.5f), b(size_t(K * N), 0.25f), c(size_t(M * N));
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  to_bf16(a.data(), a16.data(), int64_t(a.size()));
  to_bf16(b.data(), b16.data(), int64_t(b.size()));
  GemmShape s;
  s.M = M, s.N = N, s.K = K;
  const GemmOperand ao = bf16 ? GemmOperand{a16.data(), DType::bf16} : GemmOperand{a.data(), DType::fp32};
  const GemmOperand bo = bf16 ? GemmOperand{b16.data(), DType::bf16} : GemmOperand{b.data(), DType::fp32};
  const double t = time_per_call(seconds, [&] { gemm(s, ao, bo, c.data()); });
  return 2.0 * double(M * N * K) / t;
}

double triad_bandwidth(double seconds) {
  const int64_t n = int64_t(32) << 20;  // 3 × 128 MiB, far past the caches
  std::vector<float> a(static_cast<size_t>(n)), b(a.size(), 1.0f), c(a.size(), 2.0f);
  const double t = time_per_call(seconds, [&] {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) a[size_t(i)] = b[size_t(i)] + 0.5f * c[size_t(i)];
  });
  return 3.0 * 4.0 * double(n) / t;
}

// Measured first, before the rate tests' large buffers: small GEMMs of both dtypes start the
// threads and generate the kernels, as a training run's first step does.
int64_t runtime_rss_bytes() {
  const int64_t n = 64;
  std::vector<float> a(size_t(n * n), 0.5f), c(size_t(n * n));
  std::vector<uint16_t> a16(a.size());
  to_bf16(a.data(), a16.data(), int64_t(a.size()));
  GemmShape s;
  s.M = s.N = s.K = n;
  gemm(s, {a.data(), DType::fp32}, {a.data(), DType::fp32}, c.data());
  gemm(s, {a16.data(), DType::bf16}, {a16.data(), DType::bf16}, c.data());
  const ResidentBytes r = resident_bytes();
  return std::max<int64_t>(0, r.now - MemoryTracker::reserved_bytes());
}

}  // namespace

Measurement measure_this_machine(double seconds) {
  Measurement m;
  m.runtime_rss_bytes = runtime_rss_bytes();
  m.threads = omp_get_max_threads();
  m.gemm_fp32_flops = gemm_rate(false, seconds);
  m.gemm_bf16_flops = gemm_rate(true, seconds);
  m.memory_bandwidth = triad_bandwidth(seconds);
  return m;
}

Hardware hardware_from(const Measurement& m) {
  Hardware h = hardware_preset("cpu");
  h.name = "cpu (measured)";
  h.peak_flops_fp32 = m.gemm_fp32_flops;
  h.peak_flops_bf16 = m.gemm_bf16_flops;
  h.memory_bandwidth = m.memory_bandwidth;
  return h;
}

std::string measurement_json(const Measurement& m) {
  return nlohmann::json{{"event", "bench"},
                        {"threads", m.threads},
                        {"gemm_fp32_flops", m.gemm_fp32_flops},
                        {"gemm_bf16_flops", m.gemm_bf16_flops},
                        {"memory_bandwidth", m.memory_bandwidth},
                        {"runtime_rss_bytes", m.runtime_rss_bytes}}
      .dump();
}

Hardware hardware_from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read " + path + " (write one with: lattice bench --json > " + path + ")");
  std::stringstream text;
  text << in.rdbuf();
  try {
    const auto j = nlohmann::json::parse(text.str());
    Measurement m;
    m.gemm_fp32_flops = j.at("gemm_fp32_flops"), m.gemm_bf16_flops = j.at("gemm_bf16_flops");
    m.memory_bandwidth = j.at("memory_bandwidth");
    if (m.gemm_fp32_flops <= 0 || m.gemm_bf16_flops <= 0 || m.memory_bandwidth <= 0)
      fail(path + ": measured rates must be positive");
    Hardware h = hardware_from(m);
    if (j.contains("layer_costs")) {
      const auto& c = j.at("layer_costs");
      MeasuredLayerCosts& l = h.layer_costs;
      l.hidden = c.at("hidden"), l.heads = c.at("heads"), l.seq_len = c.at("seq_len");
      l.micro_batch = c.at("micro_batch"), l.vocab = c.at("vocab");
      l.activation_dtype = c.at("activation_dtype"), l.recompute = c.at("recompute"), l.attention = c.at("attention");
      l.forward_s = c.at("forward_s"), l.backward_input_s = c.at("backward_input_s");
      l.backward_weight_s = c.at("backward_weight_s"), l.head_s = c.at("head_s");
      for (double v : {l.forward_s, l.backward_input_s, l.backward_weight_s, l.head_s})
        if (!(v > 0 && v < 1e6)) fail(path + ": measured layer costs must be positive seconds");
    }
    return h;
  } catch (const nlohmann::json::exception& e) {
    fail(path + " is not a lattice bench result: " + e.what());
  }
}

}  // namespace lattice::plan
