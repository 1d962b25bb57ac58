// The training settings a resume continues (train/resume_settings.hpp): one table of what trainer.json
// records, read by the save and by the resume.
#include "train/resume_settings.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"

namespace lattice {

namespace {

enum class Change {
  free,           // a resume may change it: where the run stops, how a batch is split
  with_override,  // the schedule's and optimizer's hyperparameters: with --override-schedule
  never,          // the data order (the batch at a step) and the optimizer's states
};

struct Setting {
  const char* flag;  // the long flag name, without "--"
  const char* key;   // in trainer.json's "train"
  Change change;
  std::function<nlohmann::json(const TrainConfig&)> get;
  std::function<void(TrainConfig&, const nlohmann::json&)> set;
  std::function<bool(const nlohmann::json&)> recorded_well;  // the value's type and range
};

// `valid`: the values the flag takes (train/validate.cpp's ranges), so that a checkpoint's bad value is
// named as the checkpoint's, not as a flag the user did not give.
template <class T, class Field>
Setting setting(const char* flag, const char* key, Change change, Field field, std::function<bool(const T&)> valid) {
  return {flag, key, change, [field](const TrainConfig& t) { return nlohmann::json(field(t)); },
          [field](TrainConfig& t, const nlohmann::json& v) { field(t) = v.get<T>(); },
          [valid](const nlohmann::json& v) {
            if constexpr (std::is_same_v<T, std::string>) {
              return v.is_string() && valid(v.get<std::string>());
            } else if constexpr (std::is_integral_v<T>) {
              if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
                return false;
              const int64_t x = v.get<int64_t>();
              return x >= int64_t(std::numeric_limits<T>::min()) && x <= int64_t(std::numeric_limits<T>::max()) &&
                     valid(T(x));
            } else {
              return v.is_number() && std::isfinite(v.get<double>()) && valid(v.get<double>());
            }
          }};
}

template <class T>
std::function<bool(const T&)> between(T lo, T hi) {
  return [lo, hi](const T& x) { return x >= lo && x <= hi; };
}
std::function<bool(const std::string&)> one_of(std::vector<std::string> names) {
  return [names](const std::string& x) { return std::find(names.begin(), names.end(), x) != names.end(); };
}
constexpr int64_t kMaxSteps = int64_t(1) << 40;
constexpr double kHuge = 1e300;

const std::vector<Setting>& settings() {
  // Every training flag whose value shapes the run after its first step, but the seed and the data's
  // shuffle (checked with the data order, train/trainer.cpp).
  const auto below_one = [](const double& x) { return x >= 0 && x < 1; };
  static const std::vector<Setting> table = {
      setting<int64_t>("steps", "steps", Change::free, [](auto& t) -> auto& { return t.steps; },
                       between<int64_t>(0, kMaxSteps)),
      setting<int>("micro-batch", "micro_batch", Change::free, [](auto& t) -> auto& { return t.micro_batch; },
                   between(1, 1 << 20)),
      setting<int>("global-batch", "global_batch", Change::never, [](auto& t) -> auto& { return t.global_batch; },
                   between(1, 1 << 20)),
      setting<std::string>("optimizer", "optimizer", Change::never, [](auto& t) -> auto& { return t.optim.kind; },
                           one_of({"adamw", "adafactor", "sm3"})),
      setting<double>("lr", "lr", Change::with_override, [](auto& t) -> auto& { return t.lr; }, between(0.0, kHuge)),
      setting<double>("min-lr", "min_lr", Change::with_override, [](auto& t) -> auto& { return t.min_lr; },
                      between(0.0, kHuge)),
      setting<std::string>("lr-schedule", "lr_schedule", Change::with_override,
                           [](auto& t) -> auto& { return t.lr_schedule; }, one_of({"constant", "cosine"})),
      setting<int64_t>("warmup", "warmup", Change::with_override, [](auto& t) -> auto& { return t.warmup; },
                       between<int64_t>(0, kMaxSteps)),
      setting<double>("beta1", "beta1", Change::with_override, [](auto& t) -> auto& { return t.optim.beta1; },
                      below_one),
      setting<double>("beta2", "beta2", Change::with_override, [](auto& t) -> auto& { return t.optim.beta2; },
                      below_one),
      setting<double>("eps", "eps", Change::with_override, [](auto& t) -> auto& { return t.optim.eps; },
                      [](const double& x) { return x > 0; }),
      setting<double>("weight-decay", "weight_decay", Change::with_override,
                      [](auto& t) -> auto& { return t.optim.weight_decay; }, between(0.0, kHuge)),
      setting<double>("clip-grad", "clip_grad", Change::with_override, [](auto& t) -> auto& { return t.clip_grad; },
                      between(0.0, kHuge)),
      setting<int64_t>("loss-scale-window", "loss_scale_window", Change::with_override,
                       [](auto& t) -> auto& { return t.loss_scale_window; }, between<int64_t>(1, kMaxSteps)),
      // fp16: the scale the run started at; a resume goes on from the scale it reached (a given other
      // value is refused by the flag rules, which know whether the checkpoint holds that state).
      setting<double>("initial-loss-scale", "initial_loss_scale", Change::free,
                      [](auto& t) -> auto& { return t.initial_loss_scale; }, between(1.0, 4294967296.0)),
  };
  return table;
}

std::string text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

nlohmann::json training_settings_json(const TrainConfig& config) {
  nlohmann::json out = nlohmann::json::object();
  for (const Setting& s : settings()) out[s.key] = s.get(config);
  out["decay_steps"] = config.decay_steps;  // the cosine's last step (a resume that runs past it holds --min-lr)
  return out;
}

std::vector<std::pair<std::string, nlohmann::json>> recorded_settings_by_flag(const TrainConfig& config,
                                                                              const nlohmann::json& saved) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const Setting& s : settings())
    if (saved.is_object() && saved.contains(s.key)) out.emplace_back(s.flag, s.get(config));
  return out;
}

