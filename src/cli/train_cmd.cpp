// `lattice train`: train a GPT model on a prepared token directory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include <omp.h>

#include "checkpoint/checkpoint.hpp"
#include "cli/cli_util.hpp"
#include "cli/config_file.hpp"
#include "cli/commands.hpp"
#include "backend/device_ops.hpp"
#include "backend/op_profile.hpp"
#include "cli/device_support.hpp"
#include "cli/model_flags.hpp"
#include "comm/distributed.hpp"
#include "comm/fault.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/pinned_path.hpp"
#include "core/machine_peak.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer_files.hpp"
#include "kernels/gemm.hpp"
#include "core/memory_limit.hpp"
#include "core/stage_partition.hpp"
#include "plan/auto_partition.hpp"
#include "plan/measure.hpp"
#include "plan/memory_model.hpp"
#include "plan/recompute_auto.hpp"
#include "plan/report.hpp"
#include "plan/time_model.hpp"
#include "plan/units.hpp"
#include "report/step_report.hpp"
#include "train/resume_settings.hpp"
#include "train/trainer.hpp"

namespace lattice::cli {

namespace {

// The run as the planner sees it: `world` ranks, this run's batch, save, offload and schedule.
plan::PlanRequest run_request(const ModelConfig& model, const LayoutConfig& layout, const TrainConfig& train,
                              int world) {
  plan::PlanRequest r;
  r.model = model;
  r.layout = layout;
  r.layout.dp = std::max(1, world / (layout.tp * layout.cp * layout.pp));
  r.micro_batch = train.micro_batch;
  r.global_batch = train.global_batch > 0 ? train.global_batch : train.micro_batch * r.layout.dp;
  r.gpus = world;
  r.save = !train.save.empty();
  r.offload_optimizer = !train.optim.offload_dir.empty();
  r.offload_params = train.optim.offload_params;
  r.zero_bubble = train.schedule == "zb-h1";
  r.pipedream_2bw = train.schedule == "pipedream-2bw";  // two weight versions to place
  r.gpipe = train.schedule == "gpipe";                   // every micro-batch in flight
  r.threads = train.threads > 0 ? train.threads : omp_get_max_threads();
  r.data_bytes = token_file_bytes(train.data_dir);  // the token files join the data category
  return r;
}

// A saved bench's GEMM rate for the trainer's peak (Trainer::mfu_peak decides): it stands in where
// the theoretical peak is unknown, and bounds it from below where it ran as many threads a rank. An
// unreadable bench leaves it out rather than stopping the run.
void peak_inputs(TrainConfig& train, DType dtype, int host_ranks) {
  train.gemm_isa = gemm_isa();
  if (train.peak_flops > 0) return;
  try {
    const std::string path = plan::bench_result_path(host_ranks);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return;
    const plan::LocalBench bench = plan::read_local_bench(path);
    const bool bf16 = dtype == DType::bf16;
    train.measured_peak_flops = bf16 ? bench.compute.gemm_bf16_flops : bench.compute.gemm_fp32_flops;
    train.measured_peak_threads = bench.threads_per_rank;
    train.measured_peak_source = std::string("measured by lattice bench (GEMM ") + (bf16 ? "bf16" : "fp32") + " rate, " +
                                 std::to_string(bench.threads_per_rank) + " thread(s) a rank, " + path + ")";
    // The clock its FMA loop ran at holds whatever the threads: the theoretical peak takes it where faster.
    train.measured_clock_ghz = bench.compute.fma_clock_ghz;
    train.measured_clock_source = "the clock lattice bench's FMA loop ran at (" + path + ")";
  } catch (const std::exception&) {
  }
}

// --pipeline-layers auto: the planner's partition of this run's layers (analysis/partition.hpp),
// from the time model at `hardware` and the per-category memory prediction within `limit` bytes a
// rank (0: this machine's memory shared by its ranks). Every rank computes the same counts from the
// same flags; world rank 0 prints them.
void partition_automatically(LayoutConfig& layout, const ModelConfig& model, const TrainConfig& train, int world,
                             int local_ranks, const std::string& hardware, int64_t limit, bool print) {
  plan::PlanRequest r = run_request(model, layout, train, world);
  const double cap = limit == 0 ? physical_memory_bytes() / std::max(1, local_ranks) : double(limit);
  r.gpu_memory = int64_t(cap);
  require(r.micro_batch >= 1 && r.global_batch % (r.micro_batch * r.layout.dp) == 0,
          "--pipeline-layers auto needs --global-batch a multiple of --micro-batch × data-parallel size");
  model.validate();
  const plan::Hardware& hw = plan::hardware_preset(hardware);
  const analysis::Partition chosen = plan::auto_partition(r, hw, cap);
  layout.stage_layers = chosen.counts;
  if (print)
    std::fprintf(stderr,
                 "lattice train: pipeline layers (auto): %s — slowest stage %.4g s a micro-batch at %s (%s), peak "
                 "%s of %s a rank\n",
                 layer_counts_text(chosen.counts).c_str(), chosen.slowest_seconds, hardware.c_str(),
                 plan::stage_seconds(r, hw).measured ? "measured layer costs" : "the time model's layer costs",
                 human_bytes(chosen.peak_bytes).c_str(), human_bytes(cap).c_str());
}

// --recompute auto: each stage's plan with the least recompute FLOPs whose predicted accounted peak a
// rank fits --memory-budget (plan/recompute_auto.hpp). Every rank computes it from the same flags;
// world rank 0 prints it.
void choose_recompute_automatically(LayoutConfig& layout, const ModelConfig& model, const TrainConfig& train,
                                    int world, int64_t budget, bool print) {
  model.validate();
  const plan::AutoRecompute chosen = plan::choose_recompute_plan(run_request(model, layout, train, world), budget);
  layout.recompute_plan = chosen.plan;
  layout.recompute = plan::strongest_mode(chosen.plan);
  if (print)
    std::fprintf(stderr,
                 "lattice train: recompute (auto, %.1f MiB a rank): %s — peak %.1f MiB predicted, recompute "
                 "%.4g GFLOP a step (+%.1f%% of the model's)\n",
                 double(budget) / double(1 << 20), plan::describe_recompute_plan(chosen, layout.pp).c_str(),
                 chosen.peak / double(1 << 20), chosen.recompute_flops / 1e9,
                 chosen.model_flops > 0 ? 100.0 * chosen.recompute_flops / chosen.model_flops : 0.0);
}

// The planner's bytes by category for each stage (and the checkpoint writer, world rank 0), for the
// run report to set beside what the tracking allocator measures. Null where the per-category model
// does not cover the run (MoE) or cannot plan it; the run itself does not depend on it.
nlohmann::json predicted_memory(const ModelConfig& model, const LayoutConfig& layout, const TrainConfig& train,
                                int world) {
  if (model.moe.enabled()) return nullptr;  // the per-category model does not cover MoE layers yet
  try {
    analysis::MemoryCase c = plan::memory_case(run_request(model, layout, train, world));
    nlohmann::json stages = nlohmann::json::array();
    for (int stage = 0; stage < layout.pp; ++stage)
      for (bool writer : {false, true}) {
        if (writer && (stage != 0 || train.save.empty())) continue;
        c.writer = writer;
        stages.push_back({{"stage", stage}, {"writer", writer},
                          {"bytes", plan::category_bytes_json(analysis::rank_memory(c, stage))}});
      }
    return stages;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// The checkpoint a run reads at its start: --resume's, else --init's.
const std::string& read_checkpoint(const TrainConfig& train) { return train.resume.empty() ? train.init : train.resume; }

// A checkpoint read again (one that could not be pinned and was replaced while it was read:
// checkpoint::CheckpointReplaced, or ranks that each pinned another save) is read as soon as the next
// save lands (its directory changes), so that the read has a whole interval between two saves before
// it, not what was left of one (a run saving every step overtook five unpinned reads in a row on a
// loaded machine); at most 250 ms × the attempt, after which the saves have stopped or are slower.
void wait_for_next_save(const TrainConfig& train, int attempt) {
  const std::string& dir = read_checkpoint(train);
  const checkpoint::DirectoryIdentity seen = checkpoint::directory_identity(dir);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(250 * attempt);
  while (std::chrono::steady_clock::now() < until && checkpoint::directory_identity(dir) == seen)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}
void say_reading_again(const TrainConfig& train, int attempt) {
  std::fprintf(stderr, "lattice train: note: checkpoint %s was replaced by a save while it was read: reading it again\n",
               read_checkpoint(train).c_str());
  wait_for_next_save(train, attempt);
}

}  // namespace

int run_train(int argc, char** argv) {
  CLI::App app("Train a GPT-2 style model (Megatron-LM flag names are accepted as aliases).", "lattice train");
  ModelConfig model;
  LayoutFlags layout;
  TrainConfig train;
  std::string shuffle = "on";
  add_model_flags(app, model);
  add_layout_flags(app, layout);
  add_train_flags(app, train, shuffle);
  std::string device = "cpu";
  add_device_flag(app, device);
  bool profile_ops = false;
  app.add_flag("--profile-ops", profile_ops,
               "time every kernel and GEMM call (each between two device synchronisations) and print where the "
               "time went, by operation (docs/performance.md)");
  std::string hardware = "cpu", memory_limit;
  int64_t memory_limit_bytes = 0;  // --pipeline-memory-limit read (0: not given)
  app.add_option("--hardware", hardware,
                 "--pipeline-layers auto: the machine its time model plans for (a preset, or a lattice bench "
                 "--json file)")
      ->capture_default_str();
  app.add_option("--pipeline-memory-limit", memory_limit,
                 "--pipeline-layers auto: bytes a rank may hold (default: this machine's memory over its ranks)");
  std::string config_path;
  add_config_file(app, config_path);
  bool dump = false;
  app.add_flag("--dump-config", dump, "print every setting as a TOML file for --config, and exit");
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  const bool first_rank = !comm::started_by_launcher() || comm::launcher_rank() == 0;
  // Every read of --resume's (or --init's) checkpoint from here to the trainer's is of one version,
  // whatever a run saving into it swaps in meanwhile: it is pinned now (core/pinned_path.hpp; the
  // trainer's own pin shares it) and let go once a trainer was built from it.
  test_pause_checkpoint_read("before");
  std::optional<PinnedPath> pinned_checkpoint(std::in_place, read_checkpoint(train));
  if (dump) {
    // A resume's dump shows the settings the run takes from its checkpoint, not the flags' defaults.
    std::map<std::string, std::string> taken;
    const bool no_tokenizer = !data::has_tokenizer(train.data_dir);
    require(train.init.empty() || train.resume.empty(),
            "--init and --resume both given: --resume continues a run (weights, optimizer, step), --init only starts "
            "from weights; pass one");
    std::vector<std::pair<std::string, nlohmann::json>> values;
    if (!train.resume.empty()) {
      // A dump shows what the resume takes: from nothing, it would show the defaults as the run's.
      std::error_code ec;
      require(std::filesystem::exists(pinned_path(train.resume), ec) || ec,
              "checkpoint " + train.resume + why_absent(train.resume) + ": nothing to dump from");
      require(checkpoint::holds_trainer_state(train.resume),
              "--resume " + train.resume + " holds no trainer.json (not a lattice checkpoint): nothing to dump from");
      values = recorded_settings_by_flag(train, take_resumed_settings(app, train));
      for (auto& flag_value : take_resumed_precision(app, layout, train.resume)) values.push_back(std::move(flag_value));
      for (auto& flag_value : take_checkpoint_model(app, model, train.resume, CheckpointModel::resume, no_tokenizer))
        values.push_back(std::move(flag_value));
    } else if (!train.init.empty()) {
      std::error_code ec;
      require(std::filesystem::exists(pinned_path(train.init), ec) || ec,
              "checkpoint " + train.init + why_absent(train.init) + ": nothing to dump from");
      values = take_checkpoint_model(app, model, train.init, CheckpointModel::init, no_tokenizer);
    }
    for (const auto& [flag, value] : values)
      taken[flag] = value.is_string() ? "\"" + value.get<std::string>() + "\"" : value.dump();
    const std::string from = train.resume.empty() ? "from --init " + train.init : "from checkpoint " + train.resume;
    if (first_rank) std::fputs(dump_config(app, {"vocab"}, taken, from).c_str(), stdout);
    return 0;
  }
  train.other_inputs = {{"--config", config_path}};
  if (app.count("--hardware") > 0) train.other_inputs.push_back({"--hardware", hardware});
  train.settings = given_flags(app);  // printed once training starts (bad input stays one line)
  train.shuffle = shuffle == "on";
  train.seed_given = app.count("--seed") > 0;
  train.zero_prefetch_given = app.count("--zero-prefetch") > 0;
  LayoutConfig resolved;
  try {
    take_resumed_settings(app, train);  // before anything is planned from the batch or the model
    // A value taken from a checkpoint, named on the start line as the flag that would have given it.
    const auto name_taken = [](std::string& line, const std::string& flag, const nlohmann::json& value) {
      line += std::string(line.empty() ? "" : " ") + "--" + flag + " " +
              (value.is_string() ? value.get<std::string>() : value.dump());
    };
    for (const auto& [flag, value] : take_resumed_precision(app, layout, train.resume))
      if (value != "fp32") name_taken(train.resumed_settings, flag, value);  // where the default would differ
    // The model values taken that differ from a fresh run's, named on the start line as the settings
    // are. Token files without a tokenizer (llm.c's) do not say the vocabulary: the checkpoint's is taken.
    // --init takes the shape its weights fix (both given is refused by the trainer).
    const bool resuming = !train.resume.empty(), no_tokenizer = !data::has_tokenizer(train.data_dir);
    const std::string& model_source = resuming ? train.resume : train.init;
    bool vocab_taken = false;
    for (const auto& [flag, value] :
         take_checkpoint_model(app, model, model_source, resuming ? CheckpointModel::resume : CheckpointModel::init,
                               no_tokenizer, resuming)) {
      vocab_taken = vocab_taken || flag == "vocab";
      name_taken(resuming ? train.resumed_settings : train.init_shape, flag, value);
    }
    require(layout.pipeline_layers == "auto" || (app.count("--hardware") == 0 && memory_limit.empty()),
            "--hardware and --pipeline-memory-limit apply to --pipeline-layers auto only");
    require(layout.memory_budget.empty() || layout.recompute == "auto", "--memory-budget applies to --recompute auto only");
    // Read here, before any communicator: under mpirun the partition runs where one rank's refusal
    // stops all with exit 1, and a size that does not parse is a usage error (exit 2).
    if (!memory_limit.empty()) memory_limit_bytes = plan::parse_bytes(memory_limit, "--pipeline-memory-limit");
    layout.context_parallel_runs = true;
    resolved = layout.resolve(model.layers);
    // Before the planner is asked (--pipeline-layers auto, --recompute auto): a layout CP cannot run
    // is named as the trainer names it, not as whatever the planner meets first.
    const std::string cp_problem = context_parallel_problem(model, resolved);
    require(cp_problem.empty(), cp_problem);
    select_device(parse_device(device));  // once, before any model exists
    if (profile_ops) enable_op_profile();
    require_device_runs(parse_device(device), model, resolved, train);
    // The vocabulary is the data's tokenizer's unless given (the trainer checks a given one).
    if (app.count("--vocab") == 0 && !vocab_taken) model.vocab = data::load_tokenizer(train.data_dir).vocab();
  } catch (const InputError& e) {
    // Every rank parses the same flags before any communicator exists: rank 0 reports.
    if (comm::started_by_launcher() && comm::launcher_rank() != 0) return report_after_rank0("train", e.what(), exit_status_of(e));
    throw;
  }
  if (!comm::started_by_launcher() && resolved.tp == 1 && resolved.pp == 1 && resolved.ep == 1 &&
      resolved.cp == 1) {
    if (layout.partition_auto) partition_automatically(resolved, model, train, 1, 1, hardware, memory_limit_bytes, false);
    if (layout.recompute_auto)
      choose_recompute_automatically(resolved, model, train, 1, layout.memory_budget_bytes, true);
    if (train.json || !train.report_dir.empty()) train.predicted_memory = predicted_memory(model, resolved, train, 1);
    peak_inputs(train, resolved.activation_dtype, 1);
    // A checkpoint another run replaces while it is read (--save-every 1) is pinned above; one that
    // could not be pinned is read again, whole, a few times at most, as eval and sample do.
    std::unique_ptr<Trainer> trainer;
    for (int attempt = 1; !trainer; ++attempt) {
      try {
        trainer = std::make_unique<Trainer>(model, resolved, train);
      } catch (const checkpoint::CheckpointReplaced&) {  // a checkpoint that could not be pinned
        if (attempt == checkpoint::kCheckpointReadAttempts) throw;
        pinned_checkpoint.reset();
        say_reading_again(train, attempt);
      }
    }
    pinned_checkpoint.reset();  // the trainer holds what it read; its own saves may replace the files
    return trainer->run();
  }
  // Several processes: bad input is reported once, by rank 0, and every rank exits 1; a rank that
  // fails later aborts the whole job.
  // A bad --comm-timeout is reported by the validation below, once; the watchdog runs meanwhile.
  // A lost peer (a stall, a dead rank or link) ends this rank with exit 3 and, under --json, a
  // {"event":"rank_lost"} line (comm/watchdog.hpp): `lattice launch` restarts on that alone.
  comm::report_rank_lost_as_json(train.json);
  comm::Distributed dist(resolved.tp, resolved.pp, "train",
                         valid_comm_timeout(train.comm_timeout) ? train.comm_timeout : comm::kDefaultCommTimeout,
                         resolved.ep, resolved.cp);
  std::unique_ptr<Trainer> trainer;
  // A resume on more data-parallel ranks: the micro-batch taken from the checkpoint split to fit them
  // (before the planning below sizes anything by it).
  comm::check_on_all_ranks("train", [&] { fit_resumed_micro_batch(train, dist.layout().dp, model); });
  // The token files too: ranks reading other data under the same --data path (per-host copies that
  // differ) would train replicas on different datasets without a word.
  const std::string settings = app.config_to_str(/*default_also=*/true, /*write_description=*/false) +
                               "token files = " + data::token_files_fingerprint(train.data_dir) + "\n" +
                               "resumed settings = " + training_settings_json(train).dump() + "\n";
  // Before anything sized by the configuration: ranks that disagree would fail or hang elsewhere.
  comm::check_on_all_ranks("train", [&] { comm::require_same_configuration(settings); });
  if (layout.partition_auto) {
    // Every rank partitions (a rank that cannot stops them all here, before any other collective),
    // then the counts are compared: ranks on hosts of unlike memory could choose differently.
    const int host_ranks = dist.ranks_on_this_host();
    comm::check_on_all_ranks("train", [&] {
      partition_automatically(resolved, model, train, dist.world_size(), host_ranks, hardware, memory_limit_bytes,
                              dist.rank() == 0);
    });
    comm::check_on_all_ranks("train",
                             [&] { comm::require_same_configuration(layer_counts_text(resolved.stage_layers)); });
  }
  if (layout.recompute_auto) {
    // As for the partition: every rank chooses (one that cannot stops them all), then the plans are
    // compared.
    comm::check_on_all_ranks("train", [&] {
      choose_recompute_automatically(resolved, model, train, dist.world_size(), layout.memory_budget_bytes,
                                     dist.rank() == 0);
    });
    comm::check_on_all_ranks("train",
                             [&] { comm::require_same_configuration(recompute_plan_text(resolved.recompute_plan)); });
  }
  if ((train.json || !train.report_dir.empty()) && dist.rank() == 0)
    train.predicted_memory = predicted_memory(model, resolved, train, dist.world_size());
  // Every rank asks (the same flags on every rank: the host count is collective).
  peak_inputs(train, resolved.activation_dtype, train.peak_flops > 0 ? 1 : dist.ranks_on_this_host());
  // Each rank reads --resume on its own, pinned: a run saving into that directory may swap in a new
  // save between two ranks' pins (their saves differ), or during a read it could not pin (the rank
  // says so: CheckpointReplaced). Then every rank reads it again, a few times at most.
  for (int attempt = 1;; ++attempt) {
    bool replaced = false;
    comm::check_on_all_ranks("train", [&] {
      try {
        trainer = std::make_unique<Trainer>(model, resolved, train, &dist);
      } catch (const checkpoint::CheckpointReplaced&) {
        if (attempt == checkpoint::kCheckpointReadAttempts) throw;
        replaced = true;
      }
    });
    // A read again pins the checkpoint anew (the trainer's own pin): the save it reads then may be
    // another rank's. The settings above came from the first read, the same in every save of a run.
    pinned_checkpoint.reset();
    // Any rank's read replaced makes the texts differ (each names its rank), so all ranks agree on this.
    const bool agree =
        comm::all_ranks_agree(replaced ? "replaced on rank " + std::to_string(dist.rank()) : trainer->resumed_version());
    if (agree && !replaced) break;
    comm::check_on_all_ranks("train", [&] {
      require(attempt < checkpoint::kCheckpointReadAttempts,
              "the ranks read different saves of checkpoint " + read_checkpoint(train) + " " + std::to_string(attempt) +
                  " times (a run saves into it, or the hosts' copies differ)");
    });
    if (dist.rank() == 0) say_reading_again(train, attempt);
    else wait_for_next_save(train, attempt);
    trainer.reset();  // its --save lock and memory go before the next read
  }
  return comm::run_or_abort_all("train", [&] { return trainer->run(); });
}

}  // namespace lattice::cli
