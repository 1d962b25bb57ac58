// The training settings a resume continues (train/resume_settings.hpp): one table of what trainer.json
// records, read by the save and by the resume.
#include "train/resume_settings.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

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

template <class T, class Field>
Setting setting(const char* flag, const char* key, Change change, Field field) {
  return {flag, key, change, [field](const TrainConfig& t) { return nlohmann::json(field(t)); },
          [field](TrainConfig& t, const nlohmann::json& v) { field(t) = v.get<T>(); },
          [](const nlohmann::json& v) {
            if constexpr (std::is_same_v<T, std::string>) {
              return v.is_string();
            } else if constexpr (std::is_integral_v<T>) {
              if (!v.is_number_integer()) return false;
              if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
              return v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                     v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max());
            } else {
              return v.is_number() && std::isfinite(v.get<double>());
            }
          }};
}

const std::vector<Setting>& settings() {
  // Every training flag whose value shapes the run after its first step, but the seed and the data's
  // shuffle (checked with the data order, train/trainer.cpp).
  static const std::vector<Setting> table = {
      setting<int64_t>("steps", "steps", Change::free, [](auto& t) -> auto& { return t.steps; }),
      setting<int>("micro-batch", "micro_batch", Change::free, [](auto& t) -> auto& { return t.micro_batch; }),
      setting<int>("global-batch", "global_batch", Change::never, [](auto& t) -> auto& { return t.global_batch; }),
      setting<std::string>("optimizer", "optimizer", Change::never, [](auto& t) -> auto& { return t.optim.kind; }),
      setting<double>("lr", "lr", Change::with_override, [](auto& t) -> auto& { return t.lr; }),
      setting<double>("min-lr", "min_lr", Change::with_override, [](auto& t) -> auto& { return t.min_lr; }),
      setting<std::string>("lr-schedule", "lr_schedule", Change::with_override,
                           [](auto& t) -> auto& { return t.lr_schedule; }),
      setting<int64_t>("warmup", "warmup", Change::with_override, [](auto& t) -> auto& { return t.warmup; }),
      setting<double>("beta1", "beta1", Change::with_override, [](auto& t) -> auto& { return t.optim.beta1; }),
      setting<double>("beta2", "beta2", Change::with_override, [](auto& t) -> auto& { return t.optim.beta2; }),
      setting<double>("eps", "eps", Change::with_override, [](auto& t) -> auto& { return t.optim.eps; }),
      setting<double>("weight-decay", "weight_decay", Change::with_override,
                      [](auto& t) -> auto& { return t.optim.weight_decay; }),
      setting<double>("clip-grad", "clip_grad", Change::with_override, [](auto& t) -> auto& { return t.clip_grad; }),
      setting<int64_t>("loss-scale-window", "loss_scale_window", Change::with_override,
                       [](auto& t) -> auto& { return t.loss_scale_window; }),
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
    require(s.recorded_well(theirs), where + ": \"train\": \"" + s.key + "\" = " + theirs.dump() + " is not a value of --" +
                                         s.flag);
    const nlohmann::json mine = s.get(config);
    if (!given(s.flag)) {  // named where the flag's default would have differed: what the resume changed
      const bool derived = std::string(s.key) == "global_batch" && mine == 0 && theirs == config.micro_batch;
      if (mine != theirs && !derived) taken += std::string(taken.empty() ? "" : " ") + "--" + s.flag + " " + text(theirs);
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
  // A given flag the resumed settings make meaningless (the flag rules saw the defaults): another
  // optimizer's hyperparameters, a cosine's floor on a constant schedule.
  const std::string& optimizer = config.optim.kind;
  for (const char* f : {"beta1", "beta2", "eps"})
    require(optimizer == "adamw" || !given(f) || (optimizer == "sm3" && std::string(f) == "beta1"),
            "--" + std::string(f) + " does not apply to checkpoint " + checkpoint + "'s --optimizer " + optimizer);
  require(config.lr_schedule == "cosine" || !given("min-lr"),
          "--min-lr applies to --lr-schedule cosine only (checkpoint " + checkpoint + "'s is " + config.lr_schedule + ")");
  // The cosine's last step: the run's own, so a longer --steps holds --min-lr past it rather than
  // stretching the curve (a jump of the learning rate); --override-schedule decays to the new --steps.
  if (saved.contains("decay_steps") && !config.override_schedule) {
    const nlohmann::json& d = saved["decay_steps"];
    require(d.is_number_integer() && d.get<int64_t>() >= 1 && d.get<int64_t>() <= (int64_t(1) << 62),
            where + ": \"train\": \"decay_steps\" = " + d.dump() + " is not a step count");
    config.decay_steps = d.get<int64_t>();
  }
  return taken;
}

}  // namespace lattice
