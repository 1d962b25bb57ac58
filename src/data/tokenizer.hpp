#pragma once
// Byte-level tokenizer: every byte is its own token, so any text round-trips and vocab is 256.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lattice::data {

class ByteTokenizer {
 public:
  static constexpr int kVocab = 256;

  std::vector<uint16_t> encode(std::string_view text) const;
  // Throws InputError for an id outside [0, kVocab): a model with a padded vocab must never emit one.
  std::string decode(const std::vector<int>& ids) const;
};

}  // namespace lattice::data
