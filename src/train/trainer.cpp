// Trainer (trainer.hpp): setup from the configuration (data and tokenizer, resume, model, states,
// pipeline), the step and its updates, evaluation and the run loop. Past 400 lines because the
// setup's checks and the step read best in one place; checkpoints and the summary live in
// trainer_checkpoint.cpp and trainer_summary.cpp.
#include "train/trainer.hpp"

#include "backend/op_profile.hpp"
#include "tensor/device_memory.hpp"

#include <algorithm>
#include <omp.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "analysis/formulas.hpp"
#include "checkpoint/checkpoint.hpp"
#include "comm/distributed.hpp"
#include "comm/gather_int64.hpp"
#include "core/atomic_dir.hpp"
#include "core/env_switch.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/machine_peak.hpp"
#include "core/output_path.hpp"
#include "core/pinned_path.hpp"
#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"
#include "report/step_report.hpp"
#include "report/trace_writer.hpp"
#include "train/resume_settings.hpp"

namespace lattice {

namespace {

// "5.32T": a peak in the step line's few characters.
std::string compact_flops(double flops) {
  const char* units[] = {"", "k", "M", "G", "T", "P", "E"};
  int u = 0;
  while (flops >= 1000 && u < 6) flops /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%s", flops, units[u]);
  return buf;
}
std::string nonfinite(double loss) { return std::isnan(loss) ? "NaN" : "infinite"; }

}  // namespace

std::string Trainer::MfuPeak::short_text() const {
  if (world == 1) return compact_flops(rank.flops) + " " + rank.tag;
  if (ranks_alike) return std::to_string(world) + "×" + compact_flops(rank.flops) + " " + rank.tag;
  return compact_flops(total) + " over " + std::to_string(world) + " ranks";
}

std::string Trainer::MfuPeak::long_text() const {
  if (!(total > 0))
    return "MFU n/a (no peak: pass --peak-flops or run lattice bench)" +
           (rank.why_unknown.empty() ? std::string() : ": " + rank.why_unknown);
  std::string s = flops_text(rank.flops) + " a rank, " + rank.source;
  if (world > 1)
    s += "; MFU over the sum of the " + std::to_string(world) + " ranks' peaks, " + flops_text(total) +
         (ranks_alike ? "" : " (the ranks' peaks differ: the logging rank's shown)");
  return s;
}

// Given, else the theoretical peak of the cores this rank's threads run on (at the clock a saved
// `lattice bench`'s FMA loop ran at, where faster than cpuinfo's), else what that bench measured (the
// cli read it); the sum over the ranks, every rank's counted.
Trainer::MfuPeak Trainer::mfu_peak(int world) const {
  MfuPeak p;
  p.world = world;
  if (config_.peak_flops > 0) {
    p.rank = given_peak(config_.peak_flops);
  } else {
    const int threads = omp_get_max_threads();
    MachineTexts machine = read_machine_texts();
    machine.measured_ghz = config_.measured_clock_ghz, machine.measured_clock_source = config_.measured_clock_source;
    p.rank = theoretical_peak(machine, layout_.activation_dtype, threads, config_.gemm_isa);
    // A saved bench's GEMM rate stands in where the theoretical peak is unknown, and replaces it where,
    // with as many threads, it ran faster: the clock that peak assumed is too low (a guest's cpuinfo
    // "cpu MHz" under turbo), and an MFU against it could pass 100%.
    const double measured = config_.measured_peak_flops;
    if (measured > 0 && !(p.rank.flops > 0)) {
      p.rank.flops = measured, p.rank.tag = "bench";
      p.rank.source = config_.measured_peak_source + ": a measured rate, not the theoretical peak";
    } else if (measured > p.rank.flops && config_.measured_peak_threads == threads) {
      p.rank.source = config_.measured_peak_source + ", above the theoretical " + flops_text(p.rank.flops) +
                      ": the clock that peak assumed is below the one the cores ran at";
      p.rank.flops = measured, p.rank.tag = "bench";
    }
  }
  const int64_t mine = std::llround(std::max(0.0, p.rank.flops));  // whole FLOP/s travel between ranks
  if (mine > 0) p.rank.flops = double(mine);
  std::vector<int64_t> peaks{mine};
  if (dist_) {
    peaks.clear();
    for (const auto& r : comm::all_gather_int64(dist_->world(), {mine})) peaks.push_back(r.at(0));
  }
  p.total = 0;
  for (int64_t v : peaks) {
    if (v <= 0) return p.total = 0, p;  // a rank with no peak: no MFU
    p.total += double(v);
    p.ranks_alike = p.ranks_alike && v == mine;
  }
  return p;
}

void test_pause_checkpoint_read(const char* where) {
  static bool paused = false;
  const std::string text = env_value("LATTICE_TEST_PAUSE_RESUME_READ");
  const size_t a = text.find(':'), b = text.find(':', a == std::string::npos ? 0 : a + 1);
  if (paused || b == std::string::npos || text.substr(b + 1) != where ||
      std::atoi(text.substr(0, a).c_str()) != comm::launcher_rank())
    return;
  paused = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(text.substr(a + 1, b - a - 1).c_str())));
}

