// `lattice bench`'s measurements (plan/measure.hpp). Slightly past the usual length: the rates it
// measures sit beside the saved results that carry them to `lattice plan`, so the two cannot drift.
#include "plan/measure.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/machine_peak.hpp"
#include "core/memory_limit.hpp"
#include "kernels/dropout.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/softmax.hpp"
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

// Values that stay finite and away from subnormals however often a kernel reruns on them.
std::vector<float> filled(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * (float(i % 97) / 97.0f - 0.5f);
  return v;
}

}  // namespace

double median_call_seconds(double seconds, const std::function<void()>& body, size_t max_calls,
                           const std::function<void()>& untimed) {
  body();
  std::vector<double> t;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (untimed) untimed();
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (t.size() >= 3 && (std::chrono::duration<double>(t1 - start).count() >= seconds || t.size() >= max_calls)) break;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::map<std::string, double> measure_elementwise(double seconds, const std::function<void()>& before_each) {
  // GPT-2-small at b 4, s 256 (bench/scaling.sh's shape): [s, b, h] is 3 MiB in fp32, [s, b, 4h] and
  // the [b, a, s, s] scores 12 MiB each, past the L2 as in a step.
  const int64_t b = 4, s = 256, h = 768, a = 12, N = b * s, n = N * h, n4 = 4 * n, ns = b * a * s * s;
  const double d = 4.0;  // fp32 activations: the model's d
  const float p = 0.1f;
  std::map<std::string, double> rate;
  // In a step a kernel's operands were written long before (or by another rank's share of the caches):
  // each timed call starts with the caches holding other data, read (not written, so nothing dirty is
  // left to write back during the call) from a buffer several times the last-level cache.
  std::vector<float> evictor(size_t(64) << 20 >> 2, 1.0f);
  volatile float sink = 0;
  const std::function<void()> evict = [&] {
    float sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < evictor.size(); i += 16) sum += evictor[i];
    sink = sink + sum;
  };
  auto measure = [&](const char* kernel, double bytes, auto&& body) {
    if (before_each) before_each();
    rate[kernel] = bytes / median_call_seconds(seconds, body, 1000, evict);
  };
  DropoutStream stream;
  stream.seed = 1234, stream.step = 1, stream.layer = 0;
  {  // LayerNorm over [N, h]
    std::vector<float> x = filled(n, 2.0f), y(static_cast<size_t>(n)), stats(static_cast<size_t>(2 * N)), w = filled(h, 1.0f), bias = filled(h, 0.1f);
    std::vector<float> dy = filled(n, 1e-3f), dx(size_t(n), 0.0f), dw(size_t(h), 0.0f), db(size_t(h), 0.0f);
    measure("layernorm_fwd", 2 * d * double(n), [&] {
      layernorm_forward(y.data(), stats.data(), stats.data() + N, x.data(), w.data(), bias.data(), N, h);
    });
    measure("layernorm_bwd", 2 * 2 * d * double(n), [&] {
      layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), stats.data(), stats.data() + N,
                         N, h);
    });
  }
  {  // bias-GeLU over the FC1 output [N, 4h] (the bias is added by the FC1 GEMM)
    std::vector<float> pre = filled(n4, 4.0f), act(static_cast<size_t>(n4)), dact = filled(n4, 1e-3f), dpre(static_cast<size_t>(n4)), sums(static_cast<size_t>(4 * h));
    std::vector<uint16_t> half(static_cast<size_t>(n4));
    measure("bias_gelu_fwd", 2 * d * double(n4), [&] { gelu_forward(act.data(), pre.data(), n4); });
    measure("bias_gelu_bwd", 2 * 2 * d * double(n4), [&] {
      gelu_backward(dpre.data(), pre.data(), dact.data(), n4);
      bias_column_sums(sums.data(), dpre.data(), N, 4 * h);
    });
    measure("to_bf16", 6.0 * double(n4), [&] { to_bf16(pre.data(), half.data(), n4); });
    // A plain copy: kept inputs stored, heads split and merged (model/attention.cpp's permutations
    // move rows of head_dim floats, near a copy's rate).
    measure("copy", 8.0 * double(n4), [&] { std::copy(pre.begin(), pre.end(), act.begin()); });
  }
  {  // the residual branch's end, as model/transformer_layer.cpp's residual_dropout_add: y += bias,
     // y = dropout(y) with a mask drawn now, x += y; backward: dropout's backward (or the copy) and
     // the row-parallel bias's column sums. y and the bias stay 0, so reruns leave x as it is.
    std::vector<float> x = filled(n, 1.0f), y(size_t(n), 0.0f), bias(size_t(h), 0.0f);
    std::vector<float> dx = filled(n, 1e-3f), dy(static_cast<size_t>(n)), sums(static_cast<size_t>(h));
    std::vector<uint8_t> mask(static_cast<size_t>(n));
    auto forward = [&](float drop) {
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < N; ++r)
        for (int64_t i = 0; i < h; ++i) y[size_t(r * h + i)] += bias[size_t(i)];
      if (drop > 0) {
        dropout_mask_fill(mask.data(), stream, 0, n, drop);
        dropout_forward(y.data(), y.data(), mask.data(), n, drop);
      }
      float* xs = x.data();
      const float* ys = y.data();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) xs[i] += ys[i];
    };
    measure("bias_dropout_add_fwd", (3 * d + 1) * double(n), [&] { forward(p); });
    measure("bias_dropout_add_bwd", 2 * (3 * d + 1) * double(n), [&] {
      dropout_backward(dy.data(), dx.data(), mask.data(), n, p);
      bias_column_sums(sums.data(), dy.data(), N, h);
    });
    measure("residual_add_fwd", 3 * d * double(n), [&] { forward(0.0f); });
    measure("residual_add_bwd", 2 * 3 * d * double(n), [&] {
      std::copy(dx.begin(), dx.end(), dy.begin());
      bias_column_sums(sums.data(), dy.data(), N, h);
    });
  }
  {  // scale-mask-softmax (+ dropout) over the [b, a, s, s] scores, unfused attention
    std::vector<float> scores = filled(ns, 8.0f), probs(static_cast<size_t>(ns)), dropped(static_cast<size_t>(ns)), dprobs = filled(ns, 1e-3f);
    std::vector<float> staged(static_cast<size_t>(ns)), dscores(static_cast<size_t>(ns));
    std::vector<uint8_t> mask(static_cast<size_t>(ns));
    AttentionDropout none, drop;
    drop.stream = stream;
    drop.p = p, drop.heads_total = a;
    measure("softmax_fwd", 2 * d * double(ns), [&] {
      softmax_dropout_forward(probs.data(), nullptr, nullptr, DType::fp32, scores.data(), a, b * a, s, none);
    });
    measure("softmax_bwd", 2 * 2 * d * double(ns), [&] {
      softmax_causal_backward(dscores.data(), dprobs.data(), probs.data(), b * a, s);
    });
    measure("softmax_dropout_fwd", (4 * d + 1) * double(ns), [&] {
      softmax_dropout_forward(probs.data(), mask.data(), dropped.data(), DType::fp32, scores.data(), a, b * a, s, drop);
    });
    measure("softmax_dropout_bwd", 2 * (4 * d + 1) * double(ns), [&] {
      dropout_backward(staged.data(), dprobs.data(), mask.data(), ns, p);
      softmax_causal_backward(dscores.data(), staged.data(), probs.data(), b * a, s);
    });
  }
  return rate;
}

