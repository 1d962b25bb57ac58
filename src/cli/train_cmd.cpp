// `lattice train`: train a GPT model on a prepared token directory.
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "cli/model_flags.hpp"
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
  add_config_file(app);
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  train.shuffle = shuffle == "on";
  Trainer trainer(model, layout.resolve(), train);
  return trainer.run();
}

}  // namespace lattice::cli
