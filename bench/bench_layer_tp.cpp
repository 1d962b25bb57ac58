// The paper's Table 4 under mpirun: forward and backward time of ONE transformer layer's
// tensor-parallel shard for baseline TP, TP + sequence parallelism, full recompute, selective
// recompute and selective + SP, with each one's overhead against the baseline (backward and total,
// as the paper states them) and the activation bytes the layer keeps per rank (measured by the
// tracking allocator after forward) beside docs/design.md §4's row (analysis::layer_activation_bytes).
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_layer_tp
//       --hidden 1024 --heads 16 --seq-len 512 --micro-batch 2 [--dropout 0.1]
//       [--activation-dtype fp32|bf16] [--warmup 2] [--iters 9] [--tp N (default: world size)] [--json]
//
// The layer's shard is built the way GPT builds it: ParamTable(config, t, rank) + init_params (so the
// shards of the ranks are pieces of one model) and LayerWeights/LayerGrads pointers into the flat
// buffers, LayerContext filled like GPT::layer_context. Backward time includes the recomputation,
// exactly as GPT::backward runs it: full recompute re-runs the layer from its kept input, selective
// re-creates the s² tensors (layer_recompute_attention) from the kept Q, K, V.
//
// Timing: the modes are interleaved (each round runs every mode once, after `--warmup` untimed
// rounds), a world barrier before each forward and before each backward; per iteration the time of
// the slowest rank (max over ranks); the table shows the median over the timed rounds.
// Not timed: the once-per-step all-reduce of the LayerNorm weight/bias gradients under SP
// (GPT::finalize_grads), as Megatron's per-layer figures leave it out.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.hpp"
#include "analysis/formulas.hpp"
#include "comm/distributed.hpp"
#include "model/params.hpp"
#include "model/transformer_layer.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace {

using namespace lattice;

struct Options {
  int hidden = 1024, heads = 16, seq_len = 512, micro_batch = 2, tp = 0;
  double dropout = 0.1;
  DType dtype = DType::fp32;
  int warmup = 2, iters = 9;
  bool json = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  if (comm::launcher_rank() == 0)
    std::fprintf(stderr,
                 "bench_layer_tp: error: %s\nusage: bench_layer_tp [--hidden H] [--heads A] [--seq-len S] "
                 "[--micro-batch B] [--dropout P] [--activation-dtype fp32|bf16] [--warmup N] [--iters N] "
                 "[--tp T] [--json]\n",
                 msg.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    auto integer = [&]() {
      const std::string v = value();
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end || x <= 0) usage_error(a + " wants a positive integer, got '" + v + "'");
      return int(x);
    };
    if (a == "--hidden") o.hidden = integer();
    else if (a == "--heads") o.heads = integer();
    else if (a == "--seq-len") o.seq_len = integer();
    else if (a == "--micro-batch") o.micro_batch = integer();
    else if (a == "--tp") o.tp = integer();
    else if (a == "--warmup") o.warmup = integer();
    else if (a == "--iters") o.iters = integer();
    else if (a == "--dropout") {
      const std::string v = value();
      char* end = nullptr;
      o.dropout = std::strtod(v.c_str(), &end);
      if (*end || !(o.dropout >= 0.0 && o.dropout < 1.0)) usage_error("--dropout wants a value in [0, 1)");
    } else if (a == "--activation-dtype") {
      const std::string v = value();
      if (v == "fp32") o.dtype = DType::fp32;
      else if (v == "bf16") o.dtype = DType::bf16;
      else usage_error("--activation-dtype wants fp32 or bf16, got '" + v + "'");
    } else if (a == "--json") o.json = true;
    else if (a == "--help" || a == "-h") usage_error("help requested");
    else usage_error("unknown flag '" + a + "'");
  }
  if (o.tp == 0) {  // default: every rank of the launch in one TP group
    const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = std::getenv("PMIX_SIZE");
    if (!n) n = std::getenv("PMI_SIZE");
    o.tp = n ? std::max(1, std::atoi(n)) : 1;
  }
  if (o.hidden % o.heads) usage_error("--heads must divide --hidden");
  if (o.heads % o.tp) usage_error("the TP size " + std::to_string(o.tp) + " must divide --heads");
  if (o.seq_len % o.tp) usage_error("the TP size must divide --seq-len (sequence parallelism)");
  return o;
}

