// `lattice bench`: measure this machine for the planner's cpu preset — GEMM rates, the triad's
// bandwidth, the element-wise kernels' and AdamW's rates — and, under mpirun, the collectives' times
// for every group shape a layout of that many ranks forms (comm/measure_collectives.hpp), every rank
// measuring at once and rank 0 alone printing; --save writes the result where `lattice plan
// --hardware local` reads it (plan::bench_result_path). With --layer-costs, also one transformer
// layer's forward, input and weight passes and the output layer at a model's shape (what
// `--pipeline-layers auto` balances when `--hardware FILE` carries them).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "backend/device_ops.hpp"
#include "cli/device_support.hpp"
#include "cli/model_flags.hpp"
#include "comm/distributed.hpp"
#include "comm/fault.hpp"
#include "comm/measure_collectives.hpp"
#include "core/output_path.hpp"
#include "core/error.hpp"
#include "core/machine_peak.hpp"
#include "comm/silent_communicator.hpp"
#include "analysis/formulas.hpp"
#include "core/memory_limit.hpp"
#include "kernels/gemm.hpp"
#include "tensor/device_memory.hpp"
#include "model/gpt.hpp"
#include "model/params.hpp"
#include "optim/optimizer.hpp"
#include "plan/measure.hpp"
#include "plan/units.hpp"

namespace lattice::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times, in one process, the middle layer of a 3-layer model of the given shape: its forward, its
// input pass and its weight pass; and the last chunk (a layer and the output layer) whole, whose
// excess over a layer is the output layer's cost. Medians over repetitions for about `seconds`.
// `tp_share` > 1: one tensor-parallel rank's share of each layer (1/tp_share of its heads and FFN), its
// communication left out (comm/silent_communicator.hpp). The times are the run's device's: each
// clock is read after dev::synchronize().
// As train's and eval's checks: a lower bound of what timing one micro-batch through the 3-layer model
// holds (its weights and gradients, the forward's workspace, the three layers' kept tensors and the
// head's, each layer's at its 1/tp_share), so a shape past the machine is refused in one line before
// anything is allocated, not after minutes of growing towards the OOM killer.
void require_layer_costs_fit(ModelConfig model, const LayoutConfig& layout, int micro_batch, int tp_share) {
  model.layers = 3;
  const double s = model.seq_len, b = micro_batch, h = model.hidden, v = model.padded_vocab();
  const double weights = 8.0 * (v * h + s * h + 3.0 * 12.0 * h * h / tp_share);  // fp32 weights and gradients
  const char* what = "--layer-costs (weights and gradients of 3 layers, one micro-batch's activations, workspace, logits)";
  const double workspace = analysis::forward_workspace_bytes(s, b, h, double(model.heads) / tp_share, v);
  require_fits_memory(weights + workspace, what, "lower --micro-batch, --seq-len or --vocab");
  const analysis::ActivationShape shape{model.seq_len, micro_batch, model.hidden, model.heads, model.padded_vocab(),
                                        tp_share, false, bytes_of(layout.activation_dtype), model.dropout > 0,
                                        layout.fused_attention(), layout.pack_masks, layout.fp8_kept};
  const double kept = analysis::kept_activation_bound(shape, 3, false, false, true);
  require_fits_memory(weights + workspace + kept, what, "lower --micro-batch, --seq-len or --vocab");
}