std::string resume_training_settings(TrainConfig& config, const nlohmann::json& saved, const std::string& checkpoint) {
  const std::string where = "checkpoint " + checkpoint + "/trainer.json";
  if (!saved.is_object()) {
    require(saved.is_null(), where + ": \"train\" must be an object (got " + saved.dump() + ")");
    return "";
  }
  auto given = [&](const char* flag) {
    return std::find(config.given_settings.begin(), config.given_settings.end(), flag) != config.given_settings.end();
  };
  std::string taken;
  for (const Setting& s : settings()) {
    if (!saved.contains(s.key)) continue;  // not recorded: an older checkpoint
    const nlohmann::json& theirs = saved[s.key];
    require(s.recorded_well(theirs), where + ": \"train\": \"" + s.key + "\" = " + theirs.dump() +
                                         " is not a value of --" + s.flag + " (a damaged checkpoint)");
    const nlohmann::json mine = s.get(config);
    if (!given(s.flag)) {  // named where the flag's default would have differed: what the resume changed
      const bool derived = std::string(s.key) == "global_batch" && mine == 0 && theirs == config.micro_batch;
      if (mine != theirs && !derived)
        taken += std::string(taken.empty() ? "" : " ") + "--" + s.flag + " " + text(theirs);
      s.set(config, theirs);
      continue;
    }
    if (mine == theirs || s.change == Change::free || (s.change == Change::with_override && config.override_schedule))
      continue;
    const std::string head = "--" + std::string(s.flag) + " " + text(mine) + " differs from checkpoint " + checkpoint +
                             "'s " + text(theirs) + ": ";
    if (s.change == Change::never)
      fail(head + (std::string(s.key) == "optimizer" ? "its states are " + text(theirs) + "'s"
                                                     : std::string("a resume continues the run's data order")) +
           " (leave --" + s.flag + " out to keep it)");
    fail(head + "a resume continues the run's schedule and optimizer (leave --" + s.flag +
         " out to keep it, or add --override-schedule to train on with the given values)");
  }
  require(config.min_lr <= config.lr || given("min-lr") || given("lr"),
          where + ": \"train\" holds a min_lr above its lr (a damaged checkpoint)");
  // SM3 saved without momentum (β1 0) has no momentum state to go on from.
  if (config.optim.kind == "sm3" && saved.contains("beta1") && saved["beta1"] == 0.0 && config.optim.beta1 != 0)
    fail("--beta1 " + text(nlohmann::json(config.optim.beta1)) + ": checkpoint " + checkpoint +
         "'s SM3 run kept no momentum (--beta1 0), so none can go on; resume it with --beta1 0");
  // A given flag the resumed settings make meaningless (the flag rules saw the defaults): another
  // optimizer's hyperparameters, a cosine's floor on a constant schedule.
  const std::string& optimizer = config.optim.kind;
  for (const char* f : {"beta1", "beta2", "eps"})
    require(optimizer == "adamw" || !given(f) || (optimizer == "sm3" && std::string(f) == "beta1"),
            "--" + std::string(f) + " does not apply to checkpoint " + checkpoint + "'s --optimizer " + optimizer);
  require(config.lr_schedule == "cosine" || !given("min-lr"),
          "--min-lr applies to --lr-schedule cosine only (checkpoint " + checkpoint + "'s is " + config.lr_schedule +
              ")");
  // The cosine's last step: the run's own, so a longer --steps holds --min-lr past it rather than
  // stretching the curve (a jump of the learning rate); --override-schedule decays to the new --steps.
  // 0: a run of --steps 0 (its initial weights saved) has no curve yet; the resumed run's --steps sets it.
  if (saved.contains("decay_steps") && !config.override_schedule) {
    const nlohmann::json& d = saved["decay_steps"];
    require(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= (int64_t(1) << 62),
            where + ": \"train\": \"decay_steps\" = " + d.dump() + " is not a step count");
    if (d.get<int64_t>() > 0) config.decay_steps = d.get<int64_t>();
  }
  return taken;
}

