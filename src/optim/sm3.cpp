#include "optim/sm3.hpp"

#include <algorithm>
#include <cmath>

namespace lattice {

namespace {

// g / sqrt(ν), and 0 where ν is 0: a gradient of 0 met by accumulators of 0 (the padded
// vocabulary rows, or states loaded as zeros).
float direction(float g, float nu) { return nu > 0 ? g / std::sqrt(nu) : 0.0f; }

}  // namespace

SM3::SM3(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
         OptimizerGroups groups)
    : Optimizer(table, config, std::move(owned), groups),
      slots_(layout_slots(table)),
      accumulators_(total_slots(slots_), "optimizer"),
      momentum_(config.beta1 > 0 ? owned_size() : 0, "optimizer"),
      maxima_(table, slot_sizes(slots_)) {}

std::vector<Optimizer::ElementState> SM3::element_states() {
  if (momentum_.size() == 0) return {};
  return {{"momentum.", momentum_.data()}};
}

std::vector<Optimizer::TensorState> SM3::tensor_states() {
  return name_slots(table_, slots_, accumulators_.data(), "accumulator_row.", "accumulator_col.", "accumulator.");
}

// Every accumulator is the largest ν of its cover (or its element), so once this rank's maxima
// are combined with the other ranks' they replace the accumulators outright: the max over a
// cover never falls below its previous μ, since the element that set μ rebuilds at least μ.
void SM3::update(std::span<const PieceData> pieces, double lr, int64_t /*step*/) {
  maxima_.fill(0.0f);
  for_each_segment_parallel([&](const Segment& s) { update_segment(pieces[s.piece], s, lr); });
  maxima_.reduce(groups_, comm::ReduceOp::max);
  const std::span<const float> maxima = maxima_.values();
  std::copy(maxima.begin(), maxima.end(), accumulators_.data());
}

void SM3::update_segment(const PieceData& piece, const Segment& s, double lr) {
  const TensorSlots& slot = slots_[tensor_index(table_, *s.param)];
  const float* mu = accumulators_.data();
  float* maxima = maxima_.values().data();
  const int64_t in_piece = s.begin - owned()[s.piece].begin;
  const float* grad = piece.grad + in_piece;
  float* w = piece.master + in_piece;
  float* m = momentum_.size() > 0 ? momentum_.data() + s.state_index : nullptr;
  const float b1 = float(config_.beta1), step_size = float(lr);
  const float decay = s.param->decay ? float(1.0 - lr * config_.weight_decay) : 1.0f;
  // Element `at` of the segment, given its new ν: momentum, decay and step.
  auto apply = [&](int64_t at, float nu) {
    float u = direction(grad[at], nu);
    if (m) u = m[at] = b1 * m[at] + (1.0f - b1) * u;
    w[at] = w[at] * decay - step_size * u;
  };
  const int64_t first = s.begin - s.param->offset;
  for_each_run(table_, *s.param, first, s.end - s.param->offset, [&](const ElementRun& run) {
    const int64_t at = run.local - first;
    if (!slot.factored) {
      for (int64_t i = 0; i < run.length; ++i) {
        const int64_t j = slot.row(run.global + i);
        const float nu = mu[j] + grad[at + i] * grad[at + i];
        apply(at + i, nu);
        maxima[j] = std::max(maxima[j], nu);
      }
      return;
    }
    const int64_t row = slot.row(run.global / slot.cols), col = run.global % slot.cols;
    float row_max = maxima[row];
    for (int64_t i = 0; i < run.length; ++i) {
      const int64_t c = slot.col(col + i);
      const float nu = std::min(mu[row], mu[c]) + grad[at + i] * grad[at + i];
      apply(at + i, nu);
      row_max = std::max(row_max, nu);
      maxima[c] = std::max(maxima[c], nu);
    }
    maxima[row] = row_max;
  });
}

}  // namespace lattice
