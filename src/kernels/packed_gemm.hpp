#pragma once
// lattice's own fp32 GEMM: Goto-style blocking (B packed per KC×NC block, A per MC×KC block) around an
// 8×32 AVX-512 microkernel, the columns of C split over the OpenMP threads. gemm() sends it the shapes
// where it measured faster than oneDNN (docs/design.md §7, "Which kernel runs each GEMM"); any shape
// is correct (edges are zero-padded in the packed panels and written through a tile).
// Semantics are gemm()'s: C[M,N] = alpha · op(A)·op(B) + bias (+ C when accumulate), batch 1.
#include "kernels/gemm.hpp"

namespace lattice {

// Compiled with AVX-512 (the build uses -march=native); without it gemm() never calls the kernel.
bool packed_gemm_available();

// Workspace per thread: a packed A block and a packed B block of constant size (they do not grow
// with the shape), in bytes.
int64_t packed_gemm_workspace_bytes_per_thread();

void packed_gemm_f32(const GemmShape& shape, const float* a, const float* b, float* c, const float* bias);

}  // namespace lattice
