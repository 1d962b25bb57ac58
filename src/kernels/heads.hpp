#pragma once
// Head layout moves of self-attention (model/attention.hpp): token rows [b·s, 3·hl] or [b·s, hl]
// (hl = a·dh, this rank's heads) to per-head blocks [b, a, s, dh] and back. Pure copies: every
// device gives the same bytes.
#include <cstdint>

namespace lattice {

struct HeadShape {
  int64_t b = 0, s = 0, a = 0, dh = 0;  // rows, positions, this rank's heads, head dimension
};

// fn(head, row) for each of the b·s·a runs of dh elements the moves copy: `head` the run's offset in
// [b, a, s, dh], `row` its offset in token rows of `width` elements (head hd's dh columns at hd·dh).
// Rows and positions are split over the OpenMP threads. Every layout move (and its 16-bit twins,
// kernels/bf16_fused.hpp) walks this way.
template <class F>
void for_each_head_run(const HeadShape& x, int64_t width, F&& fn) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < x.b; ++bi)
    for (int64_t si = 0; si < x.s; ++si)
      for (int64_t hd = 0; hd < x.a; ++hd) fn(((bi * x.a + hd) * x.s + si) * x.dh, (bi * x.s + si) * width + hd * x.dh);
}

// qkv [b·s, 3·hl] (Q | K | V per row) → q, k, v [b, a, s, dh].
void split_heads(float* q, float* k, float* v, const float* qkv, const HeadShape& x);
// heads [b, a, s, dh] → out [b·s, hl].
void merge_heads(float* out, const float* heads, const HeadShape& x);
// rows [b·s, hl] → heads [b, a, s, dh].
void unmerge_heads(float* heads, const float* rows, const HeadShape& x);
// dq, dk, dv [b, a, s, dh] → dqkv [b·s, 3·hl].
void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const HeadShape& x);

}  // namespace lattice
