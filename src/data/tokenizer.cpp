#include "data/tokenizer.hpp"

#include "core/error.hpp"

namespace lattice::data {

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint16_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    require(ids[i] >= 0 && ids[i] < kVocab, "token " + std::to_string(ids[i]) + " at index " +
                                                std::to_string(i) + " is not a byte (vocab " +
                                                std::to_string(kVocab) + ")");
    text.push_back(static_cast<char>(ids[i]));
  }
  return text;
}

}  // namespace lattice::data
