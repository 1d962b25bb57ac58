// `lattice prepare --input TEXT --out DIR`: tokenize a corpus into DIR/train.bin and DIR/val.bin.
#include <cstdio>
#include <string>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "data/prepare.hpp"

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
      "Tokenize a text corpus (byte-level, vocab 256) into train.bin (first 90%) and "
      "val.bin (last 10%) in llm.c's token format.",
      "lattice prepare");
  std::string input, out_dir;
  app.add_option("--input", input, "text file to tokenize")->required();
  app.add_option("--out", out_dir, "output directory (created if needed)")->required();
  if (const auto status = parse_flags(app, argc, argv)) return *status;

  const data::PrepareStats stats = data::prepare_corpus(input, out_dir);
  std::fprintf(stderr, "prepared %s: train.bin %s tokens, val.bin %s tokens\n", out_dir.c_str(),
               with_thousands(stats.train_tokens).c_str(), with_thousands(stats.val_tokens).c_str());
  return 0;
}

}  // namespace lattice::cli