struct Mode {
  const char* name = "";
  bool sp = false, selective = false, full = false;
};
constexpr Mode kModes[] = {
    {"baseline TP", false, false, false},
    {"TP + SP", true, false, false},
    {"full recompute", false, false, true},
    {"selective", false, true, false},
    {"selective + SP", true, true, false},
};

struct Result {
  double fwd_ms = 0, bwd_ms = 0, fwd_min = 0, bwd_min = 0, fwd_max = 0, bwd_max = 0;
  int64_t kept = 0, formula = 0, peak = 0;
  double tp_sent_bytes = 0;  // TP-group bytes this rank sends per fwd+bwd (ring accounting)
  double conjugate_bytes = 0, regather_bytes = 0;  // of which through f, f̄, g, ḡ / SP backward re-gathers
  bool kept_differs = false;  // the ranks kept different byte counts (they should not)
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  comm::Distributed dist(o.tp, 1, "bench");
  comm::Communicator& world = dist.world();
  comm::Communicator& tpc = dist.tp();
  const int t = tpc.size(), rank = tpc.rank();
  const bool root = dist.rank() == 0;

  ModelConfig cfg;
  cfg.layers = 1, cfg.hidden = o.hidden, cfg.heads = o.heads, cfg.seq_len = o.seq_len, cfg.vocab = 256;
  cfg.dropout = o.dropout;
  const ParamTable table(cfg, t, rank);
  std::vector<float> params(size_t(table.total())), grads(size_t(table.total()), 0.0f);
  init_params(table, params.data(), /*seed=*/1234, cfg.vocab);
  std::vector<uint16_t> params16;
  if (o.dtype == DType::bf16) {
    params16.resize(params.size());
    to_bf16(params.data(), params16.data(), int64_t(params.size()));
  }
  auto operand = [&](const float* p) {
    const int64_t off = p - params.data();
    return o.dtype == DType::bf16 ? GemmOperand{params16.data() + off, DType::bf16}
                                  : GemmOperand{params.data() + off, DType::fp32};
  };
  constexpr int kLayer = 0;
  const auto p = table.layer(params.data(), kLayer);
  const LayerWeights w{p.ln1_w, p.ln1_b, p.qkv_b, p.proj_b, p.ln2_w, p.ln2_b, p.fc1_b, p.fc2_b,
                       operand(p.qkv_w), operand(p.proj_w), operand(p.fc1_w), operand(p.fc2_w), {}};
  const auto gp = table.layer(grads.data(), kLayer);
  const LayerGrads g{gp.ln1_w, gp.ln1_b, gp.qkv_w, gp.qkv_b, gp.proj_w, gp.proj_b,
                     gp.ln2_w, gp.ln2_b, gp.fc1_w, gp.fc1_b, gp.fc2_w, gp.fc2_b, {}};

