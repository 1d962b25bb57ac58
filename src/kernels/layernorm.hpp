#pragma once
// LayerNorm over the last dimension C of N rows. Backward accumulates into dinp (the residual
// stream's gradient) and into dweight/dbias (the flat gradient buffer).
#include <cstdint>

namespace lattice {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

// layernorm_backward's two parts, for a backward split into input and weight passes (docs/design.md
// §6): the input gradient added to dinp, with the parameter gradients' per-thread partial sums
// written to `partial` (layernorm_partial_floats(C) of them, one run per thread); then those
// partials added into dweight and dbias in thread order. layernorm_backward is exactly the two.
int64_t layernorm_partial_floats(int64_t C);
void layernorm_backward_input(float* dinp, float* partial, int64_t partial_floats, const float* dout,
                              const float* inp, const float* weight, const float* mean, const float* rstd, int64_t N,
                              int64_t C);
void layernorm_reduce_partials(float* dweight, float* dbias, const float* partial, int64_t partial_floats, int64_t C);

// One row of the forward (y, its mean and rstd) and of the backward (dx += its input gradient, dw and
// db += its parameter gradients): the code every LayerNorm pass runs, fp32 or bf16 (kernels/bf16_fused.hpp).
void layernorm_forward_row(float* y, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                           int64_t C);
void layernorm_backward_row(float* dx, float* dw, float* db, const float* dy, const float* x, const float* weight,
                            float m, float r, int64_t C);

}  // namespace lattice
