// `lattice sample`: generate text from a checkpoint (temperature, top-k).
#include <algorithm>
#include <cmath>
#include <string_view>
#include <filesystem>
#include <cstdio>
#include <numeric>
#include <optional>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "backend/device_ops.hpp"
#include "cli/device_support.hpp"
#include "cli/model_flags.hpp"
#include "cli/model_source.hpp"
#include "core/error.hpp"
#include "core/pinned_path.hpp"
#include "core/standard_output.hpp"
#include "data/tokenizer_files.hpp"
#include "random/philox.hpp"

namespace lattice::cli {

namespace {
// Draws from probs restricted to the top_k most likely, sharpened by temperature. In log space, the
// most likely token weighing 1: as the temperature tends to 0 this tends to greedy decoding (no
// underflow to 0/0), and top-k 1 is greedy.
int draw_token(const std::vector<float>& probs, double temperature, int top_k, double u) {
  for (float p : probs) require(std::isfinite(p), "the model's next-token probabilities are not finite (NaN weights?)");
  std::vector<int> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = top_k > 0 ? std::min(size_t(top_k), order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                    [&](int a, int b) { return probs[size_t(a)] > probs[size_t(b)]; });
  auto log_p = [&](size_t i) { return std::log(std::max(double(probs[size_t(order[i])]), 1e-30)); };
  std::vector<double> w(k);
  for (size_t i = 0; i < k; ++i) w[i] = std::exp((log_p(i) - log_p(0)) / temperature);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);  // >= 1
  double acc = 0.0;
  for (size_t i = 0; i < k; ++i) {
    acc += w[i] / total;
    if (u < acc) return order[i];
  }
  return order[0];  // u within rounding of 1
}
}  // namespace

int run_sample(int argc, char** argv) {
  CLI::App app("Generate text from a checkpoint, with the tokenizer it was trained with.", "lattice sample");
  std::string checkpoint, prompt = "\n";
  int tokens = 200, top_k = 40;
  double temperature = 0.8;
  uint64_t seed = 42;
  ModelConfig model;
  app.add_option("--checkpoint", checkpoint, "checkpoint directory")->required();
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  app.add_option("--tokens", tokens, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature (> 0)")->capture_default_str();
  app.add_option("--top-k", top_k, "sample among the k most likely (0 = all)")->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->check(seed_range())->capture_default_str();
  add_model_flags(app, model);
  app.get_option("--dropout")->group("");  // out of the help: inference runs without it (refused if given)
  std::string device = "cpu";
  add_device_flag(app, device);
  int threads = 0;
  add_threads_flag(app, threads);
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  if (const auto status = refuse_several_ranks("sample")) return *status;
  use_threads(threads);
  require(tokens >= 0 && tokens <= (1 << 24), "--tokens must be between 0 and " + std::to_string(1 << 24));
  require(temperature > 0 && std::isfinite(temperature), "--temperature must be a finite number > 0");
  require(top_k >= 0, "--top-k must be >= 0 (0 = all)");

  select_device(parse_device(device));  // once, before the model is built
  // The model and the tokenizer read from one version of a checkpoint a run may be saving into
  // (core/pinned_path.hpp); let go once both are read.
  std::optional<PinnedPath> pinned_checkpoint(std::in_place, checkpoint);
  auto gpt = load_model_for_inference(checkpoint, app, model, DType::fp32, 1);
  const ModelConfig& c = gpt->config();
  require_device_runs(parse_device(device), c);
  // Expert choice ranks every token of the sequence, future ones included: not a causal model.
  require(!(c.moe.enabled() && c.moe.router == MoERouter::expert_choice),
          "sample cannot generate with an expert-choice MoE model: its routing sees future tokens "
          "(score it with lattice eval instead)");
  // The checkpoint's tokenizer (a weights file alone: bytes); its ids must be the model's.
  const data::Tokenizer tokenizer = checkpoint_tokenizer(checkpoint, c.vocab);
  std::error_code ec;
  const bool a_directory = std::filesystem::is_directory(pinned_path(checkpoint), ec);
  pinned_checkpoint.reset();
  require(a_directory || c.vocab == data::Tokenizer::kByteVocab,
          "a weights file carries no tokenizer: sample decodes it as bytes only with a vocabulary of 256 (give the "
          "checkpoint directory, which records its tokenizer)");
  require(tokenizer.kind() != data::TokenizerKind::none,
          "checkpoint " + checkpoint + " was trained on token files without a tokenizer (" + std::to_string(c.vocab) +
              " ids, as llm.c's): sample has no tokenizer to turn a prompt into its ids or its ids into text (lattice "
              "eval scores it)");
  require(c.vocab >= tokenizer.vocab(), "the model's vocabulary (" + std::to_string(c.vocab) + ") is smaller than its " +
                                            data::to_string(tokenizer.kind()) + " tokenizer's (" +
                                            std::to_string(tokenizer.vocab()) + ")");
  std::vector<int32_t> ids;
  for (uint16_t t : tokenizer.encode(prompt)) ids.push_back(int32_t(t));
  require(!ids.empty(), "--prompt must not be empty");
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  const DropoutStream stream{seed, 0, 0, DropoutSite::init};
  // Shown as decoded so far: a piece may end inside a character (byte fallback), whose replacement
  // mark is held back until the next piece completes it.
  std::vector<int> generated;
  std::string shown;
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  // The text of everything generated, decoded from the last point where all of it was shown (`base`
  // tokens, `base_shown` bytes) with kContext tokens before it for the decoder's context (a character
  // split over byte pieces, a piece's leading space): each step decodes a few tokens, not all of them
  // (that made a long sample quadratic). Where the window's text does not extend its context's, the
  // whole sequence is decoded, as it was.
  constexpr size_t kContext = 16;
  size_t base = 0, base_shown = 0;
  const auto text_so_far = [&] {
    const size_t from = base > kContext ? base - kContext : 0;
    if (from == 0) return tokenizer.decode(generated);
    const std::vector<int> window(generated.begin() + std::ptrdiff_t(from), generated.end());
    const std::vector<int> context(generated.begin() + std::ptrdiff_t(from), generated.begin() + std::ptrdiff_t(base));
    const std::string t = tokenizer.decode(window), c = tokenizer.decode(context);
    if (t.compare(0, c.size(), c) != 0) return tokenizer.decode(generated);
    return shown.substr(0, base_shown) + t.substr(c.size());
  };
  for (int i = 0; i < tokens; ++i) {
    const int64_t len = std::min<int64_t>(int64_t(ids.size()), c.seq_len);
    auto probs = gpt->next_token_probs(ids.data() + ids.size() - size_t(len), len);
    probs.resize(size_t(tokenizer.vocab()));  // rows past the tokenizer's are never a token
    const double u = double(philox_bits(stream, uint64_t(i))) / 4294967296.0;
    const int next = draw_token(probs, temperature, top_k, u);
    ids.push_back(next);
    generated.push_back(next);
    std::string text = text_so_far();
    const size_t whole = text.size();
    while (text.size() >= kReplacement.size() && text.ends_with(kReplacement)) text.resize(text.size() - 3);
    const bool held_back = text.size() != whole;
    if (!held_back && text == shown) base = generated.size(), base_shown = shown.size();
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      // fwrite, not fputs: a byte model's text may hold NUL bytes.
      std::fwrite(text.data() + shown.size(), 1, text.size() - shown.size(), stdout);
      shown = std::move(text);
      if (!held_back) base = generated.size(), base_shown = shown.size();  // all of it shown
      if (!standard_output::flush(false)) return 0;  // the reader left (`| head`): nothing more to show
    }
  }
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace lattice::cli
