// Fuzz target: data::TokenFile::load (train.bin / val.bin in llm.c's format, `lattice train --data`,
// `lattice eval --data`). A file that loads must hold exactly the header's count of tokens, each
// below the vocabulary, and write back and load again to the same tokens.
#include <algorithm>

#include "data/token_file.hpp"
#include "fuzz_util.hpp"

using namespace lattice;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch() + "/input.bin";
  static const std::string again = fuzz::scratch() + "/again.bin";
  fuzz::write_file(path, data, size);
  // The byte tokenizer's vocabulary, GPT-2's, and the largest a uint16 token allows.
  for (const int vocab : {256, 50257, 65536}) {
    fuzz::accepts([&] {
      const data::TokenFile file = data::TokenFile::load(path, vocab);
      FUZZ_CHECK(size == data::kTokenFileHeaderBytes + file.size() * sizeof(uint16_t));
      for (const uint16_t t : file.tokens()) FUZZ_CHECK(t < vocab);
      data::write_token_file(again, file.tokens());
      FUZZ_CHECK(std::ranges::equal(data::TokenFile::load(again, vocab).tokens(), file.tokens()));
    });
  }
  return 0;
}
