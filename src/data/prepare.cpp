#include "data/prepare.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.hpp"
#include "data/token_file.hpp"
#include "data/tokenizer.hpp"

namespace fs = std::filesystem;

namespace lattice::data {
namespace {

constexpr size_t kMinValTokens = 2;  // one input and its target

std::string read_text(const std::string& path) {
  std::error_code ec;
  require(fs::exists(path, ec), "input " + path + " does not exist");
  require(fs::is_regular_file(path, ec), "input " + path + " is not a regular file (a directory, device or pipe)");
  std::ifstream in(path, std::ios::binary);
  require(in.good(), "cannot open input " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(!in.bad(), "cannot read input " + path);
  return text;
}

}  // namespace

PrepareStats prepare_corpus(const std::string& input_text_path, const std::string& out_dir) {
  const std::string text = read_text(input_text_path);
  require(!text.empty(), "input " + input_text_path + " is empty");
  const std::vector<uint16_t> tokens = ByteTokenizer().encode(text);

  const size_t train_count = tokens.size() * 9 / 10;
  const size_t val_count = tokens.size() - train_count;
  require(val_count >= kMinValTokens,
          "input " + input_text_path + " is too small: " + std::to_string(tokens.size()) + " tokens leave " +
              std::to_string(val_count) + " for val.bin (need at least " + std::to_string(kMinValTokens) +
              ")");

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  require(!ec && fs::is_directory(out_dir),
          "cannot create output directory " + out_dir + (ec ? ": " + ec.message() : ": not a directory"));
  const std::vector<uint16_t> train(tokens.begin(),
                                    tokens.begin() + static_cast<std::ptrdiff_t>(train_count));
  const std::vector<uint16_t> val(tokens.begin() + static_cast<std::ptrdiff_t>(train_count), tokens.end());
  const std::string train_path = (fs::path(out_dir) / "train.bin").string();
  // Both files written and synced before either replaces its old version: a full disk or a kill
  // while writing leaves the previous pair as it was, never a new train.bin beside an old val.bin.
  const auto train_file = stage_token_file(train_path, train);
  const auto val_file = stage_token_file((fs::path(out_dir) / "val.bin").string(), val);
  train_file->commit();
  val_file->commit();
  return {train_count, val_count};
}

}  // namespace lattice::data