Trainer::Trainer(const ModelConfig& model, const LayoutConfig& layout, const TrainConfig& train,
                 comm::Distributed* dist)
    : model_config_(model), layout_(layout), config_(train), dist_(dist), spike_guard_(model.vocab) {
  if (dist_) {
    require(dist_->layout().tp == layout_.tp && dist_->layout().pp == layout_.pp && dist_->layout().cp == layout_.cp,
            "the process groups disagree with the layout flags");
    layout_.dp = dist_->layout().dp;
  } else {
    require(layout_.tp == 1 && layout_.pp == 1 && layout_.cp == 1,
            "--tensor-model-parallel-size/--pipeline-model-parallel-size/--context-parallel-size above 1 need "
            "several processes: start with mpirun -np N");
  }
  // A resume continues the run's settings (train/resume_settings.hpp): taken before the defaults
  // below are resolved and the whole is validated.
  checkpoint::ResumeState resume_state;
  // A run saving into --resume's directory (another run's, not under this one's --save lock) may swap
  // in a new save while it is read: the directory is pinned (core/pinned_path.hpp; the cli pins it
  // before its own reads, and this pin then shares that version), so every file below is one save's,
  // or the step of one save would go on with the weights of the next. Unpinned, the directory it was
  // at the start must be the one read to the end.
  const PinnedPath pinned_checkpoint(!config_.resume.empty() ? config_.resume : config_.init);
  const auto resume_identity = checkpoint::directory_identity(config_.resume);
  if (!config_.resume.empty()) {
    resume_state = checkpoint::read_resume_state(config_.resume);
    resumed_version_ = checkpoint::saved_version(config_.resume);
    test_pause_checkpoint_read("during");
    if (!config_.settings_resumed)  // the cli took them before planning; a caller of its own, here
      config_.resumed_settings = resume_training_settings(config_, resume_state.train_settings, config_.resume);
    const bool shuffle_given = std::ranges::find(config_.given_settings, "shuffle") != config_.given_settings.end();
    if (!shuffle_given && resume_state.shuffle >= 0) config_.shuffle = resume_state.shuffle == 1;
  }
  fit_resumed_micro_batch(config_, layout_.dp, model_config_);
  if (config_.decay_steps == 0) config_.decay_steps = config_.steps;
  if (config_.global_batch == 0) config_.global_batch = config_.micro_batch * layout_.dp;
  validate_training(model_config_, layout_, config_);
  if (config_.threads > 0) omp_set_num_threads(config_.threads);

  const std::string train_path = config_.data_dir + "/train.bin", val_path = config_.data_dir + "/val.bin";
  require(!config_.data_dir.empty(), "--data DIR is required (make one with: lattice prepare --input TEXT --out DIR)");
  // A file named as the directory (--data data/train.bin, or data/train.bin/): said so, not "no
  // data/train.bin/train.bin".
  require(!names_a_non_directory(config_.data_dir),
          "--data " + config_.data_dir + " is not a directory (lattice prepare --out DIR makes one, of train.bin and val.bin)");
  require(std::filesystem::exists(train_path), "no " + train_path + " (make it with: lattice prepare --input TEXT --out " +
                                                   config_.data_dir + ")");
  // The data's tokenizer: a SentencePiece model's vocabulary is the model's (byte tokens may be given
  // any, the token files' check below holding them to it), and a resumed checkpoint must have been
  // trained with it.
  tokenizer_ = data::tokens_tokenizer(config_.data_dir, model_config_.vocab);
  data_sizes_ = data::read_data_sizes(config_.data_dir);
  // The vocabulary is the recorded tokenizer's: lattice pads it for the GEMMs itself, so a larger
  // --vocab only adds embedding rows no token reaches. Token files that record no tokenizer (llm.c's)
  // may be given any, the token files' check below holding them to it.
  require(model_config_.vocab == tokenizer_.vocab() || !data::has_tokenizer(config_.data_dir),
          "--vocab " + std::to_string(model_config_.vocab) + " does not match the " + data::to_string(tokenizer_.kind()) +
              " tokenizer of " + config_.data_dir + " (vocab " + std::to_string(tokenizer_.vocab()) +
              "; lattice pads it to a multiple of 128 itself): leave --vocab out to take the data's");
  // A checkpoint's embeddings are its tokenizer's (a directory recording none: bytes).
  auto require_trained_on_these_tokens = [&](const std::string& dir, const std::string& remedy) {
    const data::Tokenizer of_checkpoint =
        data::load_recorded_tokenizer(dir, checkpoint::read_tokenizer_fingerprint(dir), "checkpoint " + dir);
    require(data::same_tokens(of_checkpoint, tokenizer_), "checkpoint " + dir + " was trained with tokenizer " +
                                                             of_checkpoint.fingerprint() + ", but " + config_.data_dir +
                                                             " holds " + tokenizer_.fingerprint() + remedy);
  };
  std::error_code init_ec;  // a path that cannot be looked up is left to the weights' reader, which names it
  if (!config_.init.empty() && std::filesystem::is_directory(pinned_path(config_.init), init_ec))
    require_trained_on_these_tokens(config_.init, " (prepare the data with --tokenizer-from " + config_.init + ")");
  if (!config_.resume.empty()) {
    require_trained_on_these_tokens(config_.resume, ": a run continues on its own tokens");
    const bool vocab_given =
        std::find(config_.given_settings.begin(), config_.given_settings.end(), "vocab") != config_.given_settings.end();
    const std::string other_model = resumed_model_difference(resume_state.model, model_config_, config_.resume, vocab_given);
    require(other_model.empty(), other_model);
    // Data order and dropout masks are functions of the seed: a resume continues with the run's own.
    require(!config_.seed_given || config_.seed == resume_state.seed,
            "--seed " + std::to_string(config_.seed) + " differs from the seed of checkpoint " + config_.resume + " (" +
                std::to_string(resume_state.seed) + "): a resume continues the run's own data order and dropout");
    config_.seed = resume_state.seed;
    // The batch at a step is a function of (seed, step, global row): another batch size (refused with
    // the settings above) or order would silently repeat and skip data.
    require(resume_state.shuffle < 0 || resume_state.shuffle == (config_.shuffle ? 1 : 0),
            std::string("--shuffle ") + (config_.shuffle ? "on" : "off") + " differs from checkpoint " + config_.resume +
                "'s: a resume continues the run's data order");
    require(config_.steps >= resume_state.step,
            "--steps " + std::to_string(config_.steps) + " is below the step of checkpoint " + config_.resume + " (" +
                std::to_string(resume_state.step) + "): nothing to train (raise --steps)");
    // PipeDream-2BW's next batch reads the older of its two versions: another schedule would drop it.
    require(resume_state.weight_versions == 1 || parallel::pipeline::parse_schedule_kind(config_.schedule) ==
                                                     parallel::pipeline::ScheduleKind::pipedream_2bw,
            "checkpoint " + config_.resume + " holds PipeDream-2BW's two weight versions: resume it with --schedule "
            "pipedream-2bw (--schedule " + config_.schedule + " would drop the version its next batch reads)");
    spike_guard_ = LossSpikeGuard(model_config_.vocab, resume_state.recent_losses);
    // A save over the resumed checkpoint keeps it until a sound one replaces it.
    std::error_code ec;
    if (!config_.save.empty() && std::filesystem::weakly_canonical(config_.save, ec) ==
                                     std::filesystem::weakly_canonical(config_.resume, ec))
      saved_step_ = resume_state.step;
  }
  {  // 64 random bits (only the rank that writes records and traces uses them)
    std::random_device entropy;
    char id[17];
    std::snprintf(id, sizeof id, "%08x%08x", unsigned(entropy()), unsigned(entropy()));
    start_id_ = id;
  }
  // Destinations are checked before hours of training, not after (world rank 0 writes them), under
  // the one output rule (core/output_path.hpp); the checkpoint directory is locked for the run's life.
  std::string save_holds;  // the checkpoint --save holds already ("" none), for the refusal and the room check
  if (is_logging_rank()) {
    output_rules_ = {config_.overwrite, {{"--data", config_.data_dir}, {"--resume", config_.resume}, {"--init", config_.init}},
                     {{"--save", config_.save}}};
    output_rules_.inputs.insert(output_rules_.inputs.end(), config_.other_inputs.begin(), config_.other_inputs.end());
    output_rules_.own_report_dir = config_.report_dir;  // its trace may go beside its run.jsonl
    if (!config_.save.empty()) {
      OutputRules save_rules = output_rules_;  // --save may name the --resume directory: replaced atomically
      save_rules.closed.clear();
      std::erase_if(save_rules.inputs, [&](const NamedPath& in) {
        return in.flag == "--resume" && path_within(config_.save, in.path) && path_within(in.path, config_.save);
      });
      checkpoint::check_save_target(config_.save, save_rules);
      save_lock_ = DirLock(config_.save, "--save");
    }
    if (!config_.trace.empty()) check_output_path(config_.trace, OutputKind::trace, "--trace", trace_rules());
    if (!config_.report_dir.empty())
      check_report_dir(config_.report_dir, config_.save, config_.trace,
                       !config_.resume.empty() || config_.continue_report, output_rules_,
                       config_.continue_report && config_.resume.empty());
    // The offload directory holds only the run's own unlinked states files, but it is made if missing:
    // never inside an input or inside a directory another output owns (a checkpoint replaced whole
    // would refuse to be saved over it, after the whole run).
    if (const std::string& off = config_.optim.offload_dir; !off.empty()) {
      for (const NamedPath& in : output_rules_.inputs)
        require(in.path.empty() || !path_within(off, in.path),
                "--offload-optimizer " + off + " is inside " + in.flag + " " + in.path + ", an input of this run");
      for (const NamedPath& owner : std::vector<NamedPath>{{"--save", config_.save}, {"--report-dir", config_.report_dir}})
        require(owner.path.empty() || !path_within(off, owner.path),
                "--offload-optimizer " + off + " is inside " + owner.flag + " " + owner.path +
                    ", which holds that output alone");
    }
    // Another run's checkpoint is not replaced unasked (as --report-dir's log is not): a mistyped
    // --save would lose that run's training. Its own (--resume the same directory) is continued.
    // After the rules above, which name a wrong path more precisely.
    const bool continues_it = !config_.resume.empty() && path_within(config_.save, config_.resume) &&
                              path_within(config_.resume, config_.save);
    if (!config_.save.empty()) save_holds = checkpoint::held_checkpoint(config_.save);
    if (!save_holds.empty() && !continues_it && !config_.overwrite)
      fail("--save " + config_.save + " holds " + save_holds + ": continue it with --resume " + config_.save +
           ", name a new directory, or pass --overwrite to replace it");
  }
  const auto train_file = data::TokenFile::load(train_path, model_config_.vocab);
  // Bits per byte need each file's text bytes: a SentencePiece directory must say them, for these files.
  require(data_sizes_.recorded || tokenizer_.kind() == data::TokenizerKind::bytes ||
              tokenizer_.kind() == data::TokenizerKind::none,
          config_.data_dir + " has a " + data::to_string(tokenizer_.kind()) + " tokenizer but no " + data::kDataJson +
              " (prepare it again with lattice prepare)");
  require(!data_sizes_.recorded || data_sizes_.train.tokens == int64_t(train_file.size()),
          config_.data_dir + "/" + data::kDataJson + " records " + std::to_string(data_sizes_.train.tokens) +
              " tokens for train.bin, which holds " + std::to_string(train_file.size()) + " (prepare it again)");
  train_loader_ = std::make_unique<data::BatchLoader>(train_file, model_config_.seq_len, config_.global_batch,
                                                      config_.seed, config_.shuffle);
  // Fewer sequences than one global batch: every batch holds some of them more than once (as eval
  // refuses such a file, a run is told; small corpora train so on purpose).
  if (train_loader_->windows() < config_.global_batch && is_logging_rank())
    std::fprintf(stderr, "lattice train: note: %s holds %lld sequence(s) of %d tokens, fewer than one global batch "
                 "of %lld: each batch repeats them\n", train_path.c_str(), (long long)train_loader_->windows(),
                 model_config_.seq_len, (long long)config_.global_batch);
  // A resume on another train.bin is a run of its own from here (a curriculum, or a mistake): said,
  // not refused. The checkpoint records its file by size and edges (data::token_file_fingerprint).
  train_bin_fingerprint_ = data::token_file_fingerprint(train_path);
  if (!resume_state.train_bin.empty() && resume_state.train_bin != train_bin_fingerprint_ && is_logging_rank())
    std::fprintf(stderr, "lattice train: note: %s is not the train.bin checkpoint %s was trained on (its size or first "
                 "and last 64 KiB differ: %s then, %s now): from step %lld the batches are this file's, not the run's\n",
                 train_path.c_str(), config_.resume.c_str(), resume_state.train_bin.c_str(),
                 train_bin_fingerprint_.c_str(), (long long)resume_state.step + 1);
  if (std::filesystem::exists(val_path)) {
    const auto val_file = data::TokenFile::load(val_path, model_config_.vocab);
    if (val_file.size() > size_t(model_config_.seq_len))
      val_loader_ = std::make_unique<data::BatchLoader>(val_file, model_config_.seq_len, config_.micro_batch,
                                                        config_.seed, false);
  }
  if (config_.eval_every > 0 && !val_loader_ && is_logging_rank())
    std::fprintf(stderr, "lattice train: note: %s is missing or shorter than one sequence: --eval-every evaluates "
                 "on train.bin\n", val_path.c_str());
  // An evaluation reads val.bin from its start; past its end it would wrap and count tokens twice.
  if (config_.eval_every > 0 && val_loader_ &&
      config_.eval_batches * config_.micro_batch > std::max<int64_t>(val_loader_->windows(), config_.micro_batch)) {
    const int64_t held = std::max<int64_t>(val_loader_->windows() / config_.micro_batch, 1);
    if (is_logging_rank())
      std::fprintf(stderr, "lattice train: note: %s holds %lld batch(es) of --micro-batch %d: --eval-every evaluates "
                   "those, not --eval-batches %lld\n", val_path.c_str(), (long long)held, config_.micro_batch,
                   (long long)config_.eval_batches);
    config_.eval_batches = held;
  }

  parallel::TensorParallel tp;
  if (dist_) tp = {&dist_->tp(), layout_.sequence_parallel};
  // A pipeline stage holds its own layers (virtual stages c·p + rank, as the partition gives them),
  // the input embeddings on the first stage, the tied output embedding and final LayerNorm on the last.
  const StagePartition partition = StagePartition::of(layout_, model_config_.layers);
  StageParams stage;
  if (layout_.pp > 1) {
    const int rank = dist_->coords().pp_rank;
    stage.layers.assign(size_t(model_config_.layers), false);
    for (int l : partition.layers_of_rank(rank, layout_.pp)) stage.layers[size_t(l)] = true;
    stage.embedding = rank == 0;
    stage.head = rank == layout_.pp - 1;
  }
  // Expert parallelism: this rank's E/e experts of every MoE layer (docs/design.md §12).
  if (layout_.ep > 1) {
    stage.experts = model_config_.moe.experts / layout_.ep;
    stage.expert0 = dist_->coords().ep_rank * stage.experts;
  }
  // ZeRO-3 never builds the whole model: each rank initialises its own pieces, or reads them from
  // the checkpoint (an llm.c file is read whole: the one exception).
  const std::string weights_path = !config_.resume.empty() ? config_.resume : config_.init;
  // Weights are kept (and ZeRO shards them) over DP × CP: context-parallel ranks hold the same weights.
  const int replicas = layout_.dp * layout_.cp;
  const bool shard_in_place = layout_.zero >= 3 && replicas > 1 && !checkpoint::is_llmc_file(weights_path);
  model_ = std::make_unique<GPT>(model_config_, layout_, config_.seed, tp, stage, !shard_in_place);
  if (layout_.ep > 1) model_->set_expert_parallel(&dist_->ep());
  if (layout_.cp > 1) model_->set_context_parallel(&dist_->cp(), layout_.cp_comm);
  kept_ = std::make_unique<KeptBytesProbe>(model_config_.layers);
  // How weights, gradients and masters are kept: decided once, here, from the layout (and the
  // schedule: PipeDream-2BW keeps two versions).
  const auto schedule = parallel::pipeline::parse_schedule_kind(config_.schedule);
  parallel::StatesLayout states_layout = parallel::states_layout(layout_, model_config_.layers, config_.zero_prefetch);
  if (schedule == parallel::pipeline::ScheduleKind::pipedream_2bw) states_layout.versions = 2;
  states_ = std::make_unique<parallel::ModelStates>(states_layout, model_->buckets(), dist_ ? &dist_->dp_cp() : nullptr,
                                                    dist_ ? &dist_->expert_dp() : nullptr);
  if (layout_.pp > 1)
    pipeline_ = std::make_unique<parallel::pipeline::Executor>(
        *model_, dist_->pp(), schedule, config_.global_batch / (config_.micro_batch * layout_.dp), partition,
        config_.micro_batch, *kept_, states_layout.versions == 2 ? states_.get() : nullptr);
  optimizer_ = make_optimizer(model_->table(), config_.optim, states_->owned(),
                              {dist_ && layout_.tp > 1 ? &dist_->tp() : nullptr, states_->shard_group()});
  if (is_logging_rank() && !config_.save.empty()) check_save_room(resume_state.step, states_layout.versions == 2, !save_holds.empty());
  if (layout_.zero >= 1 && replicas == 1 && (!dist_ || dist_->rank() == 0))
    std::fprintf(stderr, "lattice train: note: --zero %d with data-parallel size 1 shards nothing\n", layout_.zero);
  if (!weights_path.empty() && !shard_in_place) checkpoint::load_weights(weights_path, *model_);
  if (!config_.resume.empty()) {
    checkpoint::load_optimizer(config_.resume, model_->table(), model_config_, *optimizer_);
    step_ = resume_state.step;
  }
  first_step_ = step_ + 1;
  weights_from_ = weights_path;
  // --save-every auto measures the save cost at the run's first save: after its second step (the
  // first warms caches), so the step time beside it is a steady one.
  if (config_.save_every_auto) auto_first_save_ = step_ + 2;
  const bool fp16 = layout_.params_dtype == ParamsDType::fp16;
  if (fp16) loss_scaler_ = {true, config_.initial_loss_scale, config_.loss_scale_window};
  if (!config_.resume.empty()) {
    // Adam's bias correction (and Adafactor's β2) count the updates applied, not the steps: an
    // fp16 run may have skipped some; its loss scale continues where it was.
    loss_scaler_.skipped = step_ - resume_state.updates_applied;
    if (fp16 && resume_state.loss_scale > 0) {
      loss_scaler_.scale = resume_state.loss_scale;
      loss_scaler_.clean_steps = resume_state.clean_steps;
    }
  }
  // The loaded (or initialised) weights, the same on every DP rank, go where the layout keeps them.
  std::unique_ptr<checkpoint::ModelArrayReader> reader;
  parallel::ModelStates::WeightSource fill;
  if (shard_in_place && weights_path.empty()) {
    fill = [&](FlatPiece range, float* out) {
      if (device_memory().host_addressable) return init_params(model_->table(), out, config_.seed, model_config_.vocab, range);
      std::vector<float> host(size_t(range.size()));  // drawn on the host, copied once (as GPT's own init)
      init_params(model_->table(), host.data(), config_.seed, model_config_.vocab, range);
      copy_to_device(out, host.data(), range.size());
    };
  } else if (shard_in_place) {
    reader = std::make_unique<checkpoint::ModelArrayReader>(checkpoint::weights_file(weights_path, model_config_),
                                                            model_->table(), model_config_);
    reader->check_model_file();
    fill = [&](FlatPiece range, float* out) { reader->read("", range, out); };
  }
  if (config_.optim.offload_params) {
    require(states_->zero_stage() == 3, "--offload-params needs ZeRO-3 over more than one data-parallel rank (with "
                                        "one, ZeRO shards nothing and the weights stay whole)");
    states_->keep_weights_in(optimizer_->offloaded());
  }
  states_->keep_weights(*model_, fill);
  // PipeDream-2BW resumes both weight versions: the newest (model.safetensors, kept above) and the one
  // the next batch reads; from a checkpoint without it (another schedule's), both are the model
  // (docs/design.md §6.3).
  const std::string previous = config_.resume + "/" + checkpoint::kPreviousModelFile;
  std::error_code previous_ec;
  if (!config_.resume.empty() && resume_state.weight_versions == 2)
    require(std::filesystem::is_regular_file(pinned_path(previous), previous_ec),
            "checkpoint " + config_.resume + " records two weight versions (PipeDream-2BW) but has no " +
                checkpoint::kPreviousModelFile);
  if (states_->versions() == 2 && !config_.resume.empty() && resume_state.weight_versions == 2) {
    checkpoint::ModelArrayReader previous_reader(previous, model_->table(), model_config_);
    previous_reader.check_model_file();
    states_->keep_previous_weights([&](FlatPiece range, float* out) { previous_reader.read("", range, out); },
                                   uint64_t(step_));
  } else if (states_->versions() == 2 && !config_.resume.empty() && is_logging_rank()) {
    std::fprintf(stderr, "lattice train: note: %s holds one weight version (not a PipeDream-2BW checkpoint): both "
                 "versions start from its model (docs/design.md §6.3)\n", config_.resume.c_str());
  }
  if (!config_.resume.empty()) checkpoint::require_not_replaced(config_.resume, resume_identity);  // read whole
  // A resume filled the offloaded states through their mapping: those pages leave the resident set.
  if (OffloadedStates* file = optimizer_->offloaded()) file->drop_mapped_pages();
  timing_ = std::make_unique<StepTiming>(dist_, !config_.trace.empty(), config_.straggler_threshold);  // turns tracing on
  schedule_ = LrSchedule{config_.lr_schedule, config_.lr, config_.min_lr, config_.warmup, config_.decay_steps};
}