Measurement measure_this_machine(double seconds, const std::function<void()>& before_each) {
  auto sync = [&] {
    if (before_each) before_each();
  };
  Measurement m;
  m.runtime_rss_bytes = runtime_rss_bytes();
  m.threads = omp_get_max_threads();
  sync();
  m.gemm_fp32_flops = gemm_rate(false, seconds);
  sync();
  m.gemm_bf16_flops = gemm_rate(true, seconds);
  sync();
  m.memory_bandwidth = triad_bandwidth(seconds);
  sync();
  m.fma_fp32_flops = measure_fma_fp32_flops(m.threads);
  m.fma_clock_ghz = clock_from_fma(read_machine_texts(), m.threads, m.fma_fp32_flops);
  m.dpbf16_flops = measure_dpbf16_flops(m.threads);
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
                        {"fma_fp32_flops", m.fma_fp32_flops},
                        {"fma_clock_ghz", m.fma_clock_ghz},
                        {"dpbf16_flops", m.dpbf16_flops},
                        {"runtime_rss_bytes", m.runtime_rss_bytes}}
      .dump();
}

namespace {

constexpr double kLeastRate = 1e3, kMostRate = 1e18;
// A measured rate (FLOP/s or bytes/s) any machine could measure (1e-300 was taken once, and planned
// a step of 6.5e306 s).
bool measured_rate(double v) { return v >= kLeastRate && v <= kMostRate; }

std::string read_text(const std::string& path) {
  std::error_code ec;
  require(std::filesystem::exists(path, ec), "hardware file " + path + " does not exist (write one with: lattice bench --json > " + path + ")");
  return read_regular_file(path, "hardware file", size_t(64) << 20);
}

}  // namespace