nlohmann::json measure_layer_costs(ModelConfig model, const LayoutConfig& layout, int micro_batch, double seconds,
                                   int tp_share) {
  model.layers = 3;
  model.validate();
  comm::SilentCommunicator silent(tp_share, 0);
  GPT gpt(model, layout, 1, parallel::TensorParallel{tp_share > 1 ? &silent : nullptr, false});
  const int64_t s = model.seq_len, rows = micro_batch, n = rows * s * model.hidden;
  std::vector<int32_t> inputs(static_cast<size_t>(rows * s)), targets(inputs.size());
  std::mt19937 gen(1);
  std::uniform_int_distribution<int32_t> token(0, model.vocab - 1);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = token(gen), targets[i] = token(gen);
  const MicroBatch mb{inputs.data(), targets.data(), rows, 0};
  // The messages between chunks, where the device's pipeline keeps them.
  DeviceVector<float, MemoryCategory::pipeline> x1(static_cast<size_t>(n)), x2(x1.size()), d2(x1.size()), d1(x1.size());
  const float scale = 1.0f / float(rows * s);
  std::vector<double> forward, input, weight, last_forward, last_backward;
  auto now = [] {
    dev::synchronize();
    return std::chrono::steady_clock::now();
  };
  auto since = [&](auto t0) { return std::chrono::duration<double>(now() - t0).count(); };
  gpt.zero_grads();
  const auto start = now();
  for (uint64_t step = 1; step <= 2 || (since(start) < seconds && step <= 1000); ++step) {
    gpt.forward_chunk(mb, 0, step, true, s, 0, 1, nullptr, x1.data());
    auto t = now();
    gpt.forward_chunk(mb, 0, step, true, s, 1, 2, x1.data(), x2.data());
    forward.push_back(since(t));
    t = now();
    gpt.forward_chunk(mb, 0, step, true, s, 2, 3, x2.data(), nullptr);
    last_forward.push_back(since(t));
    t = now();
    gpt.backward_chunk(mb, 0, step, scale, s, 2, 3, nullptr, d2.data());
    last_backward.push_back(since(t));
    t = now();
    gpt.backward_input_chunk(mb, 0, step, scale, s, 1, 2, d2.data(), d1.data());
    input.push_back(since(t));
    t = now();
    gpt.backward_weight_chunk(0, 1, 2);
    weight.push_back(since(t));
    gpt.backward_chunk(mb, 0, step, scale, s, 0, 1, d1.data(), nullptr);
  }
  for (auto* v : {&forward, &input, &weight, &last_forward, &last_backward}) v->erase(v->begin());  // warm-up
  const double f = median(forward), b = median(input), w = median(weight);
  const double head = std::max(1e-9, median(last_forward) + median(last_backward) - (f + b + w));
  return {{"hidden", model.hidden},
          {"heads", model.heads},
          {"seq_len", model.seq_len},
          {"micro_batch", micro_batch},
          {"tp_share", tp_share},
          {"device", device_name(device_ops().device)},
          {"vocab", model.padded_vocab(1)},
          {"activation_dtype", to_string(layout.activation_dtype)},
          {"recompute", to_string(layout.recompute)},
          {"attention", to_string(layout.attention)},
          {"forward_s", f},
          {"backward_input_s", b},
          {"backward_weight_s", w},
          {"head_s", head},
          {"repetitions", forward.size()}};
}

void print_layer_costs(const ModelConfig& model, int micro_batch, const nlohmann::json& costs) {
  const int share = costs["tp_share"];
  std::printf("layer (h %lld, s %lld, b %d%s, %s): forward %.3f ms, input pass %.3f ms, weight pass %.3f ms; output "
              "layer %.3f ms\n",
              static_cast<long long>(model.hidden), static_cast<long long>(model.seq_len), micro_batch,
              share > 1 ? (", one rank's share of TP " + std::to_string(share) + ", communication left out").c_str() : "",
              costs["device"].get<std::string>().c_str(), 1e3 * double(costs["forward_s"]),
              1e3 * double(costs["backward_input_s"]), 1e3 * double(costs["backward_weight_s"]),
              1e3 * double(costs["head_s"]));
}

// AdamW's rate in bytes/s over the 36 bytes a parameter plan/time_model.cpp charges an fp32 step's
// optimizer: the gradient-norm read, the update (gradient read; weight and both moments read and
// written) and the gradient buffer's zeroing, as the trainer runs them, on a 1-layer model of about
// 1 M parameters (h 256: 196k-element matrices, the biases and LayerNorms as small tensors).
double adamw_rate(double seconds, const std::function<void()>& before_each) {
  ModelConfig model;
  model.layers = 1, model.hidden = 256, model.heads = 4, model.seq_len = 64, model.vocab = 896;
  const ParamTable table(model);
  const int64_t n = table.total();
  std::vector<float> masters(size_t(n), 0.02f), grads(size_t(n), 1e-3f);
  AdamW adam(table, OptimizerConfig{}, {FlatPiece{0, n}});
  const PieceData piece{masters.data(), grads.data()};
  int64_t step = 0;
  auto call = [&] {
    volatile double norm = grad_norm(grads.data(), n);
    (void)norm;
    adam.update({&piece, 1}, 1e-4, ++step);
    std::fill(grads.begin(), grads.end(), 0.0f);
  };
  if (before_each) before_each();
  return 36.0 * double(n) / plan::median_call_seconds(seconds, call);
}