Trainer::~Trainer() = default;

StepResult Trainer::train_step() {
  timing_->begin_step();
  const bool first = !stepped_;  // this process's first step warms caches: not judged
  stepped_ = true;
  StepResult r = run_step();
  r.stragglers = timing_->end_step(r.step - 1, !first || config_.steps == 1);
  return r;
}

StepResult Trainer::run_step() {
  const TraceSpan step_span(Trace::Kind::step, -1, -1, step_);  // the whole step (report/trace_split.hpp)
  timing_->test_slowdown();
  const auto t0 = std::chrono::steady_clock::now();
  MemoryTracker::activations().reset_peak();
  if (dist_) dist_->traffic().reset();
  parallel::conjugate_traffic() = {};

  // Global batch t = step_ runs now; PipeDream-2BW finishes the previous batch in this step and
  // drains only where weights must be whole (docs/design.md §6.3); other schedules drain every step.
  const uint64_t batch = uint64_t(step_);
  const bool drains = drains_after(step_ + 1);
  const auto phase = parallel::pipeline::step_phase(after_drain_, drains);
  last_phase_ = phase;
  StepResult r;
  r.loss = forward_backward(batch, phase);
  r.moe = moe_step_stats(true);
  activation_peak_ = MemoryTracker::activations().peak_bytes();
  r.step = ++step_;
  r.lr = schedule_.at(r.step);
  if (!std::isfinite(r.loss)) {
    drop_unjudged_save();  // weights that give this loss never replace a sound checkpoint
    // The run's first loss comes before any update: not the learning rate's doing.
    const std::string why = r.step != first_step_ ? "lower --lr or check the data"
                            : weights_from_.empty()
                                ? "before any update: check the data"
                                : "before any update: the weights of " + weights_from_ + " give it (check them, and the data)";
    throw TrainingError("loss is " + nonfinite(r.loss) + " at step " + std::to_string(r.step) + ": training stopped (" +
                        why + ")" + saved_note());
  }
  // The saved weights (this step's) gave a finite loss: promoted unless it is an outlier.
  const std::string refused = promote_if_sound(r.loss);
  if (!refused.empty() && is_logging_rank()) std::fprintf(stderr, "lattice train: warning: %s\n", refused.c_str());
  spike_guard_.add(r.loss);

  TraceSpan optimizer_span(Trace::Kind::optimizer, -1, -1, step_ - 1);
  using parallel::pipeline::Phase;
  last_step_updates_ = 0;
  if (phase == Phase::steady || phase == Phase::last) apply_update(batch - 1, r), ++last_step_updates_;  // its tail ran here
  if (drains) apply_update(batch, r), ++last_step_updates_;
  after_drain_ = drains;
  return finish_step(r, t0);
}

