// `lattice prepare --input TEXT --out DIR`: tokenize a corpus into DIR/train.bin and DIR/val.bin.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/output_path.hpp"
#include "data/prepare.hpp"
#include "data/tokenizer_files.hpp"

namespace lattice::cli {
namespace {

// 3870000 -> "3,870,000": token counts are read by people.
std::string with_thousands(size_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

int run_prepare(int argc, char** argv) {
  CLI::App app(
      "Tokenize a text corpus into train.bin (first 90%) and val.bin (last 10%) in llm.c's token format: "
      "byte tokens (vocab 256), or a SentencePiece BPE or unigram model trained on the corpus.",
      "lattice prepare");
  std::string input, out_dir, tokenizer = "bytes";
  int vocab = 0;
  app.add_option("--input", input, "text file to tokenize")->required();
  app.add_option("--out", out_dir, "output directory (created if needed)")->required();
  app.add_option("--tokenizer", tokenizer, "bytes | bpe | unigram (SentencePiece, trained on the input)")
      ->capture_default_str();
  app.add_option("--vocab-size", vocab, "bpe and unigram: pieces in the vocabulary (at least 300, at most 65536)");
  std::string tokenizer_from;
  app.add_option("--tokenizer-from", tokenizer_from,
                 "use the tokenizer of this data or checkpoint directory instead of training one (fine-tuning)");
  bool overwrite = false;
  add_overwrite_flag(app, overwrite);
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  // Before the tokenizer is trained (minutes on a large corpus): --out must be new, empty, or a
  // prepared-data directory of lattice's, and none of its files an input (core/output_path.hpp).
  check_output_path(out_dir, OutputKind::data_dir, "--out",
                    {overwrite, {{"--input", input}, {"--tokenizer-from", tokenizer_from}}, {}});
  // Held until the files are written, as --save and --report-dir are: two prepares into one
  // directory could leave one's train.bin beside the other's tokenizer.
  const DirLock lock(out_dir, "--out");
  if (!tokenizer_from.empty()) {
    require(app.count("--tokenizer") == 0 && app.count("--vocab-size") == 0,
            "--tokenizer-from takes the tokenizer as it is: --tokenizer and --vocab-size do not apply");
    require(std::filesystem::is_directory(tokenizer_from), "--tokenizer-from " + tokenizer_from + " is not a directory");
    // Without tokenizer.json a directory is read as the byte tokenizer's (lattice's data and checkpoints
    // from before tokenizers were recorded): only when it is one of those, not any directory at all.
    std::error_code ec;
    bool known = false;
    for (const char* name : {"tokenizer.json", "train.bin", "val.bin", "trainer.json"})
      known = known || std::filesystem::exists(std::filesystem::path(tokenizer_from) / name, ec);
    require(known, "--tokenizer-from " + tokenizer_from + " holds no tokenizer: it is neither a prepared-data directory "
                   "(tokenizer.json, train.bin) nor a checkpoint (trainer.json)");
    const data::Tokenizer given = data::load_tokenizer(tokenizer_from);
    require(given.kind() != data::TokenizerKind::none,
            "--tokenizer-from " + tokenizer_from + " records no tokenizer lattice has (its run trained on token files "
            "without one): there is none to encode the text with");
    const data::PrepareStats stats = data::prepare_corpus(input, out_dir, given);
    std::fprintf(stderr, "prepared %s: the %s tokenizer of %s (%s); train.bin %s tokens, val.bin %s tokens\n",
                 out_dir.c_str(), data::to_string(given.kind()), tokenizer_from.c_str(), given.fingerprint().c_str(),
                 with_thousands(stats.train_tokens).c_str(), with_thousands(stats.val_tokens).c_str());
    return 0;
  }
  const data::TokenizerKind kind = data::parse_tokenizer_kind(tokenizer);
  if (kind == data::TokenizerKind::bytes) {
    require(vocab == 0 || vocab == data::Tokenizer::kByteVocab, "--vocab-size applies to --tokenizer bpe|unigram "
                                                                "(the byte tokenizer's vocabulary is 256)");
    vocab = data::Tokenizer::kByteVocab;
  } else {
    // Byte fallback takes 256 pieces and the unknown piece one: the rest are learned.
    require(vocab >= 300 && vocab <= 65536, "--tokenizer " + tokenizer +
                                                " needs --vocab-size between 300 and 65536 (token files hold uint16)");
  }

  const data::PrepareStats stats = data::prepare_corpus(input, out_dir, kind, vocab);
  const std::string fewer = stats.vocab < vocab ? " (of " + std::to_string(vocab) + " asked: the text holds no more)" : "";
  std::fprintf(stderr, "prepared %s: %s tokenizer, vocab %d%s; train.bin %s tokens, val.bin %s tokens (%.2f bytes a "
               "token)\n", out_dir.c_str(), tokenizer.c_str(), stats.vocab, fewer.c_str(),
               with_thousands(stats.train_tokens).c_str(),
               with_thousands(stats.val_tokens).c_str(),
               double(stats.bytes) / double(stats.train_tokens + stats.val_tokens));
  return 0;
}

}  // namespace lattice::cli
