#include "cli/model_flags.hpp"

#include <omp.h>

#include "cli/cli_util.hpp"
#include "cli/flag_rules.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/output_path.hpp"
#include "core/pinned_path.hpp"
#include "core/stage_partition.hpp"
#include "plan/units.hpp"
#include "train/resume_settings.hpp"

namespace lattice::cli {

void add_model_flags(CLI::App& app, ModelConfig& m) {
  // A flag given twice (say in a script and again by hand) takes the last value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--layers,--num-layers", m.layers, "transformer layers L")->capture_default_str();
  app.add_option("--hidden,--hidden-size", m.hidden, "hidden size h")->capture_default_str();
  app.add_option("--heads,--num-attention-heads", m.heads, "attention heads a")->capture_default_str();
  app.add_option("--seq-len,--seq-length", m.seq_len, "sequence length s")->capture_default_str();
  app.add_option("--vocab,--vocab-size", m.vocab, "vocabulary (256 for the byte tokenizer)")->capture_default_str();
  app.add_option("--dropout,--hidden-dropout", m.dropout, "dropout probability at the four sites")
      ->capture_default_str();
  add_moe_flags(app, m.moe);
}

void add_moe_flags(CLI::App& app, MoEConfig& moe) {
  app.add_option("--num-experts", moe.experts, "Mixture-of-Experts: experts per MoE layer E (0 = dense)");
  app.add_option("--moe-layer-freq", moe.layer_freq, "layer i is an MoE layer when i % F == 0 (GShard: 2)")
      ->capture_default_str();
  app.add_option("--moe-router-topk", moe.topk, "experts per token k (default: topk 2, gshard 2, switch 1, "
                                                "expert-choice 1 = the c of its capacity)");
  app.add_option("--moe-ffn-hidden-size", moe.ffn_hidden, "each expert's hidden size (default 4h)");
  app.add_option_function<std::string>(
         "--moe-router", [&moe](const std::string& s) { moe.router = parse_moe_router(s); },
         "topk (noisy top-k) | gshard | switch | expert-choice")
      ->check(CLI::IsMember({"topk", "gshard", "switch", "expert-choice"}));
  app.add_option("--moe-expert-capacity-factor", moe.capacity_factor,
                 "capacity C = ceil(k·T·cf/E) tokens per expert; 0 = no dropping")
      ->capture_default_str();
  app.add_flag_callback("--moe-no-drop", [&moe] { moe.capacity_factor = 0; }, "alias of --moe-expert-capacity-factor 0");
  app.add_option_function<std::string>(
         "--moe-token-drop-policy", [&moe](const std::string& s) { moe.drop_policy = parse_drop_policy(s); },
         "probs (drop the lowest gates) | position (drop the latest tokens)")
      ->check(CLI::IsMember({"probs", "position"}));
  app.add_option("--moe-aux-loss-coeff", moe.aux_loss_coeff, "weight of the router's auxiliary losses")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--moe-router-load-balancing-type", [&moe](const std::string& s) { moe.load_balancing = s == "aux_loss"; },
         "aux_loss | none (none: the auxiliary losses are reported but not trained on)")
      ->check(CLI::IsMember({"aux_loss", "none"}));
  app.add_option("--moe-groups", moe.groups, "routing groups per micro-batch (GShard's local group dispatching)")
      ->capture_default_str();
  app.add_option("--expert-dropout", moe.expert_dropout, "dropout on each expert's hidden activation (Switch)");
  app.add_option("--moe-init-scale", moe.init_scale, "multiplies the router's and experts' init std (Switch: 0.1)");
}

void add_device_flag(CLI::App& app, std::string& device) {
  app.add_option("--device", device,
                 "cpu | cuda | cpu-guarded: the device that runs the kernels (cuda, and cpu-guarded, the CPU "
                 "with device memory the host cannot touch, for testing: docs/gpu.md)")
      ->check(CLI::IsMember({"cpu", "cuda", "cpu-guarded"}))
      ->capture_default_str();
}

void add_threads_flag(CLI::App& app, int& threads) {
  app.add_option("--threads", threads, "OpenMP threads (default or 0: $OMP_NUM_THREADS if set, else all cores, as lattice train)");
}
void use_threads(int threads) {  // bounded by cli/flag_rules.cpp, as every number flag
  if (threads > 0) omp_set_num_threads(threads);
}

