#pragma once
// The training loop: micro-batches with gradient accumulation, the reduced gradient completed,
// clipped and applied by the optimizer with its learning-rate schedule (fp16 loss scaling), progress
// lines, checkpoints, and the final memory summary. How model states are kept is ModelStates'
// business (engine/model_states.hpp): a step here is the same sequence for every layout.
#include <array>
#include <chrono>
#include <memory>
#include <span>

#include "analysis/formulas.hpp"
#include "comm/distributed.hpp"
#include "core/config.hpp"
#include "data/loader.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer_files.hpp"
#include "engine/executor.hpp"
#include "engine/model_states.hpp"
#include "model/gpt.hpp"
#include "optim/lr_schedule.hpp"
#include "optim/optimizer.hpp"
#include "report/run_log.hpp"
#include "report/step_report.hpp"
#include "tensor/kept_bytes.hpp"
#include "train/background_save.hpp"
#include "train/loss_scaler.hpp"
#include "train/loss_spike_guard.hpp"
#include "train/step_timing.hpp"
#include "checkpoint/checkpoint.hpp"
#include "train/train_config.hpp"

namespace lattice {

struct StepResult {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
  int64_t update_of_step = 0;  // the step whose batch the last update applied was (report/step_report.hpp)
  double loss_scale = 0;  // fp16: the scale this step's backward used
  bool skipped = false;   // fp16: an inf/NaN gradient, no update
  MoEStepStats moe;
  std::vector<Straggler> stragglers;  // named by the step-time rule at this step (report/step_time.hpp)
};

// A test's stand-in for a slow file system under --resume: LATTICE_TEST_PAUSE_RESUME_READ=R:S:WHERE
// pauses launcher rank R (0 alone) for S seconds, once a process, before it reads the checkpoint
// ("before": the cli, before its first read) or between its trainer.json and its weights ("during":
// the trainer).
void test_pause_checkpoint_read(const char* where);

class Trainer {
 public:
  // Validates everything (throws InputError) before any training work starts. `dist` is the
  // process's place in a multi-rank run (null: one process).
  Trainer(const ModelConfig& model, const LayoutConfig& layout, const TrainConfig& train,
          comm::Distributed* dist = nullptr);
  ~Trainer();

  StepResult train_step();  // one optimizer step, timed by rank (StepTiming; collective)
  int run();                // the whole run with reports and checkpoints; returns exit status
  double evaluate(int64_t batches);  // mean validation loss (or train data when no val.bin)
  // Which save --resume read (checkpoint::saved_version; "" without --resume): ranks that read
  // different saves of one directory (a run saved into it meanwhile) must not train on.
  const std::string& resumed_version() const { return resumed_version_; }

  GPT& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  int64_t step() const { return step_; }
  // Writes a checkpoint of the current weights to a temporary directory beside `dir` (collective;
  // world rank 0 writes). It replaces the previous checkpoint only once the loss its weights give is
  // finite and no outlier against the run's recent losses (promote_if_sound): the last checkpoint on
  // disk is always one whose weights train on.
  // `background` (--async-save): world rank 0 keeps a host copy that a background thread writes and
  // fsyncs while training goes on (train/background_save.hpp); promoted once written and sound.
  void stage_save(const std::string& dir, bool background = false);
  int64_t saved_step() const { return saved_step_; }  // the step the checkpoint on disk holds (-1: none)
  bool is_logging_rank() const { return !dist_ || dist_->rank() == 0; }

