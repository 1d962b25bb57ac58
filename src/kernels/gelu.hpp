#pragma once
// GeLU, tanh approximation (GPT-2's).
#include <cstdint>

namespace lattice {
void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = dout · gelu'(inp)  (overwrites dinp)
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
}  // namespace lattice