void add_layout_flags(CLI::App& app, LayoutFlags& f) {
  LayoutConfig& l = f.layout;
  app.add_option("--recompute,--recompute-granularity", f.recompute,
                 "none | selective | full | auto (the least recompute that fits --memory-budget)")
      ->capture_default_str();
  app.add_option("--memory-budget", f.memory_budget,
                 "with --recompute auto: the accounted bytes a rank may hold (e.g. 1.5GiB; the tracking "
                 "allocator's bytes, not RSS)");
  app.add_option("--recompute-layers,--recompute-num-layers", l.recompute_layers,
                 "block: full recompute of the first N layers of each pipeline stage only; uniform: the layers k of each segment")
      ->check(CLI::Range(0, kMaxLayers));
  app.add_option("--recompute-method", f.recompute_method,
                 "with --recompute full: block (the first --recompute-layers N layers of each stage, default all) | uniform "
                 "(segments of --recompute-layers k layers, only each segment's input kept; Chen et al.)");
  app.add_option("--recompute-plan", f.recompute_plan,
                 "every layer's mode, one character a layer: n none, s selective, c checkpoint (keeps its input, "
                 "starts a segment), ~ in the segment below (keeps nothing), e.g. c~c~ssnn");
  app.add_option("--attention", f.attention,
                 "unfused | fused (tiled causal attention keeping the log-sum-exp, not the s² tensors)")
      ->check(CLI::IsMember({"unfused", "fused"}))
      ->capture_default_str();
  app.add_option("--tied-embedding-grads", f.tied_embedding_grads,
                 "together | apart: apart accumulates the tied embedding's input and output gradients apart and adds "
                 "them at the step's end as pipeline stages do, so one rank reproduces a pipeline bit for bit "
                 "(one rank only; one vocabulary-sized gradient buffer more)")
      ->check(CLI::IsMember({"together", "apart"}))
      ->capture_default_str();
  app.add_flag("--pack-masks", l.pack_masks,
               "keep dropout masks at one bit an element instead of one byte (bit-identical training)");
  app.add_option("--activation-compression", f.activation_compression,
                 "none | fp8: keep the GeLU and FC2 inputs and the attention's s² tensors for backward in 8 bits "
                 "(e4m3, a scale per 32 elements); the forward computes at full precision")
      ->check(CLI::IsMember({"none", "fp8"}))
      ->capture_default_str();
  app.add_option("--activation-dtype", f.activation_dtype, "fp32 | bf16 storage of kept activations")
      ->capture_default_str();
  app.add_option("--tensor-model-parallel-size", l.tp, "tensor-parallel size t")->capture_default_str();
  app.add_option("--pipeline-model-parallel-size", l.pp, "pipeline-parallel size p")->capture_default_str();
  app.add_option("--virtual-stages,--virtual-pipeline-model-parallel-size", l.virtual_stages,
                 "interleaved chunks per pipeline rank m");
  app.add_option("--pipeline-layers", f.pipeline_layers,
                 "layers per pipeline stage, e.g. 3,4,4,1 (p·m counts in virtual-stage order), or auto: the "
                 "partition minimising the slowest stage under the memory limit (default: L/(p·m) each)");
  app.add_option("--decoder-first-pipeline-num-layers", f.first_stage_layers,
                 "layers on the first pipeline stage (the rest spread evenly; Megatron's name)");
  app.add_option("--decoder-last-pipeline-num-layers", f.last_stage_layers,
                 "layers on the last pipeline stage (the rest spread evenly; Megatron's name)");
  app.add_flag("--sequence-parallel", l.sequence_parallel, "sequence parallelism (needs t > 1)");
  app.add_option("--zero", l.zero, "ZeRO stage 0-3");
  app.add_option("--expert-model-parallel-size,--ep", l.ep, "expert-parallel size e (divides data-parallel x context-parallel size)")
      ->capture_default_str();
  app.add_option("--context-parallel-size,--cp", l.cp,
                 "context-parallel size c: each sequence split into 2c chunks, rank r holding chunks r and 2c-1-r "
                 "(lattice train and plan)")
      ->capture_default_str();
  app.add_option("--cp-comm-type", f.cp_comm,
                 "p2p | a2a: how context-parallel ranks share attention (p2p: K and V pass around a ring, each "
                 "block's attention computed as they travel, needs --attention fused; a2a: DeepSpeed-Ulysses "
                 "all-to-alls between sequence and head splits)")
      ->capture_default_str();
  app.add_option("--params-dtype", f.params_dtype,
                 "fp32 | bf16 | fp16 model weights and gradients (16-bit: fp32 master weights; fp16: loss scaling)")
      ->capture_default_str();
  app.add_flag_callback("--use-distributed-optimizer", [&l] { l.zero = 1; }, "alias of --zero 1");
}