bool Trainer::drains_after(int64_t step) const {
  const bool eval = config_.eval_every > 0 && step % config_.eval_every == 0;
  const bool save = save_due(step);
  return states_->versions() == 1 || !pipeline_ || step >= config_.steps || eval || save;
}

void Trainer::apply_update(uint64_t batch, StepResult& r) {
  // Update u is the (u+1)-th: the step reports the last update it applied (or fp16 skipped), its
  // learning rate and gradient norm.
  const auto update = int64_t(batch) + 1;
  r.update_of_step = update, r.lr = schedule_.at(update), r.grad_norm = 0;
  states_->use_version(batch);
  const parallel::OwnedGrads grads = states_->reduce();
  complete_gradients(grads);
  if (!unscale(grads, r)) {
    states_->finish_step(false);
    return;
  }
  const bool last_stage_of_many = pipeline_ && dist_->coords().pp_rank == layout_.pp - 1;
  r.grad_norm = parallel::global_grad_norm(model_->table(), grads, layout_.tp > 1 ? &dist_->tp() : nullptr,
                                           states_->shard_group(), pipeline_ ? &dist_->pp() : nullptr,
                                           !last_stage_of_many, layout_.ep > 1 ? &dist_->ep() : nullptr);
  // AdamW scales the gradient as it reads it and writes the bf16 GEMM weights as it updates the
  // masters (one pass, not three over the parameters).
  const bool fused = optimizer_->fuses_passes();
  const float clip = config_.clip_grad > 0 && r.grad_norm > config_.clip_grad ? float(config_.clip_grad / r.grad_norm)
                                                                               : 1.0f;
  if (clip != 1.0f && !fused) parallel::scale_grads(grads, clip);
  states_->begin_update();
  const std::vector<float*> master = states_->master_pieces();
  const std::vector<uint16_t*> bf16 = fused ? states_->master_bf16_pieces() : std::vector<uint16_t*>{};
  std::vector<PieceData> pieces;
  for (size_t i = 0; i < master.size(); ++i)
    pieces.push_back({master[i], grads.data[i], bf16.empty() ? nullptr : bf16[i], fused ? clip : 1.0f});
  // Adam's bias correction counts the updates applied (fp16 may skip some).
  optimizer_->update(pieces, r.lr, update - loss_scaler_.skipped);
  states_->finish_step(true, !bf16.empty());
}

