#pragma once
// The size of an 8-bit kept tensor (tensor/fp8.hpp): one e4m3 code per element and one scale byte
// per block of 32 elements along each row. Here, below both the tensor layer that stores it and
// the formula module that counts it, so the two cannot disagree.
#include <cstdint>

namespace lattice {

inline constexpr int64_t kFp8Block = 32;
inline int64_t fp8_scale_count(int64_t numel, int64_t row) { return numel / row * ((row + kFp8Block - 1) / kFp8Block); }
inline int64_t fp8_bytes(int64_t numel, int64_t row) { return numel + fp8_scale_count(numel, row); }

}  // namespace lattice
