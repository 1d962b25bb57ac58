#pragma once
// Branch-free exp and tanh that the compiler vectorises (libm's are scalar here): used by
// softmax and GeLU, whose element counts (as²b, 4sbh) would otherwise dominate a step. The CUDA
// kernels call the same text (nvcc may fuse a multiply and an add the CPU rounds twice: within an
// ulp or two of the CPU's value).
#include <cstdint>
#include <cstring>

#include "core/host_device.hpp"

namespace lattice {

LATTICE_HOST_DEVICE inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest by the 1.5·2^23 trick: vectorises where roundevenf does not.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  // Taylor series to r^6 on |r| <= ln2/2: relative error below 2e-7.
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = __builtin_bit_cast(float, (int32_t(n) + 127) << 23);
  return p * scale;
}

LATTICE_HOST_DEVICE inline float fast_tanh(float y) { return 1.0f - 2.0f / (fast_exp(2.0f * y) + 1.0f); }

}  // namespace lattice
