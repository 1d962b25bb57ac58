// Fuzz target: `lattice train --config FILE.toml`, through the calls train_cmd.cpp makes:
// add_model_flags, add_layout_flags, add_train_flags, add_config_file, parse_flags (which reads
// the file), then LayoutFlags::resolve and ModelConfig::validate. parse_flags answers bad input
// with one stderr line and an exit status (run.sh closes the target's stdout and stderr: libFuzzer
// and the sanitizers still report); an InputError from resolve/validate is exit 1.
#include "cli/cli_util.hpp"
#include "cli/model_flags.hpp"
#include "fuzz_util.hpp"

using namespace lattice;

namespace {

// add_config_file(app) (CLI11's own reader) or add_config_file(app, path) (lattice's reader,
// called by parse_flags): whichever src/cli/model_flags.hpp declares.
template <class App>
auto add_config(App& app, std::string& path, int) -> decltype(cli::add_config_file(app, path), void()) {
  cli::add_config_file(app, path);
}
template <class App>
void add_config(App& app, std::string&, long) {
  cli::add_config_file(app);
}

// One App for the whole run (making ~60 options per input would be most of the time): CLI11
// clears its results when parse runs again, and the values are reset to their defaults here.
struct Flags {
  CLI::App app{"fuzz", "lattice train"};
  ModelConfig model;
  cli::LayoutFlags layout;
  TrainConfig train;
  std::string shuffle = "on", config_path;
  Flags() {
    cli::add_model_flags(app, model);
    cli::add_layout_flags(app, layout);
    cli::add_train_flags(app, train, shuffle);
    add_config(app, config_path, 0);
  }
  void reset() {
    model = ModelConfig{};
    layout = cli::LayoutFlags{};
    train = TrainConfig{};
    shuffle = "on";
    config_path.clear();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch() + "/config.toml";
  static Flags* const flags = new Flags;  // never freed: no static destructor order to mind
  fuzz::write_file(path, data, size);
  flags->reset();
  std::string args[] = {"train", "--config", path};
  char* argv[] = {args[0].data(), args[1].data(), args[2].data()};
  fuzz::accepts([&] {
    if (cli::parse_flags(flags->app, 3, argv)) return;  // --help, or a usage error reported
    (void)flags->app.config_to_str(/*default_also=*/true, /*write_description=*/false);
    flags->layout.resolve(flags->model.layers);
    flags->model.validate();
  });
  return 0;
}
