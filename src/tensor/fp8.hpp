#pragma once
// 8-bit floating point for kept activations (docs/design.md §4, "Activations in 8 bits"; Gist's
// delayed precision reduction): e4m3 — 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinity,
// largest ±448, 0x7f/0xff NaN — with one power-of-two scale (an E8M0 byte) per block of 32
// elements along each row, as the OCP microscaling format does. Blocks never cross a row, so a
// tensor split by rows or by whole blocks of columns (tensor parallelism) quantizes every element
// exactly as the whole tensor does: layouts stay invariant.
#include <cstdint>

#include "core/fp8_layout.hpp"

namespace lattice {

// Round to nearest even, saturating at ±448; NaN stays NaN.
uint8_t fp8_encode(float x);
float fp8_decode(uint8_t code);

// src [numel] in rows of `row` → codes [numel], scales [fp8_scale_count]; and back. The bf16 forms
// read or write bfloat16 values (the compute dtype of bf16 activations).
void fp8_compress(const float* src, int64_t numel, int64_t row, uint8_t* codes, uint8_t* scales);
void fp8_compress(const uint16_t* src_bf16, int64_t numel, int64_t row, uint8_t* codes, uint8_t* scales);
void fp8_expand(const uint8_t* codes, const uint8_t* scales, int64_t numel, int64_t row, float* out);
void fp8_expand(const uint8_t* codes, const uint8_t* scales, int64_t numel, int64_t row, uint16_t* out_bf16);

}  // namespace lattice
