// `lattice plan`: memory, FLOPs and predicted time of one layout, the best layouts for a cluster
// (--search), the paper's tables and figures (--paper), or the published MoE configurations'
// parameter counts (--moe-paper). Flags mirror `lattice train`, MoE and expert parallelism included.
#include <algorithm>
#include <chrono>

#include <omp.h>
#include <cmath>
#include <cstdio>
#include <set>
#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "cli/flag_rules.hpp"
#include "cli/model_flags.hpp"
#include "core/output_path.hpp"
#include "core/error.hpp"
#include "core/stage_partition.hpp"
#include "plan/auto_partition.hpp"
#include "plan/evaluate.hpp"
#include "plan/local_hardware.hpp"
#include "plan/paper_report.hpp"
#include "plan/report.hpp"
#include "plan/plan_html.hpp"
#include "plan/recompute_auto.hpp"
#include "plan/search.hpp"
#include "plan/time_model.hpp"
#include "plan/units.hpp"

namespace lattice::cli {

namespace {

struct PlanFlags {
  ModelConfig model;
  LayoutFlags layout;
  int micro_batch = 1, global_batch = 0, gpus = 0, top = 5;
  std::string gpu_memory, hardware = "A100-80GB", peak_flops, svg_dir;
  double iteration_time = 0;
  std::string data, offload_optimizer, offload_params, schedule;  // schedule: default 1f1b, or interleaved with m > 1
  int threads = 1;
  bool save = false;
  bool search = false, paper = false, moe_paper = false, json = false;
  std::string html;  // --html FILE
  bool overwrite = false;
  OutputRules output_rules() const { return {overwrite, {{"--hardware", hardware}, {"--data", data}}, {}}; }
};

// The model and layout flags are `lattice train`'s (cli/model_flags), plus the planner's own.
void add_flags(CLI::App& app, PlanFlags& f) {
  add_model_flags(app, f.model);
  f.layout.activation_dtype = "bf16";  // planning is for mixed-precision GPU runs by default
  f.layout.params_dtype = "bf16";
  add_layout_flags(app, f.layout);
  app.add_option("--micro-batch,--micro-batch-size", f.micro_batch, "micro-batch size b");
  app.add_option("--global-batch,--global-batch-size", f.global_batch,
                 "sequences per iteration (default: one micro-batch per data-parallel rank; "
                 "with --search, one per GPU)");
  app.add_option("--gpus", f.gpus, "devices: t·c·p·DP (default t·c·p)");
  app.add_option("--gpu-memory", f.gpu_memory, "bytes per device, e.g. 80GB or 80GiB (default: the preset's)");
  app.add_option("--hardware", f.hardware,
                 "A100-80GB, H100-80GB, H200, cpu, a lattice bench --json file, or local (this machine as mpirun "
                 "runs the layout: ranks share its cores, MPI at measured rates)")
      ->capture_default_str();
  app.add_option("--iteration-time", f.iteration_time, "measured seconds per iteration (MFU/HFU from it)");
  app.add_option("--peak-flops", f.peak_flops, "peak FLOP/s per device for MFU, e.g. 312T (default: the preset's)");
  app.add_option("--schedule", f.schedule,
                 "pipeline schedule: gpipe (timed as 1f1b, all micro-batches kept) | 1f1b | interleaved (with --virtual-stages) | "
                 "zb-h1 (weight passes in the bubbles) | pipedream-2bw; "
                 "default 1f1b, interleaved with --virtual-stages > 1");
  app.add_option("--threads", f.threads, "threads a rank runs (zb-h1 keeps each thread's LayerNorm partial sums)")
      ->capture_default_str();
  app.add_flag("--search", f.search, "rank every layout of --gpus devices that fits");
  app.add_option("--top", f.top, "layouts --search prints")->capture_default_str();
  app.add_flag("--paper", f.paper, "reproduce the paper's Table 2, figures 1 and 7, Tables 4 and 5");
  app.add_flag("--moe-paper", f.moe_paper,
               "parameters of Switch-Base and GShard 600B as published against lattice's count");
  app.add_option("--svg", f.svg_dir, "with --paper: write figure1.svg and figure7.svg into this directory");
  app.add_flag("--json", f.json, "print one JSON object on one line");
  app.add_option("--html", f.html, "also write the plan (or --search's ranking) as a self-contained HTML page");
  app.add_option("--data", f.data, "token directory the run reads: its files join the per-category prediction");
  app.add_flag("--save", f.save, "the run writes a checkpoint: the writer's staging joins the prediction");
  app.add_option("--offload-optimizer", f.offload_optimizer,
                 "DIR: AdamW's moments on disk, as train's flag (memory without them, their I/O time)");
  app.add_option("--offload-params", f.offload_params, "DIR: ZeRO-3's fp32 weight shards on disk too, as train's flag");
  add_overwrite_flag(app, f.overwrite);
}

int run_paper(const PlanFlags& f, const plan::Hardware& hw) {
  if (!f.svg_dir.empty()) plan::write_paper_svgs(f.svg_dir, f.output_rules());
  if (f.json) {
    std::printf("%s\n", plan::paper_json(hw).dump().c_str());
  } else {
    std::fputs(plan::paper_text(hw).c_str(), stdout);
    if (!f.svg_dir.empty()) std::printf("\nwrote %s/figure1.svg and %s/figure7.svg\n", f.svg_dir.c_str(), f.svg_dir.c_str());
  }
  return 0;
}

constexpr int kMaxDevices = 1 << 20;

// Turns the flags into a request, filling the defaults that depend on the layout.
plan::PlanRequest build_request(PlanFlags f, const plan::Hardware& hw) {
  plan::PlanRequest r;
  const LayoutConfig layout = f.layout.resolve(f.model.layers);
  r.model = f.model;
  r.layout = layout;
  r.micro_batch = f.micro_batch;
  r.gpu_memory = f.gpu_memory.empty() ? hw.memory_bytes : plan::parse_bytes(f.gpu_memory, "--gpu-memory");
  r.model.validate();
  require(!layout.sequence_parallel || layout.tp > 1,
          "--sequence-parallel needs tensor parallelism (--tensor-model-parallel-size > 1)");
  require(r.gpu_memory > 0 && r.gpu_memory <= (int64_t(1) << 60), "--gpu-memory must be between 1 byte and 1 EiB");
  require(f.gpus >= 0 && f.gpus <= kMaxDevices,
          "--gpus must be between 1 and " + std::to_string(kMaxDevices) + " (got " + std::to_string(f.gpus) + ")");
  require(f.micro_batch >= 1 && f.micro_batch <= (1 << 20), "--micro-batch must be between 1 and 2^20");
  require(f.global_batch >= 0 && f.global_batch <= (1 << 30), "--global-batch must be between 1 and 2^30");
  require(int64_t(layout.tp) * layout.cp * layout.pp * layout.virtual_stages <= kMaxDevices,
          "t·c·p·m must be at most " + std::to_string(kMaxDevices));
  // Every rank of a CP group holds a copy of the weights: devices = t·c·p·DP (Megatron-Core's order).
  const int tp_pp = layout.tp * layout.cp * layout.pp;
  const std::string product = layout.cp > 1 ? "t·c·p" : "t·p";
  r.gpus = f.gpus > 0 ? f.gpus : tp_pp;
  if (!f.search)
    require(r.gpus % tp_pp == 0, product + "·DP must equal --gpus: --gpus (" + std::to_string(r.gpus) +
                                     ") is not a multiple of " + product + " = " + std::to_string(tp_pp));
  r.layout.dp = r.gpus / tp_pp;
  r.save = f.save;
  require(f.schedule.empty() || f.schedule == "1f1b" || f.schedule == "gpipe" || f.schedule == "interleaved" ||
              f.schedule == "zb-h1" || f.schedule == "pipedream-2bw",
          "--schedule: the planner models gpipe, 1f1b, interleaved, zb-h1 and pipedream-2bw (got '" + f.schedule + "')");
  require(f.schedule != "interleaved" || layout.virtual_stages > 1, "--schedule interleaved needs --virtual-stages > 1");
  require(f.schedule.empty() || f.schedule == "interleaved" || layout.virtual_stages == 1,
          "--schedule " + f.schedule + " needs --virtual-stages 1 (more chunks a rank is the interleaved schedule)");
  require(f.threads >= 1 && f.threads <= 4096, "--threads must be between 1 and 4096");
  r.threads = f.threads;
  r.zero_bubble = f.schedule == "zb-h1";
  r.pipedream_2bw = f.schedule == "pipedream-2bw";
  r.gpipe = f.schedule == "gpipe";
  r.offload_optimizer = !f.offload_optimizer.empty();
  r.offload_params = !f.offload_params.empty();
  require(!r.offload_params || (r.layout.zero == 3 && !r.layout.mixed_precision()),
          "--offload-params keeps ZeRO-3's fp32 weight shards on disk: it needs --zero 3 and fp32 weights");
  if (!f.data.empty()) {
    std::error_code ec;
    require(std::filesystem::is_directory(f.data, ec), "--data " + f.data + " is not a directory");
    r.data_bytes = token_file_bytes(f.data);
    // A folder of no token files counted nothing: the plan read as if --data were left out.
    require(std::filesystem::is_regular_file(f.data + "/train.bin", ec) ||
                std::filesystem::is_regular_file(f.data + "/val.bin", ec),
            "--data " + f.data + " holds no train.bin or val.bin (lattice prepare writes them)");
  }
  r.global_batch = f.global_batch > 0 ? f.global_batch : (f.search ? r.gpus : f.micro_batch * r.layout.dp);
  if (f.layout.memory_budget_bytes > 0) {  // a budget of accounted bytes a rank, in place of the device's memory
    require(f.gpu_memory.empty(), "--memory-budget takes the place of --gpu-memory: give one");
    r.gpu_memory = f.layout.memory_budget_bytes;
    r.accounted_budget = true;
  }
  require(f.layout.memory_budget.empty() || f.layout.recompute_auto || f.search,
          "--memory-budget applies to --recompute auto and --search");
  if (f.layout.partition_auto && !f.search) {
    r.layout.stage_layers = plan::auto_partition(r, hw, double(r.gpu_memory)).counts;
    std::fprintf(stderr, "lattice plan: pipeline layers (auto): %s from %s\n",
                 layer_counts_text(r.layout.stage_layers).c_str(),
                 plan::stage_seconds(r, hw).measured ? "measured layer costs" : "the time model's layer costs");
  }
  return r;
}

// The long names (the first of each) of the flags given on the line or in --config.
std::vector<std::string> given_flag_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0 && !opt->get_lnames().empty()) names.push_back(opt->get_lnames().front());
  return names;
}

}  // namespace

