#pragma once
// Learning rate at a step: constant, or linear warm-up then cosine decay to min_lr.
#include <cmath>
#include <cstdint>
#include <string>

namespace lattice {

struct LrSchedule {
  std::string kind = "cosine";  // constant | cosine
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 0, total = 1;

  // `step` counts from 1.
  double at(int64_t step) const {
    if (warmup > 0 && step <= warmup) return lr * double(step) / double(warmup);
    if (kind == "constant") return lr;
    const double span = double(total > warmup ? total - warmup : 1);
    const double progress = std::min(1.0, double(step - warmup) / span);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
  }
};

}  // namespace lattice
