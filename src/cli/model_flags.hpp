#pragma once
// The model, layout and training flags, with Megatron-LM's names as aliases, shared by the
// sub-commands that take them. Values are checked after parsing (ModelConfig::validate etc.).
#include <CLI/CLI.hpp>
#include <string>

#include "core/config.hpp"
#include "train/train_config.hpp"

namespace lattice::cli {

struct LayoutFlags {
  LayoutConfig layout;
  std::string recompute = "none", activation_dtype = "fp32", params_dtype = "fp32";
  std::string recompute_method, recompute_plan;  // empty: not given (block; derived from the flags)
  std::string attention = "unfused", activation_compression = "none", tied_embedding_grads = "together";
  std::string pipeline_layers;                    // "3,4,4,1" or "auto" (empty: even stages)
  std::string cp_comm = "p2p";                    // --cp-comm-type
  // `lattice train` runs context parallelism and `lattice plan` models it; bench (one process's layer
  // costs) and launch (whose relaunch layouts have no c) do not take it yet, so resolve() refuses
  // --context-parallel-size above 1 unless the command sets this.
  bool context_parallel_runs = false;
  std::string memory_budget;                      // --memory-budget (empty: none)
  int first_stage_layers = 0, last_stage_layers = 0;  // Megatron's aliases for uneven first/last stages
  // Turns the string flags into the layout for a model of `layers` layers (throws InputError for bad
  // values). `--pipeline-layers auto` leaves stage_layers empty and sets partition_auto: the caller
  // partitions (analysis/partition.hpp) once it knows the costs.
  LayoutConfig resolve(int layers);
  bool partition_auto = false;
  // `--recompute auto` leaves the layout's recompute none: the caller chooses the plan
  // (plan/recompute_auto.hpp) once it knows the model, and sets recompute_plan.
  bool recompute_auto = false;
  int64_t memory_budget_bytes = 0;
};

void add_model_flags(CLI::App& app, ModelConfig& model);
void add_moe_flags(CLI::App& app, MoEConfig& moe);
void add_layout_flags(CLI::App& app, LayoutFlags& flags);
void add_train_flags(CLI::App& app, TrainConfig& train, std::string& shuffle);
// After parsing: the flags given (train.given_settings), and with --resume the run's own settings for
// those not given (train/resume_settings.hpp), before anything is planned from them (the batch sizes
// that size memory, the recompute and partition choices, a launcher's restarts). A --resume with no
// trainer.json is left for the trainer to name. Returns what trainer.json's "train" records (null: none).
nlohmann::json take_resumed_settings(const CLI::App& app, TrainConfig& train);
// After parsing, with --resume: the model flags not given take the checkpoint's model (its trainer.json),
// so `--resume ck` alone continues the run's own model; a flag given with another value is left for
// the trainer to refuse, naming both models. With --init (CheckpointModel::init): the shape's flags
// only (layers, hidden, heads, seq-len, and the experts' count, placement, size and router), which
// the weights fix; dropout and the routing's training values stay the new run's. --vocab is the
// data's where its tokenizer says it (held to the checkpoint's), and taken too with `vocab_too`
// (token files without a tokenizer, llm.c's). Returns the values taken, by flag (long name), for
// --dump-config (only those that differ from the flags' defaults: `non_default_only`, for the start
// line); none without a readable trainer.json (the trainer names what is wrong with it).
enum class CheckpointModel { resume, init };

// The model's flags, one row each: the one table the resume, --init, eval and sample read (what a
// flag sets, how its value shows, whether the weights fix it).
struct ModelFlag {
  const char* flag;   // long name, without dashes
  const char* alias;  // another flag setting the same field (--moe-no-drop), or nullptr
  enum Kind { shape, training, vocab } kind;  // shape: fixed by the weights (--init takes it)
  bool moe;           // a value of the experts (needs --num-experts: a dense model has none)
  void (*copy)(ModelConfig& to, const ModelConfig& from);
  nlohmann::json (*value)(const ModelConfig&);  // as the start line, --dump-config and messages show it
};
const std::vector<ModelFlag>& model_flag_table();
// The spelling of `row` given (its flag or its alias, as typed), or nullptr when neither was, as the
// flag rules say (cli/flag_rules.cpp): a flag (no value) given =false is not given.
const char* model_flag_spelling(const CLI::App& app, const ModelFlag& row);
inline bool model_flag_given(const CLI::App& app, const ModelFlag& row) { return model_flag_spelling(app, row); }
std::vector<std::pair<std::string, nlohmann::json>> take_checkpoint_model(const CLI::App& app, ModelConfig& model,
                                                                          const std::string& checkpoint,
                                                                          CheckpointModel use, bool vocab_too,
                                                                          bool non_default_only = false);
// A resume continues the run's precision as it continues its settings: --params-dtype and
// --activation-dtype not given take checkpoint `checkpoint`'s recorded values (an fp16 run resumed
// without the flag had run on in fp32, its loss scale dropped without a word); given, they change it
// (the checkpoint's fp32 masters start the new precision). Returns the values taken, as flags.
std::vector<std::pair<std::string, nlohmann::json>> take_resumed_precision(const CLI::App& app, LayoutFlags& layout,
                                                                           const std::string& checkpoint);
// --device cpu|cuda|cpu-guarded: which backend serves the kernels, memory and copies (backend/device_ops.hpp),
// chosen once by the command before it builds a model.
void add_device_flag(CLI::App& app, std::string& device);
// --threads for the commands that run a model without training it (eval, sample): 0 (the default)
// leaves OpenMP's all cores; use_threads checks the value and applies it.
void add_threads_flag(CLI::App& app, int& threads);
void use_threads(int threads);
// --config FILE.toml: keys are the long flag names; flags on the command line win.
void add_config_file(CLI::App& app, std::string& path);
// A seed is an integer in [0, 2^64): CLI11 alone would wrap -1 and saturate 2^64.
CLI::Validator seed_range();

}  // namespace lattice::cli
