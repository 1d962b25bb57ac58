// `lattice bench`: measure this machine for the planner's cpu preset; with --layer-costs, also one
// transformer layer's forward, input and weight passes and the output layer at a model's shape (what
// `--pipeline-layers auto` balances when `--hardware FILE` carries them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "cli/model_flags.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"
#include "plan/measure.hpp"

namespace lattice::cli {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times, in one process, the middle layer of a 3-layer model of the given shape: its forward, its
// input pass and its weight pass; and the last chunk (a layer and the output layer) whole, whose
// excess over a layer is the output layer's cost. Medians over repetitions for about `seconds`.
nlohmann::json measure_layer_costs(ModelConfig model, const LayoutConfig& layout, int micro_batch, double seconds) {
  model.layers = 3;
  model.validate();
  GPT gpt(model, layout, 1);
  const int64_t s = model.seq_len, rows = micro_batch, n = rows * s * model.hidden;
  std::vector<int32_t> inputs(static_cast<size_t>(rows * s)), targets(inputs.size());
  std::mt19937 gen(1);
  std::uniform_int_distribution<int32_t> token(0, model.vocab - 1);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = token(gen), targets[i] = token(gen);
  const MicroBatch mb{inputs.data(), targets.data(), rows, 0};
  std::vector<float> x1(static_cast<size_t>(n)), x2(x1.size()), d2(x1.size()), d1(x1.size());
  const float scale = 1.0f / float(rows * s);
  std::vector<double> forward, input, weight, last_forward, last_backward;
  auto now = [] { return std::chrono::steady_clock::now(); };
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

}  // namespace

int run_bench(int argc, char** argv) {
  CLI::App app("Measure GEMM rates and memory bandwidth (the planner's cpu calibration).", "lattice bench");
  double seconds = 1.0;
  bool json = false, layer_costs = false;
  ModelConfig model;
  LayoutFlags layout;
  int micro_batch = 1;
  app.add_option("--seconds", seconds, "time spent on each measurement")->capture_default_str();
  app.add_flag("--json", json, "one JSON line on stdout (lattice plan --hardware FILE.json reads it)");
  app.add_flag("--layer-costs", layer_costs,
               "also time a transformer layer (forward, input and weight passes) and the output layer at the "
               "model flags' shape: --pipeline-layers auto balances these with --hardware FILE.json");
  add_model_flags(app, model);
  add_layout_flags(app, layout);
  app.add_option("--micro-batch,--micro-batch-size", micro_batch, "--layer-costs: sequences per micro-batch")
      ->capture_default_str();
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  require(seconds > 0 && seconds <= 60, "--seconds must be in (0, 60]");
  // The machine first: its runtime constant is read before any model is built.
  const plan::Measurement m = plan::measure_this_machine(seconds);
  nlohmann::json costs;
  if (layer_costs) {
    const LayoutConfig l = layout.resolve(3);
    require(l.tp == 1 && l.pp == 1 && l.ep == 1 && !l.sequence_parallel,
            "--layer-costs times one process: leave out the parallel sizes (the costs are a layer's)");
    require(!model.moe.enabled(), "--layer-costs times dense layers (MoE models are not partitioned automatically)");
    require(micro_batch >= 1 && micro_batch <= 4096, "--micro-batch must be between 1 and 4096");
    costs = measure_layer_costs(model, l, micro_batch, seconds);
  }
  if (json) {
    nlohmann::json out = nlohmann::json::parse(plan::measurement_json(m));
    if (layer_costs) out["layer_costs"] = costs;
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("threads %d\nGEMM fp32 %.1f GFLOP/s\nGEMM bf16 %.1f GFLOP/s\ntriad bandwidth %.1f GB/s\n"
              "runtime resident %.1f MiB (libraries, threads, kernels: what no allocator sees)\n",
              m.threads, m.gemm_fp32_flops / 1e9, m.gemm_bf16_flops / 1e9, m.memory_bandwidth / 1e9,
              double(m.runtime_rss_bytes) / (1 << 20));
  if (layer_costs)
    std::printf("layer (h %lld, s %lld, b %d): forward %.3f ms, input pass %.3f ms, weight pass %.3f ms; output "
                "layer %.3f ms\n",
                static_cast<long long>(model.hidden), static_cast<long long>(model.seq_len), micro_batch,
                1e3 * double(costs["forward_s"]), 1e3 * double(costs["backward_input_s"]),
                1e3 * double(costs["backward_weight_s"]), 1e3 * double(costs["head_s"]));
  return 0;
}

}  // namespace lattice::cli
