#pragma once
// FNV-1a, 64 bits, of some bytes, and as 16 hex digits: how lattice names contents it compares
// (a tokenizer's model, the edges of a token file, a checkpoint's manifest). Not a cryptographic hash.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace lattice {

inline uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  return h;
}

inline std::string hex16(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace lattice
