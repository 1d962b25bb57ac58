#pragma once
// A dropout mask kept for backward: one byte an element (the paper's Table 2), or one bit with
// --pack-masks (Gist's binarisation, docs/design.md §4). The forward writes the mask's bytes where
// begin() says — the kept buffer itself, or a scratch that finish() packs into the kept bits; the
// backward reads unpacked() — the kept buffer, or the bits unpacked into a scratch. Masks are the same
// either way, so training is bit-identical.
#include <cstdint>

#include "tensor/memory_tracker.hpp"

namespace lattice {

// bits[i/8] bit (i%8) = bytes[i] (0 or 1), for i < n; the last byte's unused bits are 0.
void pack_mask_bits(uint8_t* bits, const uint8_t* bytes, int64_t n);
void unpack_mask_bits(uint8_t* bytes, const uint8_t* bits, int64_t n);
inline int64_t packed_mask_bytes(int64_t n) { return (n + 7) / 8; }

class KeptMask {
 public:
  // Allocates the kept mask (n bytes, or n/8 rounded up when packed) under the layer's tag and
  // returns where the forward writes the n mask bytes (`scratch`, at least n bytes, when packed).
  uint8_t* begin(int64_t n, bool packed, int layer, const char* tag, uint8_t* scratch);
  void finish();  // packs what the forward wrote (nothing to do unpacked)
  // The n mask bytes for backward (unpacked into `scratch` when packed).
  const uint8_t* unpacked(uint8_t* scratch) const;
  const void* data() const { return kept_.data(); }  // what is kept (bits when packed)
  size_t kept_bytes() const { return kept_.bytes(); }
  void reset() { kept_.reset(), n_ = 0, scratch_ = nullptr; }
  explicit operator bool() const { return bool(kept_); }

 private:
  TrackedBuffer kept_;
  int64_t n_ = 0;
  bool packed_ = false;
  uint8_t* scratch_ = nullptr;  // between begin() and finish()
};

}  // namespace lattice
