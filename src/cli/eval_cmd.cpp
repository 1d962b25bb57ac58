// `lattice eval`: mean cross-entropy of a checkpoint on a token file.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "backend/device_ops.hpp"
#include "cli/device_support.hpp"
#include "cli/model_flags.hpp"
#include "cli/model_source.hpp"
#include "core/error.hpp"
#include "core/pinned_path.hpp"
#include "data/loader.hpp"
#include "data/tokenizer_files.hpp"
#include "report/step_report.hpp"

namespace lattice::cli {

int run_eval(int argc, char** argv) {
  CLI::App app("Evaluate a checkpoint on a token file (llm.c format).", "lattice eval");
  std::string checkpoint, data_file;
  int64_t batches = 8;
  int micro_batch = 8;
  bool json = false;
  ModelConfig model;
  app.add_option("--checkpoint", checkpoint, "checkpoint directory (or model.safetensors / llm.c .bin with shape flags)")
      ->required();
  app.add_option("--data", data_file, "token file, e.g. data/val.bin")->required();
  app.add_option("--batches,--eval-iters", batches,
                 "micro-batches to evaluate (default 8, or all the file holds if fewer; never wraps around)")
      ->capture_default_str();
  app.add_option("--micro-batch,--micro-batch-size", micro_batch, "sequences per micro-batch")->capture_default_str();
  add_model_flags(app, model);
  app.get_option("--dropout")->group("");  // out of the help: inference runs without it (refused if given)
  std::string device = "cpu";
  add_device_flag(app, device);
  int threads = 0;
  add_threads_flag(app, threads);
  app.add_flag("--json", json, "print {\"event\":\"eval\",...} on stdout");
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  if (const auto status = refuse_several_ranks("eval")) return *status;
  use_threads(threads);
  require(batches >= 1 && batches <= (int64_t(1) << 30), "--batches must be between 1 and 2^30");
  require(micro_batch >= 1 && micro_batch <= (1 << 20), "--micro-batch must be between 1 and 2^20");

  select_device(parse_device(device));  // once, before the model is built
  // The model and the tokenizer read from one version of a checkpoint a run may be saving into
  // (core/pinned_path.hpp); let go once both are read.
  std::optional<PinnedPath> pinned_checkpoint(std::in_place, checkpoint);
  auto gpt = load_model_for_inference(checkpoint, app, model, DType::fp32, micro_batch);
  const ModelConfig& c = gpt->config();
  require_device_runs(parse_device(device), c);
  // The tokens must be the checkpoint's tokenizer's: a data directory that records another is refused.
  const std::string data_dir = std::filesystem::path(data_file).parent_path().string();
  require(!std::filesystem::is_directory(data_file),
          "--data " + data_file + " is a directory: eval scores one token file (" +
              (std::filesystem::path(data_file) / "val.bin").string() + ")");
  const data::Tokenizer tokenizer = checkpoint_tokenizer(checkpoint, c.vocab);
  pinned_checkpoint.reset();
  // A directory that records no tokenizer holds byte tokens, or ids of a tokenizer not known above
  // vocabulary 256 (docs/design.md §15), which no other is held to.
  const data::Tokenizer of_data = data::tokens_tokenizer(data_dir.empty() ? "." : data_dir, c.vocab);
  require(data::same_tokens(of_data, tokenizer), data_file + " holds tokens of " + of_data.fingerprint() + ", but " +
                                                     checkpoint + " was trained with " + tokenizer.fingerprint());
  const auto file = data::TokenFile::load(data_file, c.vocab);
  const data::BatchLoader loader(file, c.seq_len, micro_batch, 0, false);
  // Past the file's windows the loader wraps to its start: those tokens would be counted twice.
  const int64_t held = loader.windows() / micro_batch;
  require(held >= 1, data_file + " holds " + std::to_string(loader.windows()) + " sequences of " +
                         std::to_string(c.seq_len) + " tokens, fewer than one --micro-batch of " +
                         std::to_string(micro_batch) + " (lower --micro-batch)");
  const bool capped = batches > held;
  if (capped) {
    require(app.count("--batches") == 0,
            "--batches " + std::to_string(batches) + " is more than " + data_file + " holds: " + std::to_string(held) +
                " batches of " + std::to_string(micro_batch) + " sequences of " + std::to_string(c.seq_len) +
                " tokens (more would wrap around and count tokens twice)");
    batches = held;  // the default: the whole file, said in the result line
  }
  std::vector<int32_t> inputs(size_t(micro_batch * c.seq_len)), targets(inputs.size());
  double sum = 0.0;
  for (int64_t k = 0; k < batches; ++k) {
    loader.fill(k, 0, micro_batch, inputs.data(), targets.data());
    sum += gpt->forward_loss({inputs.data(), targets.data(), micro_batch, 0});
  }
  const int64_t tokens = batches * micro_batch * c.seq_len;
  const double loss = sum / double(tokens);
  require(std::isfinite(loss), "the weights of " + checkpoint + " give a " + (std::isnan(loss) ? "NaN" : "infinite") +
                                   " loss on " + data_file);
  // Bits per byte from the bytes of text the file's tokens encode (data.json), or for byte tokens.
  const data::DataSizes sizes = data::read_data_sizes(data_dir.empty() ? "." : data_dir);
  const std::string name = std::filesystem::path(data_file).filename().string();
  const bool known = sizes.recorded ? (name == "train.bin" || name == "val.bin")
                                    : of_data.kind() == data::TokenizerKind::bytes;
  const double bpb = data::bits_per_byte(loss, name == "train.bin" ? sizes.train : sizes.val);
  if (json) {
    nlohmann::json j{{"event", "eval"}, {"loss", loss}, {"tokens", tokens}, {"batches", batches}};
    if (known) j["bits_per_byte"] = bpb;
    std::cout << j.dump() << "\n";
  } else {
    // The command's result, on stdout as --json's is (`lattice eval ... > result.txt` keeps it).
    char line[64];
    std::snprintf(line, sizeof line, "eval loss %.4f", loss);
    std::cout << line << bits_per_byte_note(known ? bpb : 0) << " over " << tokens << " tokens of " << data_file
              << (capped ? " (all it holds: fewer than the default 8 batches)" : "") << "\n";
  }
  return 0;
}

}  // namespace lattice::cli
