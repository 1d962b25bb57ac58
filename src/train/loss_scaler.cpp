#include "train/loss_scaler.hpp"

#include <algorithm>

namespace lattice {

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale = std::max(1.0, scale / 2);
    clean_steps = 0;
    ++skipped;
    return false;
  }
  if (++clean_steps >= window) scale = std::min(kMaxScale, scale * 2), clean_steps = 0;
  return true;
}

}  // namespace lattice