 private:
  ModelConfig model_config_;
  LayoutConfig layout_;
  TrainConfig config_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<data::BatchLoader> train_loader_, val_loader_;
  LrSchedule schedule_;
  comm::Distributed* dist_ = nullptr;
  data::Tokenizer tokenizer_;  // the data's (recorded in every checkpoint)
  std::string train_bin_fingerprint_;  // recorded in a checkpoint's data_position (a resume compares it)
  data::DataSizes data_sizes_;  // tokens and text bytes of train.bin and val.bin: bits per byte
  bool bits_per_byte_known() const { return data_sizes_.recorded || model_config_.vocab == data::Tokenizer::kByteVocab; }
  std::unique_ptr<parallel::ModelStates> states_;  // weights, gradients, masters: as the layout keeps them
  LossScaler loss_scaler_;
  std::unique_ptr<KeptBytesProbe> kept_;  // what the forwards keep for backward (measured)
  std::unique_ptr<parallel::pipeline::Executor> pipeline_;  // this rank's stage (p > 1)
  // The MFU's denominator (docs/mfu.md): this rank's peak (given, theoretical or measured) and the
  // sum of every rank's, so the MFU is the model FLOPs over the capacity of all ranks together.
  struct MfuPeak {
    PeakEstimate rank;
    double total = 0;  // Σ ranks' peaks; 0 when some rank has none (MFU n/a)
    int world = 1;
    bool ranks_alike = true;
    std::string short_text() const;  // "5.32T AMX", "2×5.32T AMX", "10.6T over 2 ranks"
    std::string long_text() const;    // the start line's and the summary's
  };
  MfuPeak mfu_peak(int world) const;  // collective over the world
  struct RunTotals {
    double first_loss, last_loss, total_s;
    int64_t timed_steps;
    double step_flops;
    int64_t tokens;
    MfuPeak peak;
  };
  void summarize(const RunTotals& totals);  // trainer_summary.cpp
  StepResult run_step();  // train_step's work, inside the step's trace span
  std::unique_ptr<StepTiming> timing_;  // each step split into compute, wait and bubble, by rank
  bool stepped_ = false;  // a step has run in this process
  nlohmann::json start_record(int world) const;  // {"event":"start"}: the run's configuration (trainer_summary.cpp)
  std::unique_ptr<RunLog> run_log_;  // the logging rank's records: stdout (--json), --report-dir
  // This rank's micro-batches of the step, forward and backward (through the pipeline when p > 1);
  // returns the loss sum of those whose head ran here.
  double run_micro_batches(float loss_scale, parallel::pipeline::Phase phase);
  // The reduced gradient made the whole model's: tied embedding summed over its two stages,
  // sequence-parallel partial sums over TP.
  void complete_gradients(const parallel::OwnedGrads& grads);
  // fp16: unscales the gradient, or (an inf/NaN anywhere) returns false: the step is skipped.
  bool unscale(const parallel::OwnedGrads& grads, StepResult& r);
  // A step's end, applied or skipped: its traffic snapshot and its time.
  StepResult finish_step(StepResult r, std::chrono::steady_clock::time_point t0);
  std::vector<int> local_layers() const;
  // Global batch `batch`'s forwards and backwards in `phase`, on its weight version; returns the
  // mean loss over the global batch. Shared by the step and the final check.
  double forward_backward(uint64_t batch, parallel::pipeline::Phase phase);
  // Update `batch`: W(batch+1) from its gradient, reduced and completed (tied embedding, SP),
  // unscaled, clipped; its learning rate and grad norm go into `r`.
  void apply_update(uint64_t batch, StepResult& r);
  // Whether the step that ends as step `step` drains the pipeline (every step but PipeDream-2BW's
  // steady ones: docs/design.md §6.3).
  bool drains_after(int64_t step) const;
  bool after_drain_ = true;  // the next step starts the stream (the run's start, a resume, a drain)
  parallel::pipeline::Phase last_phase_ = parallel::pipeline::Phase::whole;  // the last step's
  int last_step_updates_ = 0;  // and the updates it applied (PipeDream-2BW: 0 to 2)
  // The passes this rank ran in the last step, which its traffic formulas count (trainer_summary.cpp).
  analysis::StepPasses last_step_passes();
  // The loss of the newest weights on a batch they have not trained on (forward and backward as a
  // step runs them, no update): what a save is checked with before it replaces the last one.
  double loss_of_next_batch();
  // The staged save promoted once loss_of_next_batch() is finite (TrainingError otherwise) and no
  // outlier; returns why it was not (empty: promoted).
  std::string promote_checked_save();
  // Promotes the staged save (if any) unless `loss`, its weights' loss on a batch they have not
  // trained on, is an outlier for spike_guard_: then the save is dropped, the JSON stream gets a
  // {"event":"promotion_refused"} record, and the one line saying why is returned (empty: promoted).
  std::string promote_if_sound(double loss);
  void promote_save();
  LossSpikeGuard spike_guard_;  // the run's recent step losses (saved in trainer.json, resumed)
  double global_loss(double loss_sum);  // summed over the last stage and the DP replicas
  std::array<comm::Communicator*, 2> stage_and_replica_groups();  // PP then DP; null where absent
  void sum_over_stages_and_replicas(std::span<float> values);  // in place, over PP then DP
  // The model's routing counters of this step over the global batch (summed over DP and stages);
  // adds the loads to the run's histogram when `count`.
  MoEStepStats moe_step_stats(bool count);
  std::string saved_note() const;  // "; the checkpoint in DIR holds step N" (or that none was written)
  // Before training: the file system of --save has room for the run's saves (InputError otherwise);
  // `held`: --save holds a checkpoint already, which each save replaces.
  void check_save_room(int64_t start_step, bool two_versions, bool held);
  std::unique_ptr<checkpoint::StagedCheckpoint> staged_;  // rank 0: written, not yet promoted
  // --async-save: the staged save is being written in the background (rank 0's thread in
  // background_); `staged_sound_`: the guard allowed it, so it is promoted once written.
  std::unique_ptr<BackgroundSave> background_;
  bool staged_async_ = false, staged_sound_ = false;
  // Promotes the background save once its write is done on rank 0 and every rank agrees (a collective
  // on this thread); `wait`: waits for the write first. Returns the seconds it waited.
  double settle_background_save(bool wait);
  // The staged save is dropped (the checkpoint on disk stays), unless it was judged sound already
  // (a background one still writing): then it is finished and promoted first.
  void drop_unjudged_save();
  // Whether step `step` ends with a periodic save (--save-every N, or auto: the first at the run's
  // second step, then every auto_every_ steps).
  bool save_due(int64_t step) const;
  int64_t auto_every_ = 0, auto_first_save_ = -1;
  // --save-every auto: the interval from the first save's stall and the step time (Young/Daly),
  // agreed over the ranks, printed once with its inputs.
  void choose_save_interval(double save_cost_s, double step_s);
  // The save's JSON event (and a line when it waited for the previous background save).
  void report_save(int64_t step, double stall_s, double waited_s, int64_t waited_for);
  OutputRules output_rules_;  // rank 0: what its outputs may not replace (core/output_path.hpp)
  OutputRules trace_rules() const;  // output_rules_ and the report directory's own files
  DirLock save_lock_;         // rank 0: --save held against another run for this run's life
  int64_t staged_step_ = -1, saved_step_ = -1;
  int64_t step_ = 0;  // optimizer steps done
  int64_t first_step_ = 1;    // this run's first step (its loss precedes any update)
  // This start's identity (a resume is a new start): its start record and its trace carry it, so a
  // report does not draw another run's trace as this one's. Not in the checkpoint, whose bytes stay a
  // function of the run's settings (two equal runs save equal files).
  std::string start_id_;
  std::string weights_from_;  // --resume or --init: where the first step's weights came from
  std::string resumed_version_;  // --resume's save (checkpoint::saved_version): the ranks compare it
  int64_t activation_peak_ = 0;
  std::vector<std::vector<int64_t>> moe_load_;  // [MoE layer][expert]: tokens over the run
  std::array<int64_t, comm::kGroupKinds> step_sent_bytes_{};  // by comm::GroupKind, measured at the end of the last step
  comm::TrafficLedger step_traffic_;  // the same by group and operator
};

}  // namespace lattice