int host_cores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : std::max(1, int(std::thread::hardware_concurrency()));
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

nlohmann::json mpi_json(const comm::CollectiveBench& c) {
  nlohmann::json groups = nlohmann::json::array();
  for (const comm::GroupBench& g : c.groups) {
    nlohmann::json ops = nlohmann::json::object();
    for (const comm::BenchCurve& curve : g.curves) {
      nlohmann::json rows = nlohmann::json::array();
      for (const comm::BenchSample& s : curve.samples) rows.push_back({s.bytes, s.seconds});
      ops[comm::bench_op_name(curve.op)][curve.engine_async ? "engine_async" : "blocking"] = rows;
    }
    groups.push_back({{"size", g.shape.size}, {"stride", g.shape.stride}, {"concurrent", g.concurrent}, {"ops", ops}});
  }
  return {{"ranks", c.ranks},           {"ranks_per_host", c.ranks_on_host}, {"max_bytes", c.max_bytes},
          {"max_small_bytes", c.max_small_bytes}, {"seconds", c.seconds},     {"skipped", c.skipped},
          {"groups", groups}};
}

// The MPI tables for people: median µs per call, blocking / the engine's form, a row per size.
void print_mpi(const comm::CollectiveBench& c, double budget) {
  std::printf("MPI: %d ranks (%d on this host), %.1f s of a %.0f s budget%s; median µs per call (blocking / engine's "
              "call), p2p one message\n",
              c.ranks, c.ranks_on_host, c.seconds, budget,
              c.skipped ? (", " + std::to_string(c.skipped) + " cells left out").c_str() : "");
  for (const comm::GroupBench& g : c.groups) {
    std::printf("group size %d, stride %d (%d at once)\n%12s", g.shape.size, g.shape.stride, g.concurrent, "bytes");
    for (comm::BenchOp op : comm::kBenchOps) std::printf(" %21s", comm::bench_op_name(op));
    std::printf("\n");
    std::vector<double> sizes;
    for (const comm::BenchCurve& curve : g.curves)
      for (const comm::BenchSample& s : curve.samples) sizes.push_back(s.bytes);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (double bytes : sizes) {
      std::printf("%12.0f", bytes);
      for (comm::BenchOp op : comm::kBenchOps) {
        double t[2] = {-1, -1};
        for (const comm::BenchCurve& curve : g.curves)
          if (curve.op == op)
            for (const comm::BenchSample& s : curve.samples)
              if (s.bytes == bytes) t[curve.engine_async] = s.seconds * 1e6;
        char cell[64];
        if (t[0] < 0 && t[1] < 0) std::snprintf(cell, sizeof cell, "-");
        else std::snprintf(cell, sizeof cell, "%.1f / %.1f", t[0], t[1]);
        std::printf(" %21s", cell);
      }
      std::printf("\n");
    }
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  CLI::App app("Measure GEMM rates, memory bandwidth, element-wise kernels and (under mpirun) MPI collectives "
               "(the planner's cpu calibration and --hardware local).",
               "lattice bench");
  double seconds = 1.0, budget = 30;
  bool json = false, layer_costs = false, save = false;
  std::string max_bytes_text = "256MiB";
  int threads = 0;
  ModelConfig model;
  LayoutFlags layout;
  int micro_batch = 1;
  app.add_option("--seconds", seconds, "time spent on each measurement")->capture_default_str();
  app.add_flag("--json", json, "one JSON line on stdout (lattice plan --hardware FILE.json reads it)");
  app.add_flag("--save", save,
               "also write the result where lattice plan --hardware local reads it: "
               "${LATTICE_BENCH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lattice}/bench-<host>-np<ranks>.json");
  app.add_option("--budget", budget, "under mpirun: seconds the MPI collectives may take in all (at most 60)")
      ->capture_default_str();
  app.add_option("--max-bytes", max_bytes_text,
                 "under mpirun: the largest buffer all-reduce, reduce-scatter and all-gather are timed at (p2p and "
                 "all-to-all stop at 16 MiB or this; lowered to fit in half the memory), e.g. 64KiB, 16MiB")
      ->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads of each process (default or 0: $OMP_NUM_THREADS if set, else all cores, as lattice train)");
  app.add_flag("--layer-costs", layer_costs,
               "also time a transformer layer (forward, input and weight passes) and the output layer at the "
               "model flags' shape: --pipeline-layers auto balances these with --hardware FILE.json");
  add_model_flags(app, model);
  add_layout_flags(app, layout);
  std::string device = "cpu";
  add_device_flag(app, device);
  int tp_share = 1;
  app.add_option("--tp-share", tp_share,
                 "--layer-costs: time one tensor-parallel rank's share of the layer (1/T of its heads and FFN), "
                 "its communication left out (the paper's Table 4)")
      ->capture_default_str();
  app.add_option("--micro-batch,--micro-batch-size", micro_batch, "--layer-costs: sequences per micro-batch")
      ->capture_default_str();
  bool overwrite = false;
  add_overwrite_flag(app, overwrite);
  // The shared model and layout flags no bench takes stay parsed, to be refused with the reason below,
  // but out of --help, which lists only what the bench reads.
  for (const char* never : {"layers", "zero", "use-distributed-optimizer", "virtual-stages", "pipeline-layers",
                            "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers",
                            "tensor-model-parallel-size", "pipeline-model-parallel-size", "expert-model-parallel-size",
                            "sequence-parallel", "context-parallel-size", "cp-comm-type", "num-experts",
                            "moe-layer-freq", "moe-router-topk", "moe-ffn-hidden-size", "moe-router",
                            "moe-expert-capacity-factor", "moe-no-drop", "moe-token-drop-policy", "moe-aux-loss-coeff",
                            "moe-router-load-balancing-type", "moe-groups", "expert-dropout", "moe-init-scale"})
    app.get_option(std::string("--") + never)->group("");
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  const OutputRules rules{overwrite, {}, {}};
  const bool launched = comm::started_by_launcher();
  int64_t max_bytes = 0;
  LayoutConfig resolved;
  try {
    // The GEMM, bandwidth and element-wise rates and the collectives are the CPU's (the planner's
    // calibration, on host buffers); on another device the bench times its layers alone.
    select_device(parse_device(device));  // once, before anything is measured (it says if it cannot)
    require(device == "cpu" || (layer_costs && !launched),
            "--device " + device + " times --layer-costs alone, in one process (the other rates are the CPU's)");
    require(seconds > 0 && seconds <= 60, "--seconds must be in (0, 60]");
    require(!save || device == "cpu", "--save keeps the CPU's rates, which plan --hardware local reads; --device " +
                                          device + " times --layer-costs alone: leave --save out (--json prints them)");
    char given[32];
    std::snprintf(given, sizeof given, "%g", budget);
    require(budget > 0 && budget <= 60, std::string("--budget must be in (0, 60] seconds (got ") + given + ")");
    max_bytes = plan::parse_bytes(max_bytes_text, "--max-bytes");
    require(max_bytes >= 8 && max_bytes <= (int64_t(4) << 30),
            "--max-bytes must be between 8 B and 4 GiB (got " + max_bytes_text + ")");
    require(threads >= 0 && threads <= 4096, "--threads must be between 1 and 4096 (0 or left out: all cores)");
    // Flags a bench would ignore. Without --layer-costs every model and layout flag (the rates are the
    // machine's); with it, those a layer's costs never see: one layer is timed in a model of 3, on one
    // process, without an optimizer. Under no launcher, the MPI collectives' bounds.
    static const std::set<std::string> kBenchOwn = {"help",    "seconds",     "json",   "save",      "budget", "max-bytes",
                                                    "threads", "layer-costs", "device", "overwrite", "config",
                                                    "dump-config"};
    static const std::set<std::string> kNotLayerCosts = {
        "layers", "zero", "use-distributed-optimizer", "virtual-stages", "pipeline-layers",
        "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers"};
    for (const CLI::Option* opt : app.get_options()) {
      if (opt->count() == 0 || opt->get_lnames().empty()) continue;
      const std::string name = opt->get_lnames().front();
      // Neither the machine's rates nor a layer's costs (one process) see context parallelism.
      require(name != "context-parallel-size" && name != "cp-comm-type",
              "--" + name + ": lattice bench takes no context parallelism (its rates, and --layer-costs' layer, "
              "are timed on one process; lattice plan models --cp)");
      require(layer_costs || kBenchOwn.count(name),
              "--" + name + " applies to --layer-costs only (the other rates are the machine's, not a model's)");
      require(!layer_costs || !kNotLayerCosts.count(name),
              "--" + name +
                  " does not apply to --layer-costs, which times one layer (in a model of 3) on one process, "
                  "without an optimizer");
      require(launched || (name != "budget" && name != "max-bytes"),
              "--" + name + " applies under mpirun only (it bounds the timing of the MPI collectives)");
    }
    if (layer_costs) {
      resolved = layout.resolve(3);
      require(resolved.tp == 1 && resolved.pp == 1 && resolved.ep == 1 && !resolved.sequence_parallel,
              "--layer-costs times one process: leave out the parallel sizes (the costs are a layer's)");
      require(!model.moe.enabled(), "--layer-costs times dense layers (MoE models are not partitioned automatically)");
      require_device_runs(parse_device(device), model, resolved);
      require(micro_batch >= 1 && micro_batch <= 4096, "--micro-batch must be between 1 and 4096");
      require(tp_share >= 1 && tp_share <= 1024 && model.heads % tp_share == 0,
              "--tp-share must divide --heads (" + std::to_string(model.heads) + "), between 1 and 1024");
      require_layer_costs_fit(model, resolved, micro_batch, tp_share);
    }
    if (save && !launched) check_output_path(plan::bench_result_path(1), OutputKind::bench, "--save", rules);
  } catch (const InputError& e) {
    // Every rank parses the same flags: rank 0 reports.
    if (launched && comm::launcher_rank() != 0) return report_after_rank0("bench", e.what(), exit_status_of(e));
    throw;
  }
  if (threads > 0) omp_set_num_threads(threads);

  if (device != "cpu") {  // the layers alone, on the device
    const nlohmann::json costs = measure_layer_costs(model, resolved, micro_batch, seconds, tp_share);
    if (json) std::cout << nlohmann::json{{"layer_costs", costs}}.dump() << "\n";
    else print_layer_costs(model, micro_batch, costs);
    return 0;
  }
  auto measure = [&](bool mpi) {
    const int rank = mpi ? comm::world_rank() : 0, ranks = mpi ? comm::world_size() : 1;
    std::string path;
    if (save) {
      if (mpi) comm::check_on_all_ranks("bench", [&] {
          path = plan::bench_result_path(ranks);
          if (rank == 0) check_output_path(path, OutputKind::bench, "--save", rules);
        });
      else path = plan::bench_result_path(1);
    }
    const std::function<void()> sync = mpi ? std::function<void()>(comm::world_barrier) : std::function<void()>();
    // The machine first: its runtime constant is read before any model is built. Under mpirun every
    // rank runs each test at once; the slowest rank's rate is kept.
    plan::Measurement m = plan::measure_this_machine(seconds, sync);
    std::map<std::string, double> elementwise = plan::measure_elementwise(seconds / 8, sync);
    elementwise["adamw"] = adamw_rate(seconds / 32, sync);
    if (mpi) {
      m.gemm_fp32_flops = comm::world_min(m.gemm_fp32_flops);
      m.gemm_bf16_flops = comm::world_min(m.gemm_bf16_flops);
      m.memory_bandwidth = comm::world_min(m.memory_bandwidth);
      m.fma_fp32_flops = comm::world_min(m.fma_fp32_flops);
      m.fma_clock_ghz = comm::world_min(m.fma_clock_ghz);
      m.dpbf16_flops = comm::world_min(m.dpbf16_flops);
      m.runtime_rss_bytes = int64_t(comm::world_max(double(m.runtime_rss_bytes)));
      for (auto& [kernel, rate] : elementwise) rate = comm::world_min(rate);  // same keys, same order everywhere
    }
    nlohmann::json costs;
    if (layer_costs) costs = measure_layer_costs(model, resolved, micro_batch, seconds, tp_share);
    comm::CollectiveBench collectives;
    if (mpi) {
      comm::CollectiveBenchOptions o;
      o.budget_s = budget;
      o.max_bytes = max_bytes;
      o.max_small_bytes = std::min<int64_t>(o.max_small_bytes, max_bytes);
      collectives = comm::measure_collectives(o);
    }
    if (rank != 0) return 0;
    nlohmann::json out = nlohmann::json::parse(plan::measurement_json(m));
    out["schema"] = 2;
    out["host"] = plan::bench_host_name();
    out["cores"] = host_cores();
    out["ranks"] = ranks;
    out["threads_per_rank"] = m.threads;
    out["measured_at"] = utc_now();
    out["elementwise"] = elementwise;
    if (mpi) out["mpi"] = mpi_json(collectives);
    if (layer_costs) out["layer_costs"] = costs;
    const std::string line = out.dump() + "\n";
    if (save) {
      write_output_file(path, OutputKind::bench, "--save", line, rules);
      std::fprintf(stderr, "lattice bench: saved %s\n", path.c_str());
    }
    if (json) {
      std::cout << line;
      return 0;
    }
    std::printf("threads %d%s\nGEMM fp32 %.1f GFLOP/s\nGEMM bf16 %.1f GFLOP/s\ntriad bandwidth %.1f GB/s\n"
                "runtime resident %.1f MiB (libraries, threads, kernels: what no allocator sees)\n",
                m.threads, mpi ? (" per rank, " + std::to_string(ranks) + " ranks at once (the slowest rank's rates)").c_str() : "",
                m.gemm_fp32_flops / 1e9, m.gemm_bf16_flops / 1e9, m.memory_bandwidth / 1e9,
                double(m.runtime_rss_bytes) / (1 << 20));
    // Beside the rates, the theoretical peak the trainer's MFU takes (docs/mfu.md), a rank's cores.
    const MachineTexts machine = read_machine_texts();
    for (const DType d : {DType::fp32, DType::bf16}) {
      const PeakEstimate p = theoretical_peak(machine, d, m.threads, gemm_isa());
      const double rate = d == DType::bf16 ? m.gemm_bf16_flops : m.gemm_fp32_flops;
      if (p.flops > 0)
        std::printf("theoretical peak %s %s (GEMM at %.0f%% of it): %s\n", to_string(d), flops_text(p.flops).c_str(),
                    100 * rate / p.flops, p.source.c_str());
      else
        std::printf("theoretical peak %s unknown: %s\n", to_string(d), p.why_unknown.c_str());
    }
    // The FMA loop: the clock the cores ran at, beside the one the peaks above assumed.
    const PeakEstimate avx512 = theoretical_peak(machine, DType::fp32, m.threads, GemmIsa::avx512_core);
    const char* faster = "; with this bench saved the trainer's peak takes the faster clock (docs/mfu.md)";
    if (m.fma_clock_ghz > 0)
      std::printf("FMA fp32 %.1f GFLOP/s: the cores ran at about %.2f GHz (the peaks above: %.2f GHz)%s\n",
                  m.fma_fp32_flops / 1e9, m.fma_clock_ghz, avx512.ghz, m.fma_clock_ghz > avx512.ghz ? faster : "");
    // The bf16 dot product at the same clock: what decides whether bf16 GEMMs widen to fp32 here
    // (where AMX is in reach it computes bf16 instead, whatever this rate).
    if (m.dpbf16_flops > 0 && m.fma_fp32_flops > 0) {
      const bool measured_says = gemm_isa() != GemmIsa::amx && m.dpbf16_flops < m.fma_fp32_flops;
      std::printf("VDPBF16PS bf16 %.1f GFLOP/s: %.2f× the FMAs' FLOPs (bf16 GEMMs %s: %s)\n", m.dpbf16_flops / 1e9,
                  m.dpbf16_flops / m.fma_fp32_flops,
                  gemm_isa() == GemmIsa::amx ? "on AMX" : gemm_bf16_widened() ? "widened to fp32" : "native",
                  bf16_gemm_widens(read_machine_texts(true), gemm_isa()) == measured_says
                      ? "as this measurement says"
                      : "by the rule of core/machine_peak.cpp, which this measurement contradicts: please report it");
    }
    std::printf("element-wise GB/s (over the time model's bytes):");
    for (const auto& [kernel, rate] : elementwise) std::printf(" %s %.1f", kernel.c_str(), rate / 1e9);
    std::printf("\n");
    if (layer_costs) print_layer_costs(model, micro_batch, costs);
    if (mpi) print_mpi(collectives, budget);
    return 0;
  };
  if (!launched) return measure(false);  // one process: no MPI at all, as fast as before
  comm::MpiSession session;
  if (comm::world_size() > 1) {
    comm::abort_all_ranks_on_terminate("bench");
    // Ranks with other flags would time other collectives (a buffer sized by one rank's --max-bytes
    // freed twice) or wait at a --save only one of them makes: refused in one line first, as train does.
    const std::string settings = app.config_to_str(/*default_also=*/true, /*write_description=*/false);
    comm::check_on_all_ranks("bench", [&] { comm::require_same_configuration(settings); });
  }
  return comm::run_or_abort_all("bench", [&] { return measure(true); });
}

}  // namespace lattice::cli
