#include "tensor/stored.hpp"

#include <cstring>

namespace lattice {

void Stored::copy_f32(const float* src, float* dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t c = 0; c < n; c += 16384) {
    const int64_t len = (n - c < 16384) ? n - c : 16384;
    std::memcpy(dst + c, src + c, size_t(len) * 4);
  }
}

}  // namespace lattice