namespace {
// Megatron's first/last-stage counts: the other stages share the rest evenly.
std::vector<int> first_last_counts(int first, int last, int layers, int p, int m) {
  require(m == 1, "--decoder-first/last-pipeline-num-layers need --virtual-stages 1");
  require(p > 1, "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
  require(first >= 0 && last >= 0, "--decoder-first/last-pipeline-num-layers must be positive (0: not set)");
  const int64_t middle = int64_t(p) - (first > 0) - (last > 0), rest = int64_t(layers) - first - last;
  require(rest >= 0, "--decoder-first/last-pipeline-num-layers (" + std::to_string(first) + " + " +
                         std::to_string(last) + ") are more than --layers " + std::to_string(layers));
  require(middle > 0 || rest == 0, "--decoder-first/last-pipeline-num-layers (" + std::to_string(first) + " + " +
                                       std::to_string(last) + ") must add up to --layers " + std::to_string(layers) +
                                       ": the " + std::to_string(p) + " stages are the first and the last");
  require(rest >= middle, "--decoder-first/last-pipeline-num-layers leave " + std::to_string(rest) + " of --layers " +
                             std::to_string(layers) + " for the other " + std::to_string(middle) +
                             " stages, which need at least one each");
  require(middle == 0 ? rest == 0 : rest % middle == 0,
          "--decoder-first/last-pipeline-num-layers leave " + std::to_string(rest) + " of --layers " +
              std::to_string(layers) + ", which do not spread evenly over the other " + std::to_string(middle) +
              " stages");
  std::vector<int> counts(size_t(p), middle > 0 ? int(rest / middle) : 0);
  if (first > 0) counts.front() = first;
  if (last > 0) counts.back() = last;
  return counts;
}
}  // namespace

LayoutConfig LayoutFlags::resolve(int layers) {
  recompute_auto = recompute == "auto";
  if (recompute_auto) {
    require(!memory_budget.empty(), "--recompute auto needs --memory-budget BYTES (the accounted bytes a rank may hold)");
    require(recompute_method.empty() && layout.recompute_layers < 0 && recompute_plan.empty(),
            "--recompute auto chooses every layer's mode: pass it without --recompute-method, --recompute-layers "
            "and --recompute-plan");
    require(pipeline_layers != "auto",
            "--recompute auto and --pipeline-layers auto each depend on the other's choice: pass one");
  }
  layout.recompute = recompute_auto ? Recompute::none : parse_recompute(recompute);
  memory_budget_bytes = memory_budget.empty() ? 0 : plan::parse_bytes(memory_budget, "--memory-budget");
  layout.activation_dtype = parse_dtype(activation_dtype);
  layout.attention = parse_attention(attention);
  require(activation_compression == "none" || activation_compression == "fp8",
          "--activation-compression must be none or fp8 (got '" + activation_compression + "')");
  layout.fp8_kept = activation_compression == "fp8";
  require(tied_embedding_grads == "together" || tied_embedding_grads == "apart",
          "--tied-embedding-grads must be together or apart (got '" + tied_embedding_grads + "')");
  layout.tied_grads_apart = tied_embedding_grads == "apart";
  require(recompute_method.empty() || layout.recompute == Recompute::full,
          "--recompute-method applies to --recompute full only (got --recompute " + recompute + ")");
  layout.recompute_method = parse_recompute_method(recompute_method.empty() ? "block" : recompute_method);
  if (!recompute_plan.empty()) {
    require(recompute_method.empty() && layout.recompute_layers < 0,
            "--recompute-plan gives every layer's mode: pass it without --recompute-method and --recompute-layers");
    layout.recompute_plan = parse_recompute_plan(recompute_plan);
  }
  require(layout.tp >= 1 && layout.pp >= 1 && layout.virtual_stages >= 1 && layout.ep >= 1 && layout.cp >= 1,
          "parallel sizes must be at least 1");
  layout.cp_comm = parse_cp_comm(cp_comm);
  require(layout.cp == 1 || context_parallel_runs,
          "--context-parallel-size " + std::to_string(layout.cp) +
              ": only lattice train and lattice plan take context parallelism yet");
  layout.params_dtype = parse_params_dtype(params_dtype);
  require(layout.zero >= 0 && layout.zero <= 3, "--zero must be 0, 1, 2 or 3 (got " + std::to_string(layout.zero) + ")");
  const bool first_last = first_stage_layers != 0 || last_stage_layers != 0;
  require(pipeline_layers.empty() || !first_last,
          "--pipeline-layers and --decoder-first/last-pipeline-num-layers both given: pass one");
  partition_auto = pipeline_layers == "auto";
  if (partition_auto) {
    require(layout.virtual_stages == 1, "--pipeline-layers auto needs --virtual-stages 1");
  } else if (!pipeline_layers.empty()) {
    layout.stage_layers = parse_layer_counts(pipeline_layers, "--pipeline-layers");
  } else if (first_last) {
    layout.stage_layers = first_last_counts(first_stage_layers, last_stage_layers, layers, layout.pp, layout.virtual_stages);
  }
  return layout;
}

void add_train_flags(CLI::App& app, TrainConfig& t, std::string& shuffle) {
  app.add_option("--data", t.data_dir, "directory with train.bin (and val.bin)");
  app.add_option("--steps,--train-iters", t.steps, "optimizer steps")->capture_default_str();
  app.add_option("--micro-batch,--micro-batch-size", t.micro_batch, "sequences per micro-batch b")
      ->capture_default_str();
  app.add_option("--global-batch,--global-batch-size", t.global_batch,
                 "sequences per optimizer step (multiple of --micro-batch; default: one micro-batch)");
  app.add_option("--lr", t.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", t.min_lr, "final learning rate of the cosine schedule")->capture_default_str();
  app.add_option("--lr-schedule,--lr-decay-style", t.lr_schedule, "constant | cosine")->capture_default_str();
  app.add_option("--warmup,--lr-warmup-iters", t.warmup, "linear warm-up steps")->capture_default_str();
  app.add_option("--optimizer", t.optim.kind, "adamw | adafactor (factored second moments) | sm3")
      ->capture_default_str();
  app.add_option("--beta1,--adam-beta1", t.optim.beta1, "AdamW β1 (SM3: momentum)")->capture_default_str();
  app.add_option("--beta2,--adam-beta2", t.optim.beta2, "AdamW β2")->capture_default_str();
  app.add_option("--eps,--adam-eps", t.optim.eps, "AdamW ε")->capture_default_str();
  app.add_option("--weight-decay", t.optim.weight_decay, "decoupled weight decay")->capture_default_str();
  app.add_option("--offload-optimizer", t.optim.offload_dir,
                 "keep AdamW's moments on disk in this directory, read ahead and written back a bucket at a time");
  app.add_option_function<std::string>(
      "--offload-params",
      [&t](const std::string& dir) {
        require(t.optim.offload_dir.empty() || t.optim.offload_dir == dir,
                "--offload-params and --offload-optimizer share one file: give them the same directory");
        t.optim.offload_dir = dir;
        t.optim.offload_params = true;
      },
      "ZeRO-3: keep the fp32 weight shards on disk too (with the moments, in this directory)");
  app.add_option("--zero-prefetch", t.zero_prefetch,
                 "on | off: ZeRO-3 gathers the next layer while one computes (holds one more layer)")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str(t.zero_prefetch ? "on" : "off");  // as it is written (--dump-config writes it back)
  app.add_option("--initial-loss-scale", t.initial_loss_scale, "fp16: the first loss scale")->capture_default_str();
  app.add_option("--loss-scale-window", t.loss_scale_window, "fp16: clean steps before the loss scale doubles")
      ->capture_default_str();
  app.add_option("--clip-grad", t.clip_grad, "clip the global gradient norm (0 = off)")->capture_default_str();
  app.add_option("--shuffle", shuffle, "on | off (off reads like llm.c's loader)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--seed", t.seed, "seed of initialisation, data order and dropout")
      ->check(seed_range())
      ->capture_default_str();
  app.add_flag("--override-schedule", t.override_schedule,
               "with --resume: the given --lr, --min-lr, --lr-schedule, --warmup, --beta1, --beta2, --eps, "
               "--weight-decay, --clip-grad and --loss-scale-window replace the checkpoint's, and the cosine decays "
               "to --steps (without it a resume continues the run's schedule: flags not given take its values)");
  app.add_option("--init,--load", t.init, "start from weights: checkpoint dir, .safetensors or llm.c .bin");
  app.add_option("--save", t.save, "write a checkpoint directory at the end")
      ->transform([](const std::string& dir) { return directory_path(dir); }, "", "");
  app.add_option_function<std::string>(
         "--save-every,--save-interval",
         [&t](const std::string& every) {  // a whole number or "auto" (cli/flag_rules.cpp checks which)
           t.save_every_auto = every == "auto";
           t.save_every = t.save_every_auto ? 0 : std::strtoll(every.c_str(), nullptr, 10);
         },
         "also every N steps, or auto: Young/Daly's interval from --mtbf and the save cost measured at the first save")
      ->type_name("INT");  // a whole number, bounded in the flag table (which also allows "auto")
  app.add_option_function<std::string>(
         "--mtbf",
         [&t](const std::string& duration) {
           t.mtbf = parse_duration(duration).value_or(std::numeric_limits<double>::quiet_NaN());
         },
         "--save-every auto: the mean time between failures (seconds, or 90m, 6h, 2d)")
      ->type_name("DURATION");
  app.add_flag("--async-save", t.async_save,
               "write checkpoints from host copies in a background thread while training goes on");
  app.add_option("--resume", t.resume, "continue a run from its checkpoint directory");
  app.add_option("--eval-every,--eval-interval", t.eval_every, "validation loss every N steps");
  app.add_option("--eval-batches,--eval-iters", t.eval_batches, "micro-batches per validation");
  app.add_option("--peak-flops", t.peak_flops, "peak FLOP/s a rank for MFU (default: the theoretical peak of the rank's "
                 "cores for the dtype's GEMM path, docs/mfu.md)");
  app.add_option("--threads", t.threads, "OpenMP threads (default or 0: $OMP_NUM_THREADS if set, else all cores)");
  app.add_option("--comm-timeout", t.comm_timeout,
                 "seconds a rank may wait on one communication before it stops the job (0 = off)")
      ->capture_default_str();
  app.add_option("--straggler-threshold", t.straggler_threshold,
                 "name a rank a straggler when its compute time over the last 2 s exceeds the median of its "
                 "stage's other ranks by more than this share (docs/recovery.md)")
      ->capture_default_str();
  app.add_flag("--json", t.json, "JSON Lines on stdout");
  app.add_option("--schedule", t.schedule, "pipeline schedule: gpipe | 1f1b | interleaved (with --virtual-stages) | zb-h1 (zero bubble: backward split "
                 "into input and weight passes) | pipedream-2bw (no flush, two weight versions, updates one step late)")
      ->capture_default_str();
  app.add_option("--trace", t.trace, "write a Chrome trace (Perfetto) of every rank's forward/backward/receive/send/optimizer");
  app.add_option("--report-dir", t.report_dir,
                 "write run.jsonl and a self-contained report.html (curves, memory, traffic, timeline) here as the run goes");
  // lattice launch's relaunch (no group: not in --help): its --report-dir goes on with the launch's
  // report, its restart records included, where a run from step 0 would start it again.
  app.add_flag("--continue-report", t.continue_report, "a relaunch by lattice launch continues --report-dir's log")
      ->group("");
  app.add_flag("--comm-report", t.comm_report, "print the bytes each rank sent per group in the last step");
  add_overwrite_flag(app, t.overwrite);
}

CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "a seed is a non-negative integer (got '" + s + "')";
        errno = 0;
        (void)std::strtoull(s.c_str(), nullptr, 10);
        return errno == ERANGE ? "a seed is below 2^64 (got " + s + ")" : std::string();
      },
      "UINT64");
}