void fit_resumed_micro_batch(TrainConfig& config, int dp, const ModelConfig& model) {
  const auto& given = config.given_settings;
  // A --resume that holds no checkpoint is the trainer's to name, not its batch.
  if (!checkpoint::holds_trainer_state(config.resume) || config.global_batch <= 0 || dp < 1 ||
      std::find(given.begin(), given.end(), "micro-batch") != given.end() ||
      config.global_batch % (int64_t(config.micro_batch) * dp) == 0)
    return;
  // An MoE model routes each micro-batch on its own (capacity, groups, the auxiliary losses): another
  // split would train another model, so it is the user's to choose.
  require(!model.moe.enabled(), "checkpoint " + config.resume + "'s --micro-batch " + std::to_string(config.micro_batch) +
                                    " does not split its global batch over " + std::to_string(dp) +
                                    " data-parallel ranks, and an MoE model routes each micro-batch on its own "
                                    "(capacity, groups, auxiliary losses): give --micro-batch to choose the split");
  for (int m = config.micro_batch - 1; m >= 1; --m)
    if (config.global_batch % (int64_t(m) * dp) == 0) {
      // In the checkpoint's value's place on the start line, where it was taken.
      const std::string taken = "--micro-batch " + std::to_string(config.micro_batch);
      const std::string fitted = "--micro-batch " + std::to_string(m) + " (its " + std::to_string(config.micro_batch) +
                                 " does not split its global batch over " + std::to_string(dp) +
                                 " data-parallel ranks)";
      std::string& line = config.resumed_settings;
      size_t at = line.find(taken);
      while (at != std::string::npos && at + taken.size() < line.size() && line[at + taken.size()] != ' ')
        at = line.find(taken, at + 1);  // "--micro-batch 4" is not "--micro-batch 48"
      if (at != std::string::npos) line.replace(at, taken.size(), fitted);
      else line += std::string(line.empty() ? "" : " ") + fitted;
      config.micro_batch = m;
      return;
    }
  fail("checkpoint " + config.resume + "'s --global-batch " + std::to_string(config.global_batch) +
       " does not split over " + std::to_string(dp) + " data-parallel ranks: resume on a data-parallel size that divides it");
}

std::string resumed_model_difference(const ModelConfig& saved_config, const ModelConfig& asked_config,
                                     const std::string& checkpoint, bool vocab_given) {
  const nlohmann::json saved = checkpoint::model_config_json(saved_config),
                       asked = checkpoint::model_config_json(asked_config);
  if (saved == asked) return "";
  std::string differ;
  const auto add = [&](const std::string& what) { differ += (differ.empty() ? "" : "; ") + what; };
  const auto compare = [&](const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix) {
    for (const auto& [key, value] : a.items()) {
      if (value.is_object() || (b.contains(key) && b[key] == value)) continue;
      const std::string theirs = b.contains(key) ? b[key].dump() : std::string("none");
      add("its " + prefix + key + " " + value.dump() +
          (key == "vocab" && !vocab_given ? " where the data's tokenizer has " + theirs + " (give --vocab " + value.dump() + ")"
                                          : " where the flags ask for " + theirs));
    }
  };
  if (saved.contains("moe") != asked.contains("moe"))
    add(saved.contains("moe") ? "experts (MoE) where the flags ask for a dense model"
                              : "a dense model where the flags ask for experts (MoE)");
  else if (saved.contains("moe") && saved["moe"]["experts"] != asked["moe"]["experts"])
    add("its experts " + saved["moe"]["experts"].dump() + " where the flags ask for " + asked["moe"]["experts"].dump());
  else if (saved.contains("moe"))
    compare(saved["moe"], asked["moe"], "moe ");
  compare(saved, asked, "");
  return "checkpoint " + checkpoint + " holds another model: " + differ +
         " (a resume takes the run's model: leave out the flags that differ)";
}

}  // namespace lattice
