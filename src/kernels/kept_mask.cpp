#include "kernels/kept_mask.hpp"

#include <immintrin.h>

#include <cstring>

namespace lattice {

// Eight mask bytes (each 0 or 1) are one little-endian word; BMI2's pext/pdep move bit 0 of each
// byte to and from eight consecutive bits.
constexpr uint64_t kLowBitOfEachByte = 0x0101010101010101ull;

void pack_mask_bits(uint8_t* bits, const uint8_t* bytes, int64_t n) {
  const int64_t whole = n / 8;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < whole; ++i) {
    uint64_t word;
    std::memcpy(&word, bytes + 8 * i, 8);
    bits[i] = uint8_t(_pext_u64(word, kLowBitOfEachByte));
  }
  if (n % 8) {
    uint8_t last = 0;
    for (int64_t j = 0; j < n % 8; ++j) last |= uint8_t((bytes[8 * whole + j] & 1) << j);
    bits[whole] = last;
  }
}

void unpack_mask_bits(uint8_t* bytes, const uint8_t* bits, int64_t n) {
  const int64_t whole = n / 8;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < whole; ++i) {
    const uint64_t word = _pdep_u64(bits[i], kLowBitOfEachByte);
    std::memcpy(bytes + 8 * i, &word, 8);
  }
  for (int64_t j = 0; j < n % 8; ++j) bytes[8 * whole + j] = uint8_t((bits[whole] >> j) & 1);
}

uint8_t* KeptMask::begin(int64_t n, bool packed, int layer, const char* tag, uint8_t* scratch) {
  n_ = n, packed_ = packed;
  kept_ = TrackedBuffer(size_t(packed ? packed_mask_bytes(n) : n), layer, tag);
  scratch_ = packed ? scratch : static_cast<uint8_t*>(kept_.data());
  return scratch_;
}

void KeptMask::finish() {
  if (packed_ && scratch_) pack_mask_bits(static_cast<uint8_t*>(kept_.data()), scratch_, n_);
  scratch_ = nullptr;
}

const uint8_t* KeptMask::unpacked(uint8_t* scratch) const {
  if (!packed_) return static_cast<const uint8_t*>(kept_.data());
  unpack_mask_bits(scratch, static_cast<const uint8_t*>(kept_.data()), n_);
  return scratch;
}

}  // namespace lattice
