#pragma once
// GeLU, tanh approximation (GPT-2's): the array kernels, and the per-element value and derivative they
// (and kernels/bf16_fused.hpp's passes) compute, so every pass rounds alike.
#include <cstdint>

#include "kernels/fast_math.hpp"

namespace lattice {

namespace gelu_detail {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoef = 0.044715f;
}  // namespace gelu_detail

inline float gelu_value(float x) {
  using namespace gelu_detail;
  return 0.5f * x * (1.0f + fast_tanh(kSqrt2OverPi * (x + kCoef * x * x * x)));
}
inline float gelu_grad(float x) {
  using namespace gelu_detail;
  const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
  const float th = fast_tanh(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCoef * x * x);
}

void gelu_forward(float* out, const float* inp, int64_t n);
// dinp = dout · gelu'(inp)  (overwrites dinp)
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
}  // namespace lattice