double Trainer::forward_backward(uint64_t batch, parallel::pipeline::Phase phase) {
  const double tokens = double(config_.global_batch) * model_config_.seq_len;
  states_->use_version(batch);
  states_->begin_step();
  // The loss is the mean over the global batch; fp16 scales it (and every gradient) up so small
  // gradients survive 16 bits (scale 1 otherwise).
  const double loss_sum = run_micro_batches(float(loss_scaler_.scale / tokens), phase);
  return global_loss(loss_sum) / tokens;
}

std::string Trainer::promote_checked_save() {
  const double loss = loss_of_next_batch();
  if (!std::isfinite(loss)) {
    drop_unjudged_save();
    throw TrainingError("the weights of step " + std::to_string(step_) + " give a " + nonfinite(loss) +
                        " loss: not saved" + saved_note());
  }
  return promote_if_sound(loss);
}

double Trainer::loss_of_next_batch() {
  // Run as a step would be, but reported as the last step's: counters restored after. The newest
  // weights are checked: with two versions (PipeDream-2BW, after a drain) batch step_ + 1 is the
  // first to read them, so that batch runs (the step counter keys the data, dropout and version).
  const parallel::ConjugateTraffic step_traffic = parallel::conjugate_traffic();
  const bool tracing = Trace::instance().enabled();
  Trace::instance().set_enabled(false);
  const int64_t step = step_;
  step_ += states_->versions() - 1;
  const double loss = forward_backward(uint64_t(step_), parallel::pipeline::Phase::whole);
  step_ = step;
  states_->reduce();  // completes what the backward started
  moe_step_stats(false);
  states_->finish_step(false);
  Trace::instance().set_enabled(tracing);
  parallel::conjugate_traffic() = step_traffic;
  return loss;
}