void add_config_file(CLI::App& app, std::string& path) {
  // Read by parse_flags (cli/config_file.hpp), strictly: unknown keys and wrong types are errors.
  app.add_option("--config", path, "TOML file of flags (long names as keys); command-line flags win");
}

nlohmann::json take_resumed_settings(const CLI::App& app, TrainConfig& train) {
  train.given_settings.clear();
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0 && !opt->get_lnames().empty()) train.given_settings.push_back(opt->get_lnames().front());
  if (!checkpoint::holds_trainer_state(train.resume)) return nullptr;
  const nlohmann::json state = checkpoint::read_trainer_state(train.resume);
  const nlohmann::json saved = state.contains("train") ? state["train"] : nlohmann::json();
  train.resumed_settings = resume_training_settings(train, saved, train.resume);
  train.settings_resumed = true;
  return saved;
}

std::vector<std::pair<std::string, nlohmann::json>> take_resumed_precision(const CLI::App& app, LayoutFlags& layout,
                                                                           const std::string& checkpoint) {
  std::vector<std::pair<std::string, nlohmann::json>> taken;
  if (checkpoint.empty() || !checkpoint::holds_trainer_state(checkpoint)) return taken;
  const checkpoint::RecordedPrecision saved = checkpoint::read_recorded_precision(checkpoint);
  if (saved.params && app.count("--params-dtype") == 0) {
    layout.params_dtype = to_string(*saved.params);
    taken.emplace_back("params-dtype", layout.params_dtype);
  }
  if (saved.activations && app.count("--activation-dtype") == 0) {
    layout.activation_dtype = to_string(*saved.activations);
    taken.emplace_back("activation-dtype", layout.activation_dtype);
  }
  return taken;
}

