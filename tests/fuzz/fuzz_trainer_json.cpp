// Fuzz target: a checkpoint's trainer.json through checkpoint::read_trainer_state and
// checkpoint::read_model_config (`lattice train --resume DIR`, `lattice eval/sample --checkpoint
// DIR`). A configuration that is read must be the one the file holds (no value converted, cut or
// taken from a boolean) and one ModelConfig::validate accepts.
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "fuzz_util.hpp"

using namespace lattice;
using namespace lattice::checkpoint;

namespace {

// The file's "model" entry `key` is a number equal to `value`.
void expect_same(const nlohmann::json& model, const char* key, double value) {
  const auto it = model.find(key);
  FUZZ_CHECK(it != model.end());
  FUZZ_CHECK(it->is_number());  // not a boolean, string, ...
  FUZZ_CHECK(it->get<double>() == value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch() + "/checkpoint";
    std::filesystem::create_directories(d);
    // A manifest with no sums: a trainer.json recording lattice_version is refused without one, and
    // the fuzzed file cannot carry its own sum; the fields are what is under test.
    const std::string manifest = R"({"format": "lattice checkpoint", "version": 1, "files": [], "sums": {}})";
    fuzz::write_file(d + "/" + kManifest, reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size());
    return d;
  }();
  fuzz::write_file(dir + "/trainer.json", data, size);
  nlohmann::json state;
  if (!fuzz::accepts([&] { state = read_trainer_state(dir); })) return 0;
  fuzz::accepts([&] {
    const ModelConfig c = read_model_config(dir);
    FUZZ_CHECK(fuzz::accepts([&] { c.validate(); }));
    FUZZ_CHECK(state.is_object() && state.contains("model") && state["model"].is_object());
    const nlohmann::json& m = state["model"];
    expect_same(m, "layers", c.layers);
    expect_same(m, "hidden", c.hidden);
    expect_same(m, "heads", c.heads);
    expect_same(m, "seq_len", c.seq_len);
    expect_same(m, "vocab", c.vocab);
    expect_same(m, "dropout", c.dropout);
  });
  return 0;
}