  const int64_t b = o.micro_batch, s = o.seq_len, h = o.hidden;
  // The residual stream and its gradient, the same full tensors on every rank; SP takes a slice.
  std::vector<float> x_full(size_t(b * s * h)), dy_full(size_t(b * s * h));
  {
    std::mt19937 rng(11);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x_full) v = d(rng);
    for (auto& v : dy_full) v = d(rng) * 1e-3f;
  }
  Workspace ws;
  ws.ensure(b, s, h, o.heads, 128);

  std::vector<Result> results;
  // One runner per mode; the rounds interleave the modes (round r runs every mode once), so a
  // change in the machine's load during the run falls on all of them alike.
  struct Runner {
    Mode m;
    LayerContext c;
    std::vector<float> x0, dy, x, dx, xr;
    LayerKept kept;
    std::vector<double> fwd, bwd;
    Result res;
  };
  constexpr size_t kNumModes = sizeof(kModes) / sizeof(kModes[0]);
  std::vector<Runner> runners(kNumModes);
  for (size_t mi = 0; mi < kNumModes; ++mi) {
    Runner& u = runners[mi];
    u.m = kModes[mi];
    const bool sp = u.m.sp && t > 1;
    LayerContext& c = u.c;  // as GPT::layer_context
    c.b = b, c.s = s, c.h = h, c.a = o.heads / t;
    c.dtype = o.dtype;
    c.dropout = float(o.dropout);
    c.stream = DropoutStream{1234, 0, kLayer, DropoutSite::attention};
    c.first_row = 0;
    c.heads_total = o.heads, c.head0 = int64_t(rank) * c.a;
    c.seq_total = s, c.pos0 = sp ? rank * (s / t) : 0, c.s_local = sp ? s / t : s;
    c.tp = parallel::TensorParallel{&tpc, sp};
    const int64_t sl = c.seq_local(), Nl = c.N_local();
    for (auto* v : {&u.x0, &u.dy, &u.x, &u.dx, &u.xr}) v->assign(size_t(Nl * h), 0.0f);
    for (int64_t r = 0; r < b; ++r)
      for (int64_t i = 0; i < sl; ++i) {
        const size_t src = size_t((r * s + c.pos0 + i) * h), dst = size_t((r * sl + i) * h);
        std::copy_n(x_full.begin() + long(src), h, u.x0.begin() + long(dst));
        std::copy_n(dy_full.begin() + long(src), h, u.dy.begin() + long(dst));
      }
  }

  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  const double cpu0 = cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  for (int it = 0; it < o.warmup + o.iters; ++it)
    for (Runner& u : runners) {
      using clock = std::chrono::steady_clock;
      const Mode& m = u.m;
      const LayerContext& c = u.c;
      LayerKept& kept = u.kept;
      Result& res = u.res;
      const int64_t Nl = c.N_local();
      std::copy(u.x0.begin(), u.x0.end(), u.x.begin());
      std::copy(u.dy.begin(), u.dy.end(), u.dx.begin());
      MemoryTracker::activations().reset_peak();
      const comm::TrafficLedger before = dist.traffic();
      parallel::conjugate_traffic() = {};
      world.barrier();
      const auto t0 = clock::now();
      layer_forward(u.x.data(), kept, /*keep_s2=*/!m.selective, w, c, ws);
      if (m.full) kept.release_all_but_input();
      const auto t1 = clock::now();
      res.kept = MemoryTracker::activations().live_bytes_of_layer(kLayer);
      world.barrier();
      const auto t2 = clock::now();
      if (m.full) {  // GPT::backward: re-run the whole layer from its kept input
        const float* input = kept.ln1_in.load(ws.widen.data());
        std::copy(input, input + Nl * h, u.xr.data());
        layer_forward(u.xr.data(), kept, /*keep_s2=*/true, w, c, ws);
      } else if (m.selective) {
        layer_recompute_attention(kept, c, ws);
      }
      layer_backward(u.dx.data(), kept, w, g, c, ws);
      const auto t3 = clock::now();
      res.peak = MemoryTracker::activations().peak_bytes();
      kept.release();
      res.tp_sent_bytes = dist.traffic().since(before).total(comm::GroupKind::tp).sent_bytes;
      res.conjugate_bytes = parallel::conjugate_traffic().conjugate();
      res.regather_bytes = parallel::conjugate_traffic().regather;
      if (it >= o.warmup) {
        u.fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        u.bwd.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
      }
    }

  // The share of a core each rank's process got over the whole run (busy-polling MPI waits count as
  // CPU): well under 100% = other processes took the cores and the milliseconds are inflated.
  std::vector<float> share{float((cpu_seconds() - cpu0) /
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count())};
  std::vector<float> shares(size_t(world.size()));
  world.all_gather(share, shares);

  for (Runner& u : runners) {
    const Mode& m = u.m;
    const bool sp = m.sp && t > 1;
    Result& res = u.res;
    std::vector<double>& fwd = u.fwd;
    std::vector<double>& bwd = u.bwd;
    // Slowest rank per iteration, then the median over iterations.
    std::vector<float> times(fwd.size() * 2);
    for (size_t i = 0; i < fwd.size(); ++i) times[i] = float(fwd[i]), times[fwd.size() + i] = float(bwd[i]);
    world.all_reduce(times, comm::ReduceOp::max);
    for (size_t i = 0; i < fwd.size(); ++i) fwd[i] = times[i], bwd[i] = times[fwd.size() + i];
    res.fwd_ms = lattice::bench::median(fwd), res.bwd_ms = lattice::bench::median(bwd);
    res.fwd_min = *std::min_element(fwd.begin(), fwd.end()), res.fwd_max = *std::max_element(fwd.begin(), fwd.end());
    res.bwd_min = *std::min_element(bwd.begin(), bwd.end()), res.bwd_max = *std::max_element(bwd.begin(), bwd.end());
    // Bytes of every rank, exactly (as 2^20 multiples plus remainders, both exact in float): max over ranks.
    const int64_t mine[2] = {res.kept, res.peak};
    std::vector<float> part(4), all(size_t(4 * world.size()));
    for (int k = 0; k < 2; ++k) part[size_t(2 * k)] = float(mine[k] >> 20), part[size_t(2 * k + 1)] = float(mine[k] & 0xFFFFF);
    world.all_gather(part, all);
    res.kept = res.peak = 0;
    for (int r = 0; r < world.size(); ++r) {
      const float* q = all.data() + 4 * r;
      const int64_t kept_r = (int64_t(q[0]) << 20) + int64_t(q[1]), peak_r = (int64_t(q[2]) << 20) + int64_t(q[3]);
      if (r > 0 && kept_r != res.kept) res.kept_differs = true;
      res.kept = std::max(res.kept, kept_r), res.peak = std::max(res.peak, peak_r);
    }
    analysis::ActivationShape shape;
    shape.s = s, shape.b = b, shape.h = h, shape.a = o.heads, shape.v = cfg.padded_vocab(t), shape.t = t;
    shape.sp = sp, shape.d = o.dtype == DType::bf16 ? 2 : 4, shape.dropout = o.dropout > 0.0;
    res.formula = analysis::layer_activation_bytes(shape, m.full, m.selective);
    results.push_back(res);
  }

  if (root) {
    const char* dt = o.dtype == DType::bf16 ? "bf16" : "fp32";
    const Result& base = results[0];
    const double base_total = base.fwd_ms + base.bwd_ms;
    const double flops = 72.0 * double(b * s) * double(h) * double(h) * (1.0 + double(s) / (6.0 * double(h)));
    if (o.json) {
      nlohmann::json j;
      j["config"] = {{"hidden", h},          {"heads", o.heads},       {"seq_len", s},
                     {"micro_batch", b},     {"tp", t},                {"dropout", o.dropout},
                     {"activation_dtype", dt}, {"omp_threads", omp_get_max_threads()},
                     {"warmup", o.warmup},   {"iters", o.iters},       {"world", dist.world_size()}};
      j["cpu_share_per_rank"] = shares;
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        const double total = r.fwd_ms + r.bwd_ms;
        j["modes"].push_back({{"mode", kModes[i].name},
                              {"sequence_parallel", kModes[i].sp},
                              {"recompute", kModes[i].full ? "full" : kModes[i].selective ? "selective" : "none"},
                              {"fwd_ms", r.fwd_ms},
                              {"bwd_ms", r.bwd_ms},
                              {"fwd_ms_min", r.fwd_min},
                              {"fwd_ms_max", r.fwd_max},
                              {"bwd_ms_min", r.bwd_min},
                              {"bwd_ms_max", r.bwd_max},
                              {"bwd_overhead", r.bwd_ms / base.bwd_ms - 1.0},
                              {"total_overhead", total / base_total - 1.0},
                              {"model_gflops_per_s_per_rank", flops / t / (total * 1e-3) / 1e9},
                              {"kept_bytes", r.kept},
                              {"formula_bytes", r.formula},
                              {"peak_bytes", r.peak},
                              {"kept_bytes_differ_between_ranks", r.kept_differs},
                              {"tp_sent_bytes", r.tp_sent_bytes},
                              {"tp_conjugate_bytes", r.conjugate_bytes},
                              {"tp_regather_bytes", r.regather_bytes}});
      }
      std::cout << j.dump() << "\n";
    } else {
      std::printf("Table 4 analogue: one layer, h=%lld a=%d s=%lld b=%lld, t=%d, dropout %.2f, %s activations, "
                  "%d OpenMP thread(s)/rank, median of %d iterations after %d warm-up, slowest rank\n",
                  (long long)h, o.heads, (long long)s, (long long)b, t, o.dropout, dt, omp_get_max_threads(),
                  o.iters, o.warmup);
      std::printf("%-16s%9s%9s%10s%9s%10s%8s%14s%14s%8s%14s%14s%10s\n", "mode", "fwd ms", "bwd ms", "total ms",
                  "bwd ovh", "total ovh", "GF/s/r", "kept/rank", "formula", "ratio", "peak/rank", "TP f/g sent", "+regather");
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        const double total = r.fwd_ms + r.bwd_ms;
        std::printf("%-16s%9.1f%9.1f%10.1f%8.1f%%%9.1f%%%8.1f%10.2f MiB%10.2f MiB%8.3f%10.2f MiB%10.2f MiB%6.2f MiB\n",
                    kModes[i].name, r.fwd_ms, r.bwd_ms, total, 100.0 * (r.bwd_ms / base.bwd_ms - 1.0),
                    100.0 * (total / base_total - 1.0), flops / t / (total * 1e-3) / 1e9, double(r.kept) / 1048576.0,
                    double(r.formula) / 1048576.0, r.formula ? double(r.kept) / double(r.formula) : 0.0,
                    double(r.peak) / 1048576.0, r.conjugate_bytes / 1048576.0, r.regather_bytes / 1048576.0);
        if (std::abs(r.tp_sent_bytes - r.conjugate_bytes - r.regather_bytes) > 0.5)
          std::printf("  note: the TP ledger counted %.2f MiB sent, the conjugate operators %.2f MiB\n",
                      r.tp_sent_bytes / 1048576.0, (r.conjugate_bytes + r.regather_bytes) / 1048576.0);
      }
      for (size_t i = 0; i < results.size(); ++i)
        if (results[i].kept_differs) std::printf("note: %s: the ranks kept different bytes (max shown)\n", kModes[i].name);
      std::printf("spread (min..max ms over iterations): ");
      for (size_t i = 0; i < results.size(); ++i)
        std::printf("%s fwd %.1f..%.1f bwd %.1f..%.1f%s", kModes[i].name, results[i].fwd_min, results[i].fwd_max,
                    results[i].bwd_min, results[i].bwd_max, i + 1 < results.size() ? "; " : "\n");
      std::printf("CPU share per rank over the run (process CPU / wall, %d thread(s)):", omp_get_max_threads());
      for (float f : shares) std::printf(" %.0f%%", 100.0 * f);
      std::printf("%s\n", *std::min_element(shares.begin(), shares.end()) < 0.8f * float(omp_get_max_threads())
                               ? "  (the machine was busy: milliseconds inflated, ratios noisier)" : "");
      std::printf("paper (22B, t=8, A100, fwd/bwd ms): baseline 7.7/11.9; SP 7.2/11.8; full 7.7/19.5 (bwd +64%%, "
                  "total +39%%); selective 7.7/13.2 (+11%%, +7%%); selective+SP 7.2/13.1 (+10%%, +4%%)\n");
    }
  }
  return 0;
}