std::array<comm::Communicator*, 2> Trainer::stage_and_replica_groups() {
  // The replicas: DP × CP (each CP rank's loss and statistics cover its positions of the DP rank's rows).
  return {pipeline_ ? &dist_->pp() : nullptr, dist_ && layout_.dp * layout_.cp > 1 ? &dist_->dp_cp() : nullptr};
}

void Trainer::sum_over_stages_and_replicas(std::span<float> values) {
  for (comm::Communicator* group : stage_and_replica_groups())
    if (group) group->all_reduce(values);
}

namespace {
// A double summed over a group: each rank's value as an fp32 pair hi + lo, gathered, added in rank order.
double sum_double(comm::Communicator& group, double value) {
  const auto hi = float(value);
  const float mine[2] = {hi, float(value - double(hi))};
  std::vector<float> all(2 * size_t(group.size()));
  group.all_gather(mine, all);
  double sum = 0.0;
  for (size_t r = 0; r < all.size(); r += 2) sum += double(all[r]) + double(all[r + 1]);
  return sum;
}
}  // namespace

double Trainer::global_loss(double loss_sum) {
  // The loss over the whole global batch: the last stage's sums, over the data-parallel replicas.
  // Summed in double: an fp32 sum would round the reported loss to one ulp (~9e-8 relative at 5.5),
  // hiding how closely a layout follows one rank (docs/design.md §10).
  double sum = loss_sum;
  for (comm::Communicator* group : stage_and_replica_groups())
    if (group) sum = sum_double(*group, sum);
  return sum;
}

MoEStepStats Trainer::moe_step_stats(bool count) {
  moe::MoEStats mine = model_->take_moe_stats();
  const MoEConfig& moe = model_config_.moe;
  if (!moe.enabled()) return {};
  // [aux·tokens, offered, dropped, loads by (MoE layer, expert)]; TP ranks route alike, so DP and
  // the stages hold the distinct parts. Counts stay exact in fp32 below 2^24 a step.
  const int E = moe.experts;
  std::vector<int> layers;
  for (int l = 0; l < model_config_.layers; ++l)
    if (moe.is_moe_layer(l)) layers.push_back(l);
  std::vector<float> v(3 + layers.size() * size_t(E), 0.0f);
  v[0] = float(mine.aux_loss_tokens), v[1] = float(mine.offered), v[2] = float(mine.dropped);
  for (size_t i = 0; i < layers.size(); ++i)
    if (size_t(layers[i]) < mine.load.size())
      for (size_t e = 0; e < mine.load[size_t(layers[i])].size(); ++e)
        v[3 + i * size_t(E) + e] = float(mine.load[size_t(layers[i])][e]);
  sum_over_stages_and_replicas(v);
  MoEStepStats r;
  r.active = true;
  r.aux_loss = double(v[0]) / (double(config_.global_batch) * model_config_.seq_len);
  r.dropped_fraction = v[1] > 0 ? double(v[2]) / double(v[1]) : 0.0;
  r.load_min = INT64_MAX, r.load_max = 0;
  if (count) moe_load_.resize(layers.size(), std::vector<int64_t>(size_t(E), 0));
  for (size_t i = 0; i < layers.size() * size_t(E); ++i) {
    const auto n = int64_t(v[3 + i]);
    r.load_min = std::min(r.load_min, n), r.load_max = std::max(r.load_max, n);
    if (count) moe_load_[i / size_t(E)][i % size_t(E)] += n;
  }
  return r;
}

double Trainer::run_micro_batches(float loss_scale, parallel::pipeline::Phase phase) {
  const int64_t s = model_config_.seq_len, b = config_.micro_batch;
  const int L = model_config_.layers;
  // This data-parallel rank's rows of the global batch, in micro-batches of b.
  const int dp_rank = dist_ ? dist_->coords().dp_rank : 0;
  const int64_t rows = config_.global_batch / layout_.dp, row0 = dp_rank * rows;
  if (pipeline_)
    return pipeline_->run(uint64_t(step_), loss_scale, [&](int k, int32_t* in, int32_t* tgt) {
      train_loader_->fill(step_, row0 + k * b, int(b), in, tgt);
      return row0 + k * b;
    }, phase);
  tracked_vector<int32_t, MemoryCategory::data> inputs(size_t(b * s)), targets(size_t(b * s));
  double loss_sum = 0.0;
  for (int64_t first = row0; first < row0 + rows; first += b) {
    // The last micro-batch's backward starts the gradient reductions layer by layer.
    states_->set_last_micro_batch(first + b >= row0 + rows);
    train_loader_->fill(step_, first, int(b), inputs.data(), targets.data());
    const int64_t k = (first - row0) / b;
    const MicroBatch mb{inputs.data(), targets.data(), b, first};
    {
      TraceSpan span(Trace::Kind::forward, k, 0, step_);
      kept_->before_forward(0, L);
      loss_sum += model_->forward_chunk(mb, 0, uint64_t(step_), true, s, 0, L, nullptr, nullptr);
      kept_->after_forward(0, L);
    }
    TraceSpan span(Trace::Kind::backward, k, 0, step_);
    model_->backward_chunk(mb, 0, uint64_t(step_), loss_scale, s, 0, L, nullptr, nullptr);
  }
  return loss_sum;
}

