#include "kernels/gelu.hpp"

namespace lattice {

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_value(inp[i]);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * gelu_grad(inp[i]);
}

}  // namespace lattice