const std::vector<ModelFlag>& model_flag_table() {
  using J = nlohmann::json;
  using C = ModelConfig;
  static const std::vector<ModelFlag> table = {
      {"layers", nullptr, ModelFlag::shape, false, [](C& t, const C& f) { t.layers = f.layers; },
       [](const C& c) { return J(c.layers); }},
      {"hidden", nullptr, ModelFlag::shape, false, [](C& t, const C& f) { t.hidden = f.hidden; },
       [](const C& c) { return J(c.hidden); }},
      {"heads", nullptr, ModelFlag::shape, false, [](C& t, const C& f) { t.heads = f.heads; },
       [](const C& c) { return J(c.heads); }},
      {"seq-len", nullptr, ModelFlag::shape, false, [](C& t, const C& f) { t.seq_len = f.seq_len; },
       [](const C& c) { return J(c.seq_len); }},
      {"vocab", nullptr, ModelFlag::vocab, false, [](C& t, const C& f) { t.vocab = f.vocab; },
       [](const C& c) { return J(c.vocab); }},
      {"dropout", nullptr, ModelFlag::training, false, [](C& t, const C& f) { t.dropout = f.dropout; },
       [](const C& c) { return J(c.dropout); }},
      {"num-experts", nullptr, ModelFlag::shape, false, [](C& t, const C& f) { t.moe.experts = f.moe.experts; },
       [](const C& c) { return J(c.moe.experts); }},
      {"moe-layer-freq", nullptr, ModelFlag::shape, true, [](C& t, const C& f) { t.moe.layer_freq = f.moe.layer_freq; },
       [](const C& c) { return J(c.moe.layer_freq); }},
      {"moe-router-topk", nullptr, ModelFlag::training, true, [](C& t, const C& f) { t.moe.topk = f.moe.topk; },
       [](const C& c) { return J(c.moe.enabled() ? c.moe.k() : c.moe.topk); }},
      {"moe-ffn-hidden-size", nullptr, ModelFlag::shape, true,
       [](C& t, const C& f) { t.moe.ffn_hidden = f.moe.ffn_hidden; },
       [](const C& c) { return J(c.moe.enabled() ? c.ffn_hidden() : c.moe.ffn_hidden); }},
      {"moe-router", nullptr, ModelFlag::shape, true, [](C& t, const C& f) { t.moe.router = f.moe.router; },
       [](const C& c) { return J(to_string(c.moe.router)); }},
      {"moe-expert-capacity-factor", "moe-no-drop", ModelFlag::training, true,
       [](C& t, const C& f) { t.moe.capacity_factor = f.moe.capacity_factor; },
       [](const C& c) { return J(c.moe.capacity_factor); }},
      {"moe-token-drop-policy", nullptr, ModelFlag::training, true,
       [](C& t, const C& f) { t.moe.drop_policy = f.moe.drop_policy; },
       [](const C& c) { return J(to_string(c.moe.drop_policy)); }},
      {"moe-aux-loss-coeff", nullptr, ModelFlag::training, true,
       [](C& t, const C& f) { t.moe.aux_loss_coeff = f.moe.aux_loss_coeff; },
       [](const C& c) { return J(c.moe.aux_loss_coeff); }},
      {"moe-router-load-balancing-type", nullptr, ModelFlag::training, true,
       [](C& t, const C& f) { t.moe.load_balancing = f.moe.load_balancing; },
       [](const C& c) { return J(c.moe.load_balancing ? "aux_loss" : "none"); }},
      {"moe-groups", nullptr, ModelFlag::training, true, [](C& t, const C& f) { t.moe.groups = f.moe.groups; },
       [](const C& c) { return J(c.moe.groups); }},
      {"expert-dropout", nullptr, ModelFlag::training, true,
       [](C& t, const C& f) { t.moe.expert_dropout = f.moe.expert_dropout; },
       [](const C& c) { return J(c.moe.expert_dropout); }},
      {"moe-init-scale", nullptr, ModelFlag::training, true,
       [](C& t, const C& f) { t.moe.init_scale = f.moe.init_scale; },
       [](const C& c) { return J(c.moe.init_scale); }},
  };
  return table;
}