int run_plan(int argc, char** argv) {
  CLI::App app{"memory, FLOPs and time of a layout; --search the best layout; --paper"};
  app.name("lattice plan");
  PlanFlags f;
  add_flags(app, f);
  f.layout.context_parallel_runs = true;  // the planner models context parallelism (a2a, docs/plan.md)
  if (auto status = parse_flags(app, argc, argv)) return *status;

  // --paper and --moe-paper reproduce published configurations: a model, layout or search flag beside
  // them would be silently ignored (plan --paper --layers 3 printed the paper's tables).
  if (f.paper || f.moe_paper)
    for (const std::string& name : given_flag_names(app)) {
      static const std::set<std::string> kReportFlags = {"paper", "moe-paper", "json", "svg", "html", "hardware", "overwrite"};
      require(kReportFlags.count(name) > 0, "--" + name + " does not apply to " + (f.paper ? "--paper" : "--moe-paper") +
                                                " (it reproduces the published configurations): pass one");
    }
  // --search chooses the layout: a layout flag beside it would be silently dropped (--search --zero 3
  // ranked ZeRO-2 first), as --top without --search would be.
  if (f.search)
    for (const std::string& name : given_flag_names(app)) {
      static const std::set<std::string> kChosen = {
          "tensor-model-parallel-size", "pipeline-model-parallel-size", "virtual-stages", "pipeline-layers",
          "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers", "sequence-parallel", "zero",
          "use-distributed-optimizer", "expert-model-parallel-size", "context-parallel-size", "micro-batch",
          "recompute", "recompute-layers", "recompute-method", "recompute-plan", "iteration-time"};
      require(kChosen.count(name) == 0, "--" + name + " does not apply to --search, which chooses the layout "
                                        "(parallel sizes, ZeRO, micro-batch, recompute): leave it out, or plan that "
                                        "layout without --search");
    }
  // The search plans the ring on the fused kernel and Ulysses without it: a ring asked for over the
  // unfused attention would be planned as Ulysses without a word.
  require(!f.search || app.count("--cp-comm-type") == 0 || f.layout.cp_comm != "p2p" ||
              f.layout.attention == "fused",
          "--cp-comm-type p2p: the ring runs on the fused attention kernel (add --attention fused; without it "
          "--search plans context parallelism as Ulysses, --cp-comm-type a2a)");
  require(f.search || app.count("--top") == 0, "--top applies to --search (the layouts it prints)");
  // --hardware local: this machine as mpirun would run the layout (its ranks share the cores).
  plan::Hardware local;
  const bool is_local = f.hardware == "local";
  if (is_local) {
    require(!f.paper && !f.moe_paper, "--hardware local plans a layout on this machine: not --paper or --moe-paper");
    if (app.count("--threads") == 0) f.threads = omp_get_max_threads();  // as lattice train runs
    require(f.threads >= 1 && f.threads <= 4096, "--threads must be between 1 and 4096");
    const LayoutConfig layout = f.layout.resolve(f.model.layers);
    local = plan::local_hardware(f.gpus > 0 ? f.gpus : layout.tp * layout.cp * layout.pp, f.threads, !f.json);
  }
  const plan::Hardware& hw = is_local ? local : plan::hardware_preset(f.hardware);
  require(f.svg_dir.empty() || f.paper, "--svg needs --paper");
  if (!f.svg_dir.empty())
    for (const std::string& path : plan::paper_svg_paths(f.svg_dir)) check_output_path(path, OutputKind::svg, "--svg", f.output_rules());
  require(!(f.paper && f.moe_paper), "--paper and --moe-paper are separate reports: give one");
  require(f.html.empty() || (!f.paper && !f.moe_paper), "--html draws a plan or a --search: not --paper or --moe-paper");
  if (!f.html.empty()) check_output_path(f.html, OutputKind::html, "--html", f.output_rules());
  if (f.paper) return run_paper(f, hw);
  if (f.moe_paper) {
    if (f.json)
      std::printf("%s\n", plan::moe_paper_json().dump().c_str());
    else
      std::fputs(plan::moe_paper_text().c_str(), stdout);
    return 0;
  }

  const plan::PlanRequest request = build_request(f, hw);
  const double peak = f.peak_flops.empty() ? 0 : plan::parse_rate(f.peak_flops, "--peak-flops");
  // train's --peak-flops bound (its numbers are train's, in the one table): past it is a typo (1e-30T
  // printed MFU 3e28%). plan's flag takes units ("312T"), so the table cannot check it as given.
  const FlagBound& peak_bound = *find_flag_bound("train", "peak-flops");
  require(f.peak_flops.empty() || (peak >= double(peak_bound.lo) && peak <= double(peak_bound.hi)),
          "--peak-flops must be a rate from " + number_text(peak_bound.lo) + " to " + number_text(peak_bound.hi) +
              " FLOP/s per device (got " + f.peak_flops + ")");
  require(f.iteration_time >= 0 && std::isfinite(f.iteration_time), "--iteration-time must be a finite number >= 0");

  if (f.search) {
    request.model.validate();
    require(f.top >= 1 && f.top <= 10000, "--top must be between 1 and 10000");
    const auto start = std::chrono::steady_clock::now();
    // A long search (hundreds of thousands of GPUs have many layouts) says it is under way.
    const plan::SearchResult found =
        plan::search_layouts(request, hw, size_t(f.top), peak, [](size_t weighed, size_t done, size_t points, double s) {
          // Points differ in cost (deep stages choose each layer's recompute), so the share is a guide.
          std::fprintf(stderr, "lattice plan: searching: %zu layouts weighed in %.0f s, %zu of %zu layout points done\n",
                       weighed, s, done, points);
        });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!f.html.empty()) {
      write_output_file(f.html, OutputKind::html, "--html", plan::search_html(found.best, found.considered, seconds),
                        f.output_rules());
    }
    if (f.json)
      std::printf("%s\n", plan::search_json(found.best, found.considered, seconds).dump().c_str());
    else
      std::fputs(plan::search_text(found.best, found.considered, seconds).c_str(), stdout);
    return 0;
  }

  plan::PlanRequest chosen_request = request;
  std::optional<plan::AutoRecompute> chosen;
  if (f.layout.recompute == "auto") {  // build_request resolved a copy of the flags: the budget is gpu_memory
    chosen = plan::choose_recompute_plan(request, request.gpu_memory);
    chosen_request.layout.recompute_plan = chosen->plan;
    chosen_request.layout.recompute = plan::strongest_mode(chosen->plan);
  }
  plan::check_layout(chosen_request);
  const plan::Plan p = plan::evaluate(chosen_request, hw, f.iteration_time, peak);
  // A measured iteration faster than the devices' peak allows is a wrong time (or peak), not an MFU
  // above 100% (the hardware FLOPs, recomputation included, bound it; as train's --peak-flops check).
  if (f.iteration_time > 0 && p.use.hfu > 1.0) {
    char text[200];
    std::snprintf(text, sizeof text, "--iteration-time %g s is shorter than the %.3g s the iteration's FLOPs take at the "
                  "peak (%.4g FLOP/s a device): check the time and --peak-flops", f.iteration_time,
                  f.iteration_time * p.use.hfu, p.use.peak_flops);
    fail(text);
  }
  if (!f.html.empty()) {
    write_output_file(f.html, OutputKind::html, "--html", plan::plan_html(p, hw), f.output_rules());
  }
  if (f.json) {
    nlohmann::json j = plan::plan_json(p);
    if (chosen) {
      nlohmann::json least = nlohmann::json::array();
      for (double b : chosen->least_peak) least.push_back(b);
      j["recompute_auto"] = {{"budget_bytes", request.gpu_memory}, {"peak_bytes", chosen->peak},
                             {"least_peak_bytes", least}, {"recompute_flops", chosen->recompute_flops},
                             {"model_flops", chosen->model_flops}};
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::fputs(plan::plan_text(p, hw).c_str(), stdout);
  const auto mib = [](double bytes) { return bytes / double(1 << 20); };
  if (chosen)
    std::printf("recompute (auto, %.1f MiB a rank): %s — peak %.1f MiB predicted (least possible %.1f MiB), "
                "recompute %.4g GFLOP a step (+%.1f%% of the model's)\n",
                mib(double(request.gpu_memory)),
                plan::describe_recompute_plan(*chosen, chosen_request.layout.pp).c_str(), mib(chosen->peak),
                mib(*std::max_element(chosen->least_peak.begin(), chosen->least_peak.end())),
                chosen->recompute_flops / 1e9,
                chosen->model_flops > 0 ? 100.0 * chosen->recompute_flops / chosen->model_flops : 0.0);
  return 0;
}

}  // namespace lattice::cli
