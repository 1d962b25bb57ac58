// `lattice train`: train a GPT model on a prepared token directory.
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "cli/model_flags.hpp"
#include "comm/distributed.hpp"
#include "comm/fault.hpp"
#include "core/error.hpp"
#include "train/trainer.hpp"

namespace lattice::cli {

int run_train(int argc, char** argv) {
  CLI::App app("Train a GPT-2 style model (Megatron-LM flag names are accepted as aliases).", "lattice train");
  ModelConfig model;
  LayoutFlags layout;
  TrainConfig train;
  std::string shuffle = "on";
  add_model_flags(app, model);
  add_layout_flags(app, layout);
  add_train_flags(app, train, shuffle);
  std::string config_path;
  add_config_file(app, config_path);
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  train.shuffle = shuffle == "on";
  train.seed_given = app.count("--seed") > 0;
  train.zero_prefetch_given = app.count("--zero-prefetch") > 0;
  LayoutConfig resolved;
  try {
    resolved = layout.resolve(model.layers);
  } catch (const InputError&) {
    // Every rank parses the same flags before any communicator exists: rank 0 alone reports.
    if (comm::started_by_launcher() && comm::launcher_rank() != 0) return 1;
    throw;
  }
  if (!comm::started_by_launcher() && resolved.tp == 1 && resolved.pp == 1 && resolved.ep == 1) {
    Trainer trainer(model, resolved, train);
    return trainer.run();
  }
  // Several processes: bad input is reported once, by rank 0, and every rank exits 1; a rank that
  // fails later aborts the whole job.
  // A bad --comm-timeout is reported by the validation below, once; the watchdog runs meanwhile.
  comm::Distributed dist(resolved.tp, resolved.pp, "train",
                         valid_comm_timeout(train.comm_timeout) ? train.comm_timeout : comm::kDefaultCommTimeout,
                         resolved.ep);
  std::unique_ptr<Trainer> trainer;
  const std::string settings = app.config_to_str(/*default_also=*/true, /*write_description=*/false);
  comm::check_on_all_ranks("train", [&] {
    // Before anything sized by the configuration: ranks that disagree would fail or hang elsewhere.
    comm::require_same_configuration(settings);
    trainer = std::make_unique<Trainer>(model, resolved, train, &dist);
  });
  return comm::run_or_abort_all("train", [&] { return trainer->run(); });
}

}  // namespace lattice::cli
