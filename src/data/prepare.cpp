#include "data/prepare.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer.hpp"
#include "data/tokenizer_files.hpp"
#include "core/atomic_dir.hpp"

namespace fs = std::filesystem;

namespace lattice::data {
namespace {

constexpr size_t kMinValTokens = 2;  // one input and its target

std::string read_text(const std::string& path) {
  std::string text = read_regular_file(path, "input", size_t(16) << 30);
  require(!text.empty(), "input " + path + " is empty");
  return text;
}

}  // namespace

namespace {
PrepareStats write_corpus(const std::string& text, const std::string& input_text_path, const std::string& out_dir,
                          const Tokenizer& tokenizer);
}  // namespace

PrepareStats prepare_corpus(const std::string& input_text_path, const std::string& out_dir, TokenizerKind kind,
                            int vocab) {
  const std::string text = read_text(input_text_path);
  return write_corpus(text, input_text_path, out_dir,
                      kind == TokenizerKind::bytes ? Tokenizer() : Tokenizer::train(text, kind, vocab));
}

PrepareStats prepare_corpus(const std::string& input_text_path, const std::string& out_dir,
                            const Tokenizer& tokenizer) {
  return write_corpus(read_text(input_text_path), input_text_path, out_dir, tokenizer);
}

namespace {
PrepareStats write_corpus(const std::string& text, const std::string& input_text_path, const std::string& out_dir,
                          const Tokenizer& tokenizer) {
  const TokenizerKind kind = tokenizer.kind();
  const std::vector<uint16_t> tokens = tokenizer.encode(text);
  if (kind != TokenizerKind::bytes) {  // what bits per byte and sampling rely on
    const std::string back = tokenizer.decode(std::vector<int>(tokens.begin(), tokens.end()));
    size_t at = 0;
    while (at < std::min(back.size(), text.size()) && back[at] == text[at]) ++at;
    require(back == text, "the " + std::string(to_string(kind)) + " tokenizer does not reproduce " + input_text_path +
                              " (first difference at byte " + std::to_string(at) + "): SentencePiece reproduces "
                              "UTF-8 text without U+2581; use --tokenizer bytes for other text");
  }

  const size_t train_count = tokens.size() * 9 / 10;
  const size_t val_count = tokens.size() - train_count;
  require(val_count >= kMinValTokens,
          "input " + input_text_path + " is too small: " + std::to_string(tokens.size()) + " tokens leave " +
              std::to_string(val_count) + " for val.bin (need at least " + std::to_string(kMinValTokens) +
              ")");

  std::error_code ec;
  // The directories made for it are removed again if the writes fail (a full disk left an empty tree).
  const std::vector<std::string> made = make_dirs_noting(out_dir, ec);
  require(!ec && fs::is_directory(out_dir),
          "cannot create output directory " + out_dir + (ec ? ": " + ec.message() : ": not a directory"));
  const std::vector<uint16_t> train(tokens.begin(),
                                    tokens.begin() + static_cast<std::ptrdiff_t>(train_count));
  const std::vector<uint16_t> val(tokens.begin() + static_cast<std::ptrdiff_t>(train_count), tokens.end());
  DataSizes sizes;
  sizes.train = {int64_t(train_count), int64_t(tokenizer.decode(std::vector<int>(train.begin(), train.end())).size())};
  sizes.val = {int64_t(val_count), int64_t(text.size()) - sizes.train.bytes};
  // Every file written and synced before any replaces its old version: a full disk or a kill while
  // writing leaves the previous set as it was, never a new train.bin beside an old val.bin.
  // A bytes prepare records no tokenizer.model: one an earlier SentencePiece prepare left here (its
  // tokenizer.json named one) goes, and one no tokenizer.json of ours named (the user's, let stand
  // by --overwrite) stays: --overwrite lets outputs replace files, and this prepare writes none there.
  bool earlier_model = false;
  if (kind == TokenizerKind::bytes) {
    std::ifstream in(fs::path(out_dir) / kTokenizerJson);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    earlier_model = j.is_object() && j.contains("kind") && j["kind"].is_string() &&
                    (j["kind"] == "bpe" || j["kind"] == "unigram");
  }
  const auto write_all = [&] {  // the staged files' temporaries are gone when it returns or throws
    std::vector<std::unique_ptr<AtomicFile>> staged;
    staged.push_back(stage_token_file((fs::path(out_dir) / "train.bin").string(), train));
    staged.push_back(stage_token_file((fs::path(out_dir) / "val.bin").string(), val));
    std::vector<NamedFile> files = tokenizer_files(tokenizer);
    files.push_back({kDataJson, data_sizes_json(sizes)});
    for (const NamedFile& f : files) {
      staged.push_back(std::make_unique<AtomicFile>((fs::path(out_dir) / f.name).string()));
      staged.back()->write(f.contents.data(), f.contents.size());
      staged.back()->sync();
    }
    for (auto& f : staged) f->commit();
  };
  try {
    write_all();
  } catch (...) {
    remove_empty_dirs(made);
    throw;
  }
  if (earlier_model) fs::remove(fs::path(out_dir) / kTokenizerModel, ec);
  return {train_count, val_count, text.size(), tokenizer.vocab()};
}
}  // namespace

}  // namespace lattice::data