Hardware hardware_from_file(const std::string& path) {
  const std::string text = read_text(path);
  try {
    const auto j = nlohmann::json::parse(text);
    Measurement m;
    if (j.is_object() && j.contains("schema")) {
      m = read_local_bench(path).compute;  // a schema-2 file is checked whole
    } else {
      m.gemm_fp32_flops = j.at("gemm_fp32_flops"), m.gemm_bf16_flops = j.at("gemm_bf16_flops");
      m.memory_bandwidth = j.at("memory_bandwidth");
      for (double rate : {m.gemm_fp32_flops, m.gemm_bf16_flops, m.memory_bandwidth})
        if (!measured_rate(rate))
          fail(path + ": measured rates must be numbers from 1e3 to 1e18 (FLOP/s, bytes/s)");
    }
    Hardware h = hardware_from(m);
    if (j.contains("layer_costs")) {
      const auto& c = j.at("layer_costs");
      MeasuredLayerCosts& l = h.layer_costs;
      // The shape a bench timed: whole numbers in the model's bounds and the names train writes (a float
      // converted to an integer silently, "zz" matched no run and was kept).
      const auto whole = [&](const char* key, int64_t hi) {
        const nlohmann::json& v = c.at(key);
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > hi)
          fail(path + ": layer_costs." + key + " must be a whole number from 1 to " + std::to_string(hi) + " (got " +
               v.dump() + ")");
        return v.get<int64_t>();
      };
      const auto one_of = [&](const char* key, std::initializer_list<const char*> names) {
        const nlohmann::json& v = c.at(key);
        for (const char* name : names)
          if (v.is_string() && v.get<std::string>() == name) return std::string(name);
        fail(path + ": layer_costs." + key + " " + v.dump() + " is not a value lattice bench writes");
      };
      l.hidden = whole("hidden", int64_t(1) << 20), l.heads = whole("heads", int64_t(1) << 20);
      l.seq_len = whole("seq_len", int64_t(1) << 20), l.micro_batch = whole("micro_batch", int64_t(1) << 20);
      l.vocab = whole("vocab", int64_t(1) << 20);
      l.activation_dtype = one_of("activation_dtype", {to_string(DType::fp32), to_string(DType::bf16)});
      l.recompute = one_of("recompute", {to_string(Recompute::none), to_string(Recompute::selective),
                                         to_string(Recompute::full)});
      l.attention = one_of("attention", {to_string(AttentionKernel::unfused), to_string(AttentionKernel::fused)});
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

std::string bench_host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0 || buffer[0] == 0) return "localhost";
  std::string host = buffer;
  for (char& c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  return host;
}

std::string bench_result_path(int ranks) {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  std::string dir = env("LATTICE_BENCH_DIR");
  if (dir.empty() && !env("XDG_CACHE_HOME").empty()) dir = env("XDG_CACHE_HOME") + "/lattice";
  if (dir.empty() && !env("HOME").empty()) dir = env("HOME") + "/.cache/lattice";
  require(!dir.empty(), "no directory for lattice bench results: set LATTICE_BENCH_DIR (or HOME)");
  return dir + "/bench-" + bench_host_name() + "-np" + std::to_string(ranks) + ".json";
}

namespace {

// A schema-2 file's fields, each checked with a message naming the file and the field.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void bad(const std::string& what) const { fail(path_ + ": " + what); }
  const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key)) bad("no \"" + std::string(key) + "\"" + where);
    return j.at(key);
  }
  double positive(const nlohmann::json& j, const char* key, const std::string& where = "") const {
    const auto& v = field(j, key, where);
    if (!v.is_number() || !measured_rate(v.get<double>()))
      // Appended piece by piece: GCC 12 misreads `"\"" + std::string(key) + ...` here (-Wrestrict).
      bad(std::string("\"").append(key).append("\"").append(where).append(
          " must be a measured rate, a number from 1e3 to 1e18"));
    return v.get<double>();
  }
  int count(const nlohmann::json& j, const char* key, int least, const std::string& where = "") const {
    const auto& v = field(j, key, where);
    if (!v.is_number_integer() || v.get<int64_t>() < least || v.get<int64_t>() > (int64_t(1) << 30))
      bad("\"" + std::string(key) + "\"" + where + " must be a whole number of at least " + std::to_string(least));
    return int(v.get<int64_t>());
  }

 private:
  std::string path_;
};

}  // namespace

