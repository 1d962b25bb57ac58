#pragma once
// A linear layer y = x·W + b with W in Conv1D [in, out] layout, over N rows. Forward and backward
// as a pair; the backward's saved inputs (x, W) appear in its signature.
#include <cstdint>

#include "kernels/bias.hpp"
#include "kernels/gemm.hpp"

namespace lattice {

void linear_forward(float* y, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in, int64_t out);
// dx = dy·Wᵀ (overwritten; skipped when dx is null), dW += xᵀ·dy, db += Σ_rows dy.
// dy is given as fp32 (for the bias) and as an operand in the compute dtype (for the GEMMs).
void linear_backward(float* dx, float* dw, float* db, const float* dy, GemmOperand dy_op, GemmOperand x,
                     GemmOperand w, int64_t N, int64_t in, int64_t out);

// linear_backward's parts, for a backward split into an input-gradient pass (B) and a weight-gradient
// pass (W) (docs/design.md §6): linear_backward is exactly these calls in this order, so B then W
// gives its bits. dx = dy·Wᵀ; dW += xᵀ·dy; the bias's column sums assigned to `sums`, then added.
void linear_backward_input(float* dx, GemmOperand dy_op, GemmOperand w, int64_t N, int64_t in, int64_t out);
void linear_backward_weight(float* dw, GemmOperand x, GemmOperand dy_op, int64_t N, int64_t in, int64_t out);

// The GEMM operand for fp32 data in compute dtype `dt`: the data itself, or a bf16 copy in `half`.
GemmOperand as_operand(const float* src, int64_t n, DType dt, uint16_t* half);

}  // namespace lattice
