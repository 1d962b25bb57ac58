#pragma once
// LayerNorm over the last dimension C of N rows. Backward accumulates into dinp (the residual
// stream's gradient) and into dweight/dbias (the flat gradient buffer).
#include <cstdint>

namespace lattice {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace lattice
