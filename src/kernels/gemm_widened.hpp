#pragma once
// bf16 GEMMs run widened to fp32 (kernels/gemm.hpp gemm_bf16_widened), internal to kernels/gemm.cpp:
// which fp32 copies a GEMM makes (its tiles) and the loop that makes them and runs the fp32 GEMM on
// each. A GEMM whose whole operands fit the bound is copied whole, as before tiles existed (a bf16
// destination in pieces of rows); a larger one (a vocabulary-wide head) is cut into tiles of rows,
// columns and depth, each tile's operands copied into dense fp32 blocks, so that the copies never
// pass the bound (docs/design.md §7).
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "kernels/gemm.hpp"

namespace lattice::widened {

// The copies one GEMM holds, in one buffer: A's tile, B's tile and (stage) C's tile in fp32.
struct Tiles {
  int64_t mt = 0, nt = 0, kt = 0;  // a tile's rows, columns and depth (M, N, K when whole)
  bool stage = false;              // C's tile is made in fp32 and then rounded or added into C
  bool n_outer = false;            // column tiles in the outer loop (B's tiles then copied once each)
  int64_t a = 0, b = 0, c = 0;     // elements of A's, B's and C's tiles held
  int64_t elements() const { return a + b + c; }
};

// How `s` runs widened on `threads` threads, or nullopt where it runs natively (an empty GEMM; a
// batch whose whole copies pass the bound; a shape whose smallest tiles would).
std::optional<Tiles> plan(const GemmShape& s, bool out16, int threads);

// The tiles of mt rows, nt columns and kt depth for `s` (unbatched), its loop order the one that
// copies fewer elements: what plan() picks among, and what tests cut a GEMM into.
Tiles tiles(const GemmShape& s, int64_t mt, int64_t nt, int64_t kt, bool out16);

// The fp32 GEMM a tile runs (gemm.cpp's parts on `threads` threads).
using Fp32Gemm = std::function<void(const GemmShape&, const float* a, const float* b, float* c, const float* bias)>;

// C (+)= op(A)·op(B) (+ bias) for bf16 A and B through the tiles of `t`: C as fp32 or (out16) bf16.
void run(const Tiles& t, const GemmShape& s, const uint16_t* a, const uint16_t* b, void* c, const float* bias,
         bool out16, int threads, const Fp32Gemm& fp32);

// The shapes of the fp32 GEMMs run (with their accumulate flags), each at least once, no other: what
// the planner asks oneDNN's scratchpads of.
std::vector<GemmShape> tile_gemms(const Tiles& t, const GemmShape& s);

// For tests: the bound on a GEMM's copies (64 MiB; nullopt: back to it).
void set_max_bytes(std::optional<int64_t> bytes);

}  // namespace lattice::widened
