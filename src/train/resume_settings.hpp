#pragma once
// The training settings a resume continues (docs/reliability.md, "Resuming a run"): what trainer.json's
// "train" records of the run (schedule, optimizer, batch, length), and how a resumed run takes them.
// A flag not given on the resume takes the checkpoint's value, so `--resume ck` alone continues the run
// as it was, not under the flags' defaults. A flag given with another value is refused, except those a
// resume may change: --steps and --micro-batch always, and the schedule's and optimizer's
// hyperparameters with --override-schedule. The data order (--global-batch) and the optimizer's kind
// (its states) never change on a resume.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "train/train_config.hpp"

namespace lattice {

// The settings of `config` as trainer.json's "train" records them.
nlohmann::json training_settings_json(const TrainConfig& config);

// Applies `saved` (trainer.json's "train" of checkpoint `checkpoint`) to `config` as above; a setting
// the checkpoint does not record (an older one) stays as given. Throws InputError naming the flag,
// both values and the remedy. Returns the settings taken from the checkpoint that differ from the
// flags' defaults, as flags ("--lr 0.01 --warmup 2"), empty when none.
std::string resume_training_settings(TrainConfig& config, const nlohmann::json& saved, const std::string& checkpoint);

// The settings `saved` (trainer.json's "train") records, as flags and the values in effect (long name
// without "--" → value), for --dump-config of a resume.
std::vector<std::pair<std::string, nlohmann::json>> recorded_settings_by_flag(const TrainConfig& config,
                                                                              const nlohmann::json& saved);

// Once the data-parallel size `dp` is known: a micro-batch taken from the checkpoint (not given) that
// does not split the run's global batch over `dp` ranks (a resume on more ranks) becomes the largest
// one that does; the batch at each step stays the run's, only its split changes, named in
// resumed_settings in the checkpoint's value's place. Throws InputError naming the checkpoint when none
// does, and for an MoE `model`, which routes each micro-batch on its own (another split would train
// another model: the user gives --micro-batch).
void fit_resumed_micro_batch(TrainConfig& config, int dp, const ModelConfig& model);

// "" when a resume's model (`asked`: the flags, after the checkpoint's values were taken for those
// not given) is checkpoint `checkpoint`'s (`saved`); else one line naming what differs, for the
// trainer and lattice launch to refuse with: the fields by name ("its hidden 64 where the flags ask for
// 128"); dense against MoE, or another expert count, alone (the other MoE values follow from it);
// a vocabulary not given as the data's tokenizer's (`vocab_given`).
std::string resumed_model_difference(const ModelConfig& saved, const ModelConfig& asked, const std::string& checkpoint,
                                     bool vocab_given);

}  // namespace lattice