void Trainer::complete_gradients(const parallel::OwnedGrads& grads) {
  model_->add_tied_input_grads();  // --tied-embedding-grads apart: the embedding's part, as a pipeline adds it
  if (pipeline_ && dist_->in_embedding_group() && dist_->embedding().size() > 1) {
    // The tied embedding: the first stage's (input) and the last stage's (output) gradients summed.
    const ParamInfo& wte = model_->table().params()[0];
    parallel::for_each_owned(grads, wte.offset, wte.offset + wte.numel,
                             [&](float* v, int64_t n) { dist_->embedding().all_reduce({v, size_t(n)}); });
  }
  if (model_->tensor_parallel().active() && layout_.sequence_parallel)
    parallel::finish_sequence_parallel(model_->table(), dist_->tp(), grads);
}

bool Trainer::unscale(const parallel::OwnedGrads& grads, StepResult& r) {
  if (!loss_scaler_.active) return true;
  // Every rank agrees whether any gradient overflowed; a skipped step leaves the weights alone.
  float overflow = parallel::all_finite(grads) ? 0.0f : 1.0f;
  if (dist_) dist_->world().all_reduce({&overflow, 1}, comm::ReduceOp::max);
  r.loss_scale = loss_scaler_.scale;
  if (overflow != 0.0f && loss_scaler_.scale <= 1.0)
    throw TrainingError("fp16 gradients overflow even at loss scale 1 at step " + std::to_string(r.step) +
                        ": training stopped (try --params-dtype bf16 or a lower --lr)");
  r.skipped = !loss_scaler_.update(overflow == 0.0f);
  if (!r.skipped) parallel::scale_grads(grads, float(1.0 / r.loss_scale));
  return !r.skipped;
}

