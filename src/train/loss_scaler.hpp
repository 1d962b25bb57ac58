#pragma once
// fp16's dynamic loss scaling: the loss is multiplied by `scale` before backward; a step whose
// gradient holds an inf or NaN is skipped and the scale halved; after `window` clean steps it doubles.
// Off (scale 1, never skips) unless the weights are fp16.
#include <cstdint>

namespace lattice {

struct LossScaler {
  static constexpr double kMaxScale = 4294967296.0;  // 2^32: scaled fp32 losses stay finite
  bool active = false;
  double scale = 1.0;
  int64_t window = 1000, clean_steps = 0, skipped = 0;
  // Returns whether the step may be applied (and how the scale moves).
  bool update(bool finite);
};

}  // namespace lattice