const char* model_flag_spelling(const CLI::App& app, const ModelFlag& row) {
  for (const char* flag : {row.flag, row.alias}) {
    const CLI::Option* opt = flag ? app.get_option_no_throw(std::string("--") + flag) : nullptr;
    if (opt && opt->count() > 0 && (opt->get_expected_min() != 0 || flag_on(opt))) return flag;
  }
  return nullptr;
}

std::vector<std::pair<std::string, nlohmann::json>> take_checkpoint_model(const CLI::App& app, ModelConfig& model,
                                                                          const std::string& checkpoint,
                                                                          CheckpointModel use, bool vocab_too,
                                                                          bool non_default_only) {
  const auto& table = model_flag_table();
  const ModelFlag& experts =
      *std::find_if(table.begin(), table.end(), [](const ModelFlag& r) { return std::string(r.flag) == "num-experts"; });
  const auto moe_flags_need = [&](const std::string& why) {
    for (const ModelFlag& row : table)
      if (const char* spelled = row.moe ? model_flag_spelling(app, row) : nullptr)
        fail("--" + std::string(spelled) + ": the --moe-* and --expert-dropout flags need a Mixture-of-Experts model" +
             why);
  };
  if (!checkpoint::holds_trainer_state(checkpoint)) {
    // A path that names nothing is said first, before anything read by the model it would have given
    // (the data's tokens checked against a vocabulary the checkpoint would have set).
    std::error_code ec;
    require(checkpoint.empty() || std::filesystem::exists(pinned_path(checkpoint), ec) || ec,
            "checkpoint " + checkpoint + why_absent(checkpoint));
    // A checkpoint that says no model (a file, llm.c's): the flag rule as for a new run.
    if (!checkpoint.empty() && !model_flag_given(app, experts) && model.moe.experts == 0)
      moe_flags_need(" (--num-experts E; got none)");
    return {};
  }
  const ModelConfig saved = checkpoint::read_model_config(checkpoint), fresh;
  // An MoE flag on a dense checkpoint would be ignored (a dense model records no MoE settings).
  if (!saved.moe.enabled() && !model_flag_given(app, experts))
    moe_flags_need(", and checkpoint " + checkpoint + " holds a dense one");
  // Another --num-experts is another model (named where it is refused): none of the run's MoE values.
  const bool other_experts = model_flag_given(app, experts) && model.moe.experts != saved.moe.experts;
  const bool whole = use == CheckpointModel::resume;  // else the shape only, which the weights fix
  std::vector<std::pair<std::string, nlohmann::json>> taken;
  for (const ModelFlag& row : table) {
    const bool of_experts = row.moe || &row == &experts;
    if ((row.kind == ModelFlag::vocab && !vocab_too) || (row.kind == ModelFlag::training && !whole) ||
        (of_experts && other_experts) || model_flag_given(app, row))
      continue;
    row.copy(model, saved);
    if (of_experts && !saved.moe.enabled()) continue;  // a dense model's defaults: nothing to name
    if (non_default_only && row.value(saved) == row.value(fresh)) continue;
    taken.emplace_back(row.flag, row.value(model));
  }
  if (non_default_only) {  // values a fresh run of this model derives where the flags are left at 0
    MoEConfig derived;
    derived.router = model.moe.router;
    std::erase_if(taken, [&](const std::pair<std::string, nlohmann::json>& t) {
      return (t.first == std::string("moe-router-topk") && t.second == derived.k()) ||
             (t.first == std::string("moe-ffn-hidden-size") && t.second == 4 * model.hidden);
    });
  }
  return taken;
}

}  // namespace lattice::cli