LocalBench read_local_bench(const std::string& path) {
  const std::string text = read_text(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path + " is not a lattice bench result: " + e.what());
  }
  const Reader r(path);
  if (!j.is_object() || !j.contains("event") || j["event"] != "bench") r.bad("not a lattice bench result (no \"event\":\"bench\")");
  if (!j.contains("schema"))
    r.bad("a schema-1 bench result (no host, element-wise or MPI tables): measure again with lattice bench --save");
  if (!j["schema"].is_number_integer() || j["schema"].get<int64_t>() != 2)
    r.bad("schema " + j["schema"].dump() + " is not one this lattice reads (2)");
  LocalBench b;
  b.path = path;
  const auto& host = r.field(j, "host", "");
  if (!host.is_string() || host.get<std::string>().empty()) r.bad("\"host\" must be a non-empty string");
  b.host = host.get<std::string>();
  if (j.contains("measured_at") && j["measured_at"].is_string()) b.measured_at = j["measured_at"].get<std::string>();
  b.cores = r.count(j, "cores", 1);
  b.ranks = r.count(j, "ranks", 1);
  b.threads_per_rank = r.count(j, "threads_per_rank", 1);
  b.compute.gemm_fp32_flops = r.positive(j, "gemm_fp32_flops");
  b.compute.gemm_bf16_flops = r.positive(j, "gemm_bf16_flops");
  b.compute.memory_bandwidth = r.positive(j, "memory_bandwidth");
  b.compute.threads = r.count(j, "threads", 1);
  if (j.contains("fma_fp32_flops")) {  // since 2026-11-30; 0 where the CPU has no AVX-512
    const auto& fma = j["fma_fp32_flops"];
    if (!fma.is_number() || !(fma.get<double>() == 0 || measured_rate(fma.get<double>())))
      r.bad("\"fma_fp32_flops\" must be 0 or a rate from 1e3 to 1e18 FLOP/s");
    b.compute.fma_fp32_flops = fma.get<double>();
  }
  if (j.contains("dpbf16_flops")) {  // since 2026-12-01; 0 where the CPU has no AVX512-BF16
    const auto& dot = j["dpbf16_flops"];
    if (!dot.is_number() || !(dot.get<double>() == 0 || measured_rate(dot.get<double>())))
      r.bad("\"dpbf16_flops\" must be 0 or a rate from 1e3 to 1e18 FLOP/s");
    b.compute.dpbf16_flops = dot.get<double>();
  }
  if (j.contains("fma_clock_ghz")) {
    const auto& ghz = j["fma_clock_ghz"];
    if (!ghz.is_number() || !(ghz.get<double>() == 0 || (ghz.get<double>() >= 0.05 && ghz.get<double>() <= 20)))
      r.bad("\"fma_clock_ghz\" must be 0 or a clock from 0.05 to 20 GHz");
    b.compute.fma_clock_ghz = ghz.get<double>();
  }
  if (j.contains("runtime_rss_bytes")) {
    const auto& rss = j["runtime_rss_bytes"];
    if (!rss.is_number() || rss.get<double>() < 0) r.bad("\"runtime_rss_bytes\" must be a number of bytes");
    b.compute.runtime_rss_bytes = int64_t(rss.get<double>());
  }
  const auto& elementwise = r.field(j, "elementwise", "");
  if (!elementwise.is_object() || elementwise.empty())
    r.bad("\"elementwise\" must be an object of kernel: bytes/s (lattice bench --save writes every kernel's)");
  for (const auto& [kernel, rate] : elementwise.items())
    b.elementwise[kernel] = r.positive(elementwise, kernel.c_str(), " in \"elementwise\"");
  if (!j.contains("mpi")) {
    if (b.ranks > 1) r.bad("a bench of " + std::to_string(b.ranks) + " ranks without its \"mpi\" part");
    return b;
  }
  const auto& mpi = j["mpi"];
  if (r.count(mpi, "ranks", 1, " in \"mpi\"") != b.ranks) r.bad("\"mpi\".\"ranks\" differs from \"ranks\"");
  if (mpi.contains("skipped")) b.comm_cells_left_out = r.count(mpi, "skipped", 0, " in \"mpi\"");
  if (mpi.contains("seconds") && mpi["seconds"].is_number()) b.comm_seconds = mpi["seconds"].get<double>();
  const auto& groups = r.field(mpi, "groups", " in \"mpi\"");
  if (!groups.is_array()) r.bad("\"mpi\".\"groups\" must be an array");
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    const std::string where = " in mpi group " + std::to_string(g);
    const int size = r.count(group, "size", 2, where), stride = r.count(group, "stride", 1, where);
    if (int64_t(size) * stride > b.ranks)
      r.bad("mpi group " + std::to_string(g) + " (size " + std::to_string(size) + ", stride " + std::to_string(stride) +
            ") does not fit in " + std::to_string(b.ranks) + " ranks");
    const auto& ops = r.field(group, "ops", where);
    if (!ops.is_object()) r.bad("\"ops\"" + where + " must be an object");
    for (MeasuredOp op : {MeasuredOp::all_reduce, MeasuredOp::reduce_scatter, MeasuredOp::all_gather,
                          MeasuredOp::all_to_all, MeasuredOp::p2p}) {
      if (!ops.contains(to_string(op))) continue;
      const auto& forms = ops[to_string(op)];
      if (!forms.is_object()) r.bad("\"" + std::string(to_string(op)) + "\"" + where + " must be an object");
      for (const bool async : {false, true}) {
        const char* form = async ? "engine_async" : "blocking";
        if (!forms.contains(form)) continue;
        const std::string curve_name = std::string(to_string(op)) + "." + form + where;
        const auto& rows = forms[form];
        if (!rows.is_array()) r.bad(curve_name + " must be an array of [bytes, seconds]");
        CommCurve curve{op, size, stride, async, {}};
        for (const auto& row : rows) {
          if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number())
            r.bad(curve_name + ": every sample must be [bytes, seconds]");
          const double bytes = row[0].get<double>(), seconds = row[1].get<double>();
          // Bounded as the rates are: past them a sample is a typo or a damaged file, and a plan made
          // from it printed an iteration of 3e307 s and a communication share of inf%.
          if (!(bytes >= 1 && bytes <= 0x1p40 && seconds >= 1e-9 && seconds <= 3600))
            r.bad(curve_name + ": every sample must be [bytes from 1 to 2^40, seconds from 1e-9 to 3600] (got [" +
                  row[0].dump() + ", " + row[1].dump() + "])");
          if (!curve.samples.empty() && bytes <= curve.samples.back().bytes)
            r.bad(curve_name + ": sizes must ascend");
          curve.samples.push_back({bytes, seconds});
        }
        b.comm.add(std::move(curve));
      }
    }
  }
  return b;
}

}  // namespace lattice::plan
