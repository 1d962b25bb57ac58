#pragma once
// Everything `lattice train` needs beyond the model and the layout.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/machine_peak.hpp"
#include "core/output_path.hpp"
#include "optim/optimizer.hpp"

namespace lattice {

struct TrainConfig {
  std::string data_dir;
  int64_t steps = 300;
  int micro_batch = 16;
  int global_batch = 0;  // 0 = micro_batch (no accumulation)
  double lr = 3e-3, min_lr = 3e-4;
  std::string lr_schedule = "cosine";
  int64_t warmup = 20;
  // The cosine's last step: --steps, or a resumed run's own (train/resume_settings.hpp); 0 until the
  // trainer resolves it.
  int64_t decay_steps = 0;
  OptimizerConfig optim;
  double clip_grad = 1.0;  // 0 = off
  bool zero_prefetch = true;  // ZeRO-3: gather the next layer while this one computes
  bool zero_prefetch_given = false;  // --zero-prefetch on the command line (meaningful with --zero 3 only)
  double initial_loss_scale = 65536.0;
  int64_t loss_scale_window = 1000;  // fp16: clean steps before the loss scale doubles
  bool shuffle = true;
  uint64_t seed = 1337;
  bool seed_given = false;  // --seed on the command line (a resume must not change it)
  // The long names of the flags given (the command line or --config): a resume takes the
  // checkpoint's value of the others (train/resume_settings.hpp).
  std::vector<std::string> given_settings;
  bool override_schedule = false;  // --override-schedule: a resume may change the schedule's values
  bool settings_resumed = false;   // the resume's settings are taken (cli: take_resumed_settings)
  std::string resumed_settings;    // those that differ from the defaults, as flags (printed at start)
  std::string init_shape;          // the model's shape taken from --init's checkpoint, as flags (printed at start)
  std::string init, save, resume;
  int64_t save_every = 0;
  bool save_every_auto = false;  // --save-every auto: Young/Daly's interval from --mtbf and the measured save cost
  double mtbf = 0;               // --mtbf in seconds (0: not given; NaN: not a duration)
  bool async_save = false;       // --async-save: written and fsynced by a background thread
  int64_t eval_every = 0, eval_batches = 8;
  // The MFU's peak a rank (docs/mfu.md): given, else the theoretical peak of the cores its threads
  // run on for the dtype's GEMM path (core/machine_peak.hpp, capped at gemm_isa: the cli asks
  // oneDNN; at a saved bench's measured clock where faster), else (or, with as many threads, above
  // it) the GEMM rate a saved `lattice bench` measured (the cli reads it: measured_*; Trainer::mfu_peak
  // decides).
  double peak_flops = 0;  // --peak-flops; 0: not given
  GemmIsa gemm_isa = GemmIsa::any;
  double measured_peak_flops = 0;
  std::string measured_peak_source;
  int measured_peak_threads = 0;  // the threads a rank the bench ran
  // The clock the same bench's FMA loop showed the cores ran at (0: none): the theoretical peak's clock
  // where faster than cpuinfo's (core/machine_peak.hpp, MachineTexts::measured_ghz).
  double measured_clock_ghz = 0;
  std::string measured_clock_source;
  bool json = false;
  std::string settings;  // the run's flags as given, printed once at start (cli: given_flags)
  bool comm_report = false;
  std::string trace;  // Chrome trace file (Perfetto), one track per rank
  bool continue_report = false;  // lattice launch's relaunch: --report-dir's log continues (--continue-report)
  std::string report_dir;  // run.jsonl and report.html, drawn as the run goes (report/run_log.hpp)
  bool overwrite = false;  // --overwrite: an output path may replace a file lattice did not write (core/output_path.hpp)
  std::vector<NamedPath> other_inputs;  // files the command read besides the run's own (--config, --hardware)
  // The planner's per-category bytes for this run (cli: plan/memory_model), carried into the start
  // record for the report to set beside the measured peaks: [{stage, writer, categories, accounted_peak}].
  nlohmann::json predicted_memory;
  std::string schedule = "1f1b";  // pipeline schedule: gpipe | 1f1b | interleaved
  int threads = 0;  // 0 = OpenMP's default
  double comm_timeout = 300;  // seconds one communication may wait before the rank stops (0 = off)
  // A rank whose compute over the last 2 s exceeds its stage's median by more than this share is
  // named a straggler (report/step_time.hpp; 0.5 = StepTimes::kDefaultThreshold).
  double straggler_threshold = 0.5;

  int accumulation_steps() const { return global_batch / micro_batch; }
};

// --comm-timeout's range: 0 (off) to 1e6 seconds, finite.
inline bool valid_comm_timeout(double seconds) { return seconds >= 0 && seconds <= 1e6; }

// Throws InputError naming the first bad field (flags by their names) before any work starts.
void validate_training(const ModelConfig& model, const LayoutConfig& layout, const TrainConfig& train);

}  // namespace lattice
