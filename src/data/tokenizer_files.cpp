#include "data/tokenizer_files.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/pinned_path.hpp"

namespace fs = std::filesystem;

namespace lattice::data {

namespace {

std::string read_all(const std::string& path) {
  return read_regular_file(path, "tokenizer file", size_t(256) << 20);
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_all(path));
  } catch (const nlohmann::json::exception&) {
    fail(path + " is not valid JSON");
  }
}

int64_t count(const nlohmann::json& j, const char* key, const std::string& where) {
  require(j.is_object() && j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= 0,
          where + ": \"" + key + "\" must be a non-negative integer");
  return j[key].get<int64_t>();
}

}  // namespace

std::vector<NamedFile> tokenizer_files(const Tokenizer& tokenizer) {
  const nlohmann::ordered_json j = {
      {"kind", to_string(tokenizer.kind())}, {"vocab", tokenizer.vocab()}, {"fingerprint", tokenizer.fingerprint()}};
  std::vector<NamedFile> files{{kTokenizerJson, j.dump(2) + "\n"}};
  if (!tokenizer.model_bytes().empty()) files.push_back({kTokenizerModel, tokenizer.model_bytes()});
  return files;
}

// Each lookup below goes through core/pinned_path.hpp: a checkpoint being read is the pinned version.
bool has_tokenizer(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(pinned_path((fs::path(dir) / kTokenizerJson).string()), ec);
}

namespace {
std::string model_path_of(const std::string& dir) { return (fs::path(dir) / kTokenizerModel).string(); }
}  // namespace

Tokenizer load_tokenizer(const std::string& dir) {
  if (!has_tokenizer(dir)) return Tokenizer();
  const std::string path = (fs::path(dir) / kTokenizerJson).string();
  const nlohmann::json j = read_json(path);
  require(j.is_object() && j.contains("kind") && j["kind"].is_string(), path + ": \"kind\" must be a string");
  const bool ids = j["kind"].get<std::string>() == "none";
  const TokenizerKind kind = ids ? TokenizerKind::none : parse_tokenizer_kind(j["kind"].get<std::string>());
  const int64_t vocab = count(j, "vocab", path);
  require(j.contains("fingerprint") && j["fingerprint"].is_string(), path + ": \"fingerprint\" must be a string");
  Tokenizer t;
  if (ids) {
    require(vocab > Tokenizer::kByteVocab && vocab <= kMaxTokenVocab,
            path + ": a \"none\" tokenizer's \"vocab\" must be between 257 and " + std::to_string(kMaxTokenVocab));
    t = Tokenizer::ids_only(int(vocab));
  } else if (kind != TokenizerKind::bytes) {
    const std::string model_path = (fs::path(dir) / kTokenizerModel).string();
    std::error_code ec;
    require(fs::is_regular_file(pinned_path(model_path), ec),
            path + " names a " + to_string(kind) + " tokenizer but " + model_path +
                (fs::exists(pinned_path(model_path), ec) ? " is not a regular file" : " is missing"));
    t = Tokenizer::from_model(read_all(model_path), kind, model_path);
  }
  // Say what differs: the model (another fingerprint), or the vocabulary alone (an edited "vocab":
  // the fingerprints then agree).
  require(t.fingerprint() == j["fingerprint"].get<std::string>(),
          path + " records tokenizer " + j["fingerprint"].get<std::string>() + " but the directory holds " +
              t.fingerprint() + (kind == TokenizerKind::bytes || ids ? "" : " (" + model_path_of(dir) + " was replaced)"));
  require(t.vocab() == vocab, path + " records a vocabulary of " + std::to_string(vocab) + " but its " +
                                  to_string(kind) + " tokenizer has " + std::to_string(t.vocab()) + " tokens");
  return t;
}

Tokenizer unrecorded_tokenizer(int vocab) {
  return vocab <= Tokenizer::kByteVocab ? Tokenizer() : Tokenizer::ids_only(vocab);
}

Tokenizer tokens_tokenizer(const std::string& dir, int vocab) {
  return has_tokenizer(dir) ? load_tokenizer(dir) : unrecorded_tokenizer(vocab);
}

bool same_tokens(const Tokenizer& a, const Tokenizer& b) {
  return a.fingerprint() == b.fingerprint() || a.kind() == TokenizerKind::none || b.kind() == TokenizerKind::none;
}

Tokenizer load_recorded_tokenizer(const std::string& dir, const std::string& recorded, const std::string& what) {
  if (recorded.empty()) return load_tokenizer(dir);
  const std::string path = (fs::path(dir) / kTokenizerJson).string();
  const Tokenizer bytes;
  std::error_code ec;
  if (recorded != bytes.fingerprint() && !has_tokenizer(dir))
    fail(what + " was trained with tokenizer " + recorded + " (its trainer.json), but " + path +
         (fs::exists(pinned_path(path), ec) ? " is not a regular file" : " is missing"));
  const Tokenizer t = load_tokenizer(dir);
  require(t.fingerprint() == recorded, what + " was trained with tokenizer " + recorded + " (its trainer.json), but " +
                                           path + " holds tokenizer " + t.fingerprint());
  return t;
}

DataSizes read_data_sizes(const std::string& dir) {
  DataSizes s;
  const std::string path = (fs::path(dir) / kDataJson).string();
  if (!fs::is_regular_file(path)) return s;
  const nlohmann::json j = read_json(path);
  for (const auto& [key, split] : {std::pair{"train", &s.train}, {"val", &s.val}}) {
    require(j.is_object() && j.contains(key), path + ": \"" + key + "\" is missing");
    split->tokens = count(j[key], "tokens", path + " (" + key + ")");
    split->bytes = count(j[key], "bytes", path + " (" + key + ")");
  }
  s.recorded = true;
  return s;
}

std::string data_sizes_json(const DataSizes& s) {
  const nlohmann::ordered_json j = {{"train", {{"tokens", s.train.tokens}, {"bytes", s.train.bytes}}},
                                    {"val", {{"tokens", s.val.tokens}, {"bytes", s.val.bytes}}}};
  return j.dump(2) + "\n";
}

double bits_per_byte(double loss, const SplitSize& size) {
  const double tokens_per_byte = size.bytes > 0 ? double(size.tokens) / double(size.bytes) : 1.0;
  return loss * tokens_per_byte / std::log(2.0);
}

}  // namespace lattice::data
