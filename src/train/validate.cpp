// validate_training: every field of a training configuration checked before any work starts.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "analysis/formulas.hpp"
#include "core/error.hpp"
#include "core/fp8_layout.hpp"
#include "core/memory_limit.hpp"
#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"
#include "engine/schedule.hpp"
#include "train/loss_scaler.hpp"
#include "train/train_config.hpp"

namespace lattice {

namespace {
constexpr int kMaxRows = 1 << 20;  // sequences per batch: beyond any memory, far below int overflow
int max_threads() { return std::max(256, 4 * int(std::thread::hardware_concurrency())); }

// A lower bound of what one rank holds while training (model states, one micro-batch's kept
// activations, the largest workspaces), so absurd sizes are refused before any allocation.
void require_fits(const ModelConfig& m, const LayoutConfig& layout, const TrainConfig& t) {
  const double s = m.seq_len, b = t.micro_batch, h = m.hidden, tp = layout.tp;
  const double a_local = double(m.heads) / tp, v_local = double(m.padded_vocab(layout.tp)) / tp;
  const StagePartition stages = StagePartition::of(layout, m.layers);
  size_t most = 0;
  for (int r = 0; r < layout.pp; ++r) most = std::max(most, stages.layers_of_rank(r, layout.pp).size());
  const double layers = double(most);
  double most_params = 0;  // the heaviest stage's (uneven stages hold different shares)
  for (int r = 0; r < layout.pp; ++r)
    most_params = std::max(most_params, double(analysis::stage_parameters(
                                            m, layout.tp, layout.pp, r, int(stages.layers_of_rank(r, layout.pp).size()))));
  if (layout.pp == 1) most_params = double(m.num_params()) / tp;
  const double states = 16.0 * most_params / (layout.zero >= 3 ? layout.dp : 1);
  const analysis::ActivationShape shape{m.seq_len, t.micro_batch, m.hidden, m.heads,
                                        m.padded_vocab(layout.tp), layout.tp, layout.sequence_parallel,
                                        bytes_of(layout.activation_dtype), m.dropout > 0,
                                        layout.fused_attention(), layout.pack_masks, layout.fp8_kept};
  const double kept = analysis::kept_activation_bound(shape, layers, layout.recompute == Recompute::full,
                                                      layout.recompute == Recompute::selective, false);
  // Fused attention allocates no s² workspace (docs/design.md §3.1).
  const double workspace = analysis::forward_workspace_bytes(s, b, h, layout.fused_attention() ? 0.0 : a_local, v_local);
  require_fits_memory(states + kept + workspace, "this configuration (per rank: model states, kept activations, workspace)",
                      "lower --layers, --hidden, --seq-len or --micro-batch, or spread it over more ranks");
}
}  // namespace

namespace {
// Mixture-of-Experts against the layout (docs/design.md §12).
void validate_moe(const ModelConfig& m, const LayoutConfig& layout, const TrainConfig& t) {
  const MoEConfig& moe = m.moe;
  if (!moe.enabled()) {
    require(layout.ep == 1, "--expert-model-parallel-size " + std::to_string(layout.ep) +
                                " needs a Mixture-of-Experts model (--num-experts)");
    return;
  }
  require(moe.experts % layout.ep == 0, "--num-experts " + std::to_string(moe.experts) +
                                            " is not divisible by --expert-model-parallel-size " +
                                            std::to_string(layout.ep));
  // EP folds over DP × CP (Megatron-Core): its groups are cut from the N_d·c ranks of one weight shard.
  require((layout.dp * layout.cp) % layout.ep == 0,
          "--expert-model-parallel-size " + std::to_string(layout.ep) + " does not divide the " +
              (layout.cp > 1 ? "data-parallel × context-parallel size N_d·c = " : "data-parallel size ") +
              std::to_string(layout.dp * layout.cp));
  require(m.ffn_hidden() % layout.tp == 0, "--moe-ffn-hidden-size " + std::to_string(m.ffn_hidden()) +
                                                " is not divisible by --tensor-model-parallel-size " +
                                                std::to_string(layout.tp));
  const int64_t tokens = int64_t(t.micro_batch) * m.seq_len;
  require(tokens % moe.groups == 0, "--moe-groups " + std::to_string(moe.groups) + " does not divide the " +
                                        std::to_string(tokens) + " tokens of a micro-batch (--micro-batch x --seq-len)");
  require(moe.experts < (1 << 24) && tokens * moe.k() < (int64_t(1) << 24),
          "a micro-batch routes at most 2^24 tokens to the experts (lower --micro-batch or --moe-router-topk)");
  require(layout.ep == 1 || t.optim.kind == "adamw",
          "--optimizer " + t.optim.kind + " keeps per-tensor statistics that are not split over the "
          "expert-parallel group yet: use --optimizer adamw with --expert-model-parallel-size > 1");
}
}  // namespace

void validate_training(const ModelConfig& m, const LayoutConfig& layout, const TrainConfig& t) {
  m.validate();
  m.require_token_vocab();
  require(!layout.pack_masks || m.dropout > 0 || m.moe.expert_dropout > 0,
          "--pack-masks keeps dropout masks at one bit an element, and this model keeps none (--dropout 0): drop the flag");
  require(t.micro_batch >= 1 && t.micro_batch <= kMaxRows, "--micro-batch must be between 1 and " + std::to_string(kMaxRows));
  require(t.global_batch >= 0 && t.global_batch <= kMaxRows,
          "--global-batch must be between 1 and " + std::to_string(kMaxRows));
  // A resume's global batch is the checkpoint's unless given (train/resume_settings.hpp): named as such.
  const bool batch_given =
      std::find(t.given_settings.begin(), t.given_settings.end(), "global-batch") != t.given_settings.end();
  const std::string global_batch =
      t.resume.empty() || batch_given ? "--global-batch" : "checkpoint " + t.resume + "'s --global-batch";
  require(t.global_batch % t.micro_batch == 0, global_batch + " (" + std::to_string(t.global_batch) +
                                                   ") must be a multiple of --micro-batch (" +
                                                   std::to_string(t.micro_batch) + ")");
  constexpr int64_t kMaxSteps = int64_t(1) << 40;
  require(t.steps >= 0 && t.steps <= kMaxSteps, "--steps must be between 0 and 2^40");
  require(t.save_every <= kMaxSteps && t.eval_every <= kMaxSteps && t.warmup <= kMaxSteps,
          "--save-every, --eval-every and --warmup must be at most 2^40");
  require(t.lr >= 0 && std::isfinite(t.lr), "--lr must be a finite non-negative number");
  require(t.min_lr >= 0 && std::isfinite(t.min_lr), "--min-lr must be a finite non-negative number");
  require(t.min_lr <= t.lr, "--min-lr (" + std::to_string(t.min_lr) + ") is above --lr (" + std::to_string(t.lr) + ")");
  require(t.lr_schedule == "constant" || t.lr_schedule == "cosine",
          "--lr-schedule must be constant or cosine (got '" + t.lr_schedule + "')");
  require(t.warmup >= 0, "--warmup must be >= 0");
  require(t.optim.beta1 >= 0 && t.optim.beta1 < 1, "--beta1 must be in [0, 1)");
  require(t.optim.beta2 >= 0 && t.optim.beta2 < 1, "--beta2 must be in [0, 1)");
  require(t.optim.eps > 0 && std::isfinite(t.optim.eps), "--eps must be a finite positive number");
  require(t.optim.weight_decay >= 0 && std::isfinite(t.optim.weight_decay), "--weight-decay must be a finite number >= 0");
  require(t.initial_loss_scale >= 1 && t.initial_loss_scale <= LossScaler::kMaxScale,
          "--initial-loss-scale must be in [1, 2^32]");
  require(t.loss_scale_window >= 1, "--loss-scale-window must be >= 1");
  if (t.optim.offload_params) {  // the shard shares the moments' file (docs/design.md §8, "Offload")
    require(layout.zero == 3, "--offload-params keeps ZeRO-3's weight shards on disk: it needs --zero 3");
    require(layout.params_dtype == ParamsDType::fp32, "--offload-params keeps fp32 weight shards (not --params-dtype " +
                                                          std::string(to_string(layout.params_dtype)) + ")");
    require(t.optim.kind == "adamw", "--offload-params shares AdamW's offload file: it needs --optimizer adamw");
  }
  // An 8-bit block's scale must not straddle two TP ranks' columns (docs/design.md §4).
  require(!layout.fp8_kept || layout.tp == 1 || (4 * int64_t(m.hidden) / layout.tp) % kFp8Block == 0,
          "--activation-compression fp8 with --tensor-model-parallel-size " + std::to_string(layout.tp) +
              " needs 4h/t to be a multiple of 32 (h " + std::to_string(m.hidden) + ")");
  // Apart sums reproduce a pipeline's: only one rank has both halves of the tied gradient to sum.
  require(!layout.tied_grads_apart || (layout.tp == 1 && layout.pp == 1 && layout.dp == 1 && layout.cp == 1 &&
                                       layout.zero == 0 &&
                                       layout.params_dtype == ParamsDType::fp32 && !m.moe.enabled()),
          "--tied-embedding-grads apart is for one rank (no --tensor/--pipeline/context/data parallelism, --zero 0, "
          "fp32 weights, dense): it makes one rank sum the tied gradient as a pipeline does");
  require(t.clip_grad >= 0 && std::isfinite(t.clip_grad), "--clip-grad must be a finite number >= 0 (0 = off)");
  require(t.threads >= 0 && t.threads <= max_threads(),
          "--threads must be between 0 (all cores) and " + std::to_string(max_threads()));
  require(t.eval_every >= 0, "--eval-every must be >= 0 (0 = off)");
  require(t.eval_batches >= 1 && t.eval_batches <= kMaxRows,
          "--eval-batches must be between 1 and " + std::to_string(kMaxRows));
  require(std::isfinite(t.peak_flops) && t.peak_flops >= 0, "--peak-flops must be a finite number >= 0");
  require(std::isfinite(t.straggler_threshold) && t.straggler_threshold > 0 && t.straggler_threshold <= 1000,
          "--straggler-threshold must be above 0 and at most 1000 (a share above the median: 0.5 = 50%)");
  require(valid_comm_timeout(t.comm_timeout),
          "--comm-timeout must be between 0 (off) and 1e6 seconds");
  require(!t.zero_prefetch_given || layout.zero == 3, "--zero-prefetch applies to --zero 3 only");
  require(t.init.empty() || t.resume.empty(),
          "--init and --resume both given: --resume continues a run (weights, optimizer, step), "
          "--init only starts from weights; pass one");
  require(t.save_every >= 0, "--save-every must be >= 0");
  require(t.save_every == 0 || !t.save.empty(), "--save-every needs --save DIR");
  // --save-every auto: Young/Daly's interval needs the failure rate, and something to save.
  require(!t.save_every_auto || (t.mtbf != 0 && !t.save.empty()),
          std::string("--save-every auto needs --mtbf DURATION (the mean time between failures) and --save DIR") +
              (t.mtbf != 0 ? " (no --save given)" : t.save.empty() ? " (neither given)" : " (no --mtbf given)"));
  require(t.mtbf == 0 || t.save_every_auto,
          "--mtbf applies to --save-every auto only (it sets the interval from the failure rate): pass --save-every auto "
          "or leave --mtbf out");
  require(t.mtbf == 0 || (std::isfinite(t.mtbf) && t.mtbf > 0 && t.mtbf <= 10 * 365.25 * 86400),
          "--mtbf must be a duration in (0, 10 years]");
  require(!t.async_save || !t.save.empty(), "--async-save needs --save DIR (it writes the checkpoints of --save)");
  require(layout.recompute_layers < 0 || layout.recompute == Recompute::full,
          "--recompute-layers applies to --recompute full only");
  require(layout.recompute_layers <= m.layers, "--recompute-layers (" + std::to_string(layout.recompute_layers) +
                                                   ") is more than --layers (" + std::to_string(m.layers) + ")");
  // Named even when there is one stage, so a misspelt schedule is never silently ignored.
  const auto schedule = parallel::pipeline::parse_schedule_kind(t.schedule);
  if (schedule == parallel::pipeline::ScheduleKind::pipedream_2bw) {
    // Two whole weight versions, and updates that fall between a batch's forwards and its last backwards.
    // ZeRO shards over DP × CP (docs/design.md §5.1): one rank of each is no shard at all.
    require(layout.zero < 3 || layout.dp * layout.cp == 1,
            "--schedule pipedream-2bw keeps two whole weight versions on every rank: --zero 3 shards them over the "
            "data-parallel and context-parallel ranks; use --zero 1 or 2");
    require(!t.optim.offload_params, "--schedule pipedream-2bw keeps two whole weight versions in memory: "
                                     "--offload-params is not available with it");
    require(layout.params_dtype != ParamsDType::fp16,
            "--schedule pipedream-2bw with --params-dtype fp16: a step skipped for a loss-scale overflow would "
            "fall between a batch's forwards and its last backwards; use --params-dtype bf16");
  }
  if (layout.pp > 1) {
    StagePartition::of(layout, m.layers);  // the stages' layer counts fit the model and the layout
    const int n_mb = t.global_batch / (t.micro_batch * layout.dp);
    parallel::pipeline::validate_schedule(schedule, layout.pp, n_mb, layout.virtual_stages);
  } else {
    require(layout.virtual_stages == 1, "--virtual-stages needs --pipeline-model-parallel-size > 1");
    StagePartition::of(layout, m.layers);  // one stage: --pipeline-layers, if given, must be L
  }
  layer_recompute(layout, m.layers);  // uniform's k against every stage, a --recompute-plan's length
  require(m.heads % layout.tp == 0, "--tensor-model-parallel-size " + std::to_string(layout.tp) +
                                        " must divide --heads " + std::to_string(m.heads));
  require(!layout.sequence_parallel || layout.tp > 1,
          "--sequence-parallel needs tensor parallelism (--tensor-model-parallel-size > 1)");
  require(!layout.sequence_parallel || m.seq_len % layout.tp == 0,
          "--sequence-parallel needs --seq-len (" + std::to_string(m.seq_len) +
              ") divisible by --tensor-model-parallel-size (" + std::to_string(layout.tp) + ")");
  require(t.global_batch % (t.micro_batch * layout.dp) == 0,
          global_batch + " (" + std::to_string(t.global_batch) + ") must be a multiple of --micro-batch x data-parallel size (" +
              std::to_string(t.micro_batch) + " x " + std::to_string(layout.dp) + ")");
  const std::string cp_problem = context_parallel_problem(m, layout);
  require(cp_problem.empty(), cp_problem);
  validate_moe(m, layout, t);
  require_fits(m, layout, t);
}

}  // namespace lattice