StepResult Trainer::finish_step(StepResult r, std::chrono::steady_clock::time_point t0) {
  // The step's traffic, before anything else (checkpoint gathers, evaluation) adds to the counters.
  for (int kind = 0; kind < comm::kGroupKinds; ++kind)
    step_sent_bytes_[size_t(kind)] = dist_ ? int64_t(dist_->traffic().total(comm::GroupKind(kind)).sent_bytes) : 0;
  if (dist_) step_traffic_ = dist_->traffic();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

double Trainer::evaluate(int64_t batches) {
  // The report shows the last training step's tensor-parallel traffic, not the evaluation's.
  const parallel::ConjugateTraffic step_traffic = parallel::conjugate_traffic();
  const data::BatchLoader& loader = val_loader_ ? *val_loader_ : *train_loader_;
  const int64_t s = model_config_.seq_len, b = config_.micro_batch;
  tracked_vector<int32_t, MemoryCategory::data> inputs(size_t(b * s)), targets(size_t(b * s));
  double sum = 0.0;
  for (int64_t k = 0; k < batches; ++k) {
    loader.fill(k, 0, int(b), inputs.data(), targets.data());
    const MicroBatch mb{inputs.data(), targets.data(), b, 0};
    sum += pipeline_ ? pipeline_->forward_loss(mb) : model_->forward_loss(mb);
  }
  // Every rank evaluates the same rows; a CP rank's sum covers its positions of them, and only the
  // last pipeline stage's holds a loss.
  if (layout_.cp > 1) sum = sum_double(dist_->cp(), sum);
  if (pipeline_) sum = sum_double(dist_->pp(), sum);
  parallel::conjugate_traffic() = step_traffic;
  return sum / double(batches * b * s);
}

std::vector<int> Trainer::local_layers() const {
  std::vector<int> layers;
  for (int l = 0; l < model_config_.layers; ++l)
    if (!pipeline_ || pipeline_->owns_layer(l)) layers.push_back(l);
  return layers;
}

OutputRules Trainer::trace_rules() const {
  OutputRules rules = output_rules_;  // the report directory's own files are not a trace's to replace
  if (!config_.report_dir.empty())
    for (const char* name : {kRunLog, kRunReport})
      rules.inputs.push_back({"--report-dir", (std::filesystem::path(config_.report_dir) / name).string()});
  return rules;
}

int Trainer::run() {
  // Every data-parallel replica starts from rank 0's weights. (Here, not in the constructor: the
  // constructor may fail on one rank only, and must not leave the others waiting in a collective.)
  states_->sync_replicas();
  const analysis::FlopsShape flops_shape{double(config_.global_batch), double(model_config_.seq_len),
                                         double(model_config_.layers), double(model_config_.hidden),
                                         double(model_config_.padded_vocab())};
  const double step_flops = analysis::model_flops(flops_shape);
  const int64_t tokens = int64_t(config_.global_batch) * model_config_.seq_len;
  const int world = dist_ ? dist_->world_size() : 1;
  const bool log = is_logging_rank();
  // The log is opened (and locked against another run) before anything is printed: a refusal is one line.
  if (log && (config_.json || !config_.report_dir.empty()))
    run_log_ = std::make_unique<RunLog>(config_.json, config_.report_dir, config_.trace,
                                        !config_.resume.empty() || config_.continue_report, config_.overwrite);
  // The mode, and each layer's when they differ (block N, segments, --recompute auto, --recompute-plan).
  const std::vector<LayerRecompute> modes = layer_recompute(layout_, model_config_.layers);
  std::string recompute_text = to_string(layout_.recompute);
  if (std::any_of(modes.begin(), modes.end(), [&](LayerRecompute m) { return m != modes.front(); }) ||
      layout_.recompute_method == RecomputeMethod::uniform)
    recompute_text += " [" + recompute_plan_text(modes) + "]";
  if (log && !config_.json)
    std::fprintf(stderr, "lattice: %lld parameters, %d layers, hidden %d, %d heads, seq %d, batch %d x %d x %d, "
                 "recompute %s, %s attention, activations %s, weights %s, %s, ZeRO %d, %d rank(s) (t=%d, dp=%d%s), %d threads\n",
                 (long long)model_config_.num_params(), model_config_.layers, model_config_.hidden,
                 model_config_.heads, model_config_.seq_len, config_.micro_batch,
                 config_.global_batch / (config_.micro_batch * layout_.dp), layout_.dp, recompute_text.c_str(),
                 to_string(layout_.attention), to_string(layout_.activation_dtype), to_string(layout_.params_dtype), optimizer_->name(),
                 states_->zero_stage(), world, layout_.tp, layout_.dp,
                 (std::string(layout_.sequence_parallel ? ", sp" : "") +
                  (layout_.cp > 1 ? ", cp=" + std::to_string(layout_.cp) + " " + to_string(layout_.cp_comm) : ""))
                     .c_str(),
                 omp_get_max_threads());
  const MfuPeak peak = mfu_peak(world);
  if (log && !config_.json) std::fprintf(stderr, "lattice train: MFU peak: %s\n", peak.long_text().c_str());
  if (log && !config_.json && !config_.settings.empty())
    std::fprintf(stderr, "lattice train: settings: %s (--dump-config prints every setting as TOML)\n",
                 config_.settings.c_str());
  if (log && !config_.json && !config_.resumed_settings.empty())
    std::fprintf(stderr, "lattice train: resumed with checkpoint %s's %s (flags not given take the run's values)\n",
                 config_.resume.c_str(), config_.resumed_settings.c_str());
  if (log && !config_.json && !config_.init_shape.empty())
    std::fprintf(stderr, "lattice train: the model's shape from --init %s: %s (flags not given take its values)\n",
                 config_.init.c_str(), config_.init_shape.c_str());
  if (run_log_) {
    nlohmann::json start = start_record(world);
    start["peak_flops"] = peak.total > 0 ? nlohmann::json(peak.rank.flops) : nlohmann::json(nullptr);
    start["peak_flops_total"] = peak.total > 0 ? nlohmann::json(peak.total) : nlohmann::json(nullptr);
    start["peak_source"] = peak.total > 0 ? peak.rank.source : peak.long_text();
    run_log_->record(start);
  }
  double first_loss = NAN, last_loss = NAN, total_s = 0;
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t first_step = step_;  // a resume counts from where it started
  int64_t timed_steps = 0;
  while (step_ < config_.steps) {
    const StepResult r = train_step();
    if (std::isnan(first_loss)) first_loss = r.loss;
    last_loss = r.loss;
    if (r.step > 1 || config_.steps == 1) total_s += r.seconds, ++timed_steps;  // step 1 warms caches
    if (r.step == 1 && config_.steps > 1) reset_op_profile();  // --profile-ops times what total_s times
    if (log) {
      StepReport report;
      report.step = r.step, report.steps = config_.steps, report.loss = r.loss, report.lr = r.lr;
      report.grad_norm = r.grad_norm, report.update_of_step = r.update_of_step;
      report.step_s = r.seconds, report.tokens_per_s = double(tokens) / r.seconds;
      report.mfu = peak.total > 0 ? step_flops / r.seconds / peak.total : 0.0;
      report.peak_flops = peak.rank.flops, report.peak_flops_total = peak.total;
      report.peak_source = peak.total > 0 ? peak.rank.source : peak.long_text(), report.peak_short = peak.short_text();
      report.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      report.eta_s = report.elapsed_s / double(r.step - first_step) * double(config_.steps - r.step);
      // Known where data.json gives the text's bytes (or byte tokens of a 256 vocabulary); else 0, not shown.
      if (bits_per_byte_known()) report.bits_per_byte = data::bits_per_byte(r.loss, data_sizes_.train);
      report.activation_peak_bytes = activation_peak_, report.loss_scale = r.loss_scale, report.skipped = r.skipped;
      report.moe = r.moe;
      if (run_log_) run_log_->record(step_json(report));
      if (!config_.json) print_step_line(report);
      for (const Straggler& s : r.stragglers) {  // named while the run goes on (docs/recovery.md)
        std::fprintf(stderr, "lattice train: warning: %s\n", straggler_text(s).c_str());
        if (run_log_) run_log_->record(straggler_json(s));
      }
    }
    if (save_due(r.step) && r.step < config_.steps) {
      // The stall: what the save keeps training from (all of a synchronous one; the copy to host
      // buffers of a background one, and any wait for the previous background save to finish).
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t writing = staged_async_ ? staged_step_ : -1;
      settle_background_save(true);  // one background save at a time
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      stage_save(config_.save, config_.async_save);
      // PipeDream-2BW's newest weights are first read two steps on: checked now, not by the next step.
      const std::string refused = states_->versions() == 2 ? promote_checked_save() : "";
      if (!refused.empty() && log) std::fprintf(stderr, "lattice train: warning: %s\n", refused.c_str());
      const double stall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      report_save(r.step, stall, waited, writing);
      if (config_.save_every_auto && auto_every_ == 0) choose_save_interval(stall, r.seconds);
    }
    if (config_.eval_every > 0 && r.step % config_.eval_every == 0) {
      const double eval_loss = evaluate(config_.eval_batches);
      // Validation windows are val.bin's when it exists (evaluate()), so its bytes a token apply.
      const double bpb = data::bits_per_byte(eval_loss, val_loader_ ? data_sizes_.val : data_sizes_.train);
      nlohmann::json event{{"event", "eval"}, {"step", r.step}, {"loss", eval_loss}};
      if (bits_per_byte_known()) event["bits_per_byte"] = bpb;
      if (run_log_) run_log_->record(event);
      if (log && !config_.json)
        std::fprintf(stderr, "  eval loss %.4f%s\n", eval_loss,
                     bits_per_byte_note(bits_per_byte_known() ? bpb : 0).c_str());
    }
  }
  std::string final_refused;  // why the final save was not promoted (said last; the run exits 1)
  if (!config_.save.empty()) {
    // The last background save finishes (and is promoted if sound) before the final one is staged;
    // the final one, written in the background too under --async-save, is waited for: the run ends
    // with its checkpoint complete on disk.
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t writing = staged_async_ ? staged_step_ : -1;
    settle_background_save(true);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stage_save(config_.save, config_.async_save);
    final_refused = promote_checked_save();
    settle_background_save(true);
    const double stall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report_save(step_, stall, waited, writing);
  }
  if (!config_.trace.empty()) {
    namespace pl = parallel::pipeline;
    const TraceLayout traced{pl::schedule_name(pl::parse_schedule_kind(config_.schedule)),
                             dist_ ? dist_->world().size() : 1, layout_.pp, layout_.virtual_stages,
                             int(config_.global_batch / (config_.micro_batch * layout_.dp)), start_id_};
    write_trace(Trace::instance(), config_.trace, dist_ ? &dist_->world() : nullptr, dist_ ? dist_->rank() : 0,
                traced, trace_rules());
  }

  summarize({first_loss, last_loss, total_s, timed_steps, step_flops, tokens, peak});
  if (run_log_) run_log_->finish();
  if (final_refused.empty()) return 0;
  if (log) std::fprintf(stderr, "lattice train: error: %s\n", final_refused.c_str());
  return 1;
}

}  // namespace lattice
