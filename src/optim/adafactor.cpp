#include "optim/adafactor.hpp"

#include <cmath>
#include <stdexcept>

namespace lattice {

namespace {

double full_numel(const ParamInfo& p) {
  double n = 1;
  for (int64_t d : p.full_shape) n *= double(d);
  return n;
}

// g / sqrt(v̂), and 0 where the estimate is 0: possible only with ε₁ = 0 on rows whose gradient
// is always 0 (the padded vocabulary) or after states were loaded as zeros.
float direction(float g, double v) { return v > 0 ? float(double(g) / std::sqrt(v)) : 0.0f; }

}  // namespace

Adafactor::Adafactor(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
                     OptimizerGroups groups)
    : Optimizer(table, config, std::move(owned), groups),
      slots_(layout_slots(table)),
      second_moments_(total_slots(slots_), "optimizer"),
      inv_row_total_(slots_.size(), 0.0),
      squares_(table, slot_sizes(slots_)),
      update_squares_(table, std::vector<int64_t>(slots_.size(), 1)) {}

std::vector<Optimizer::TensorState> Adafactor::tensor_states() {
  return name_slots(table_, slots_, second_moments_.data(), "exp_avg_sq_row.", "exp_avg_sq_col.", "exp_avg_sq.");
}

// This rank's share of rowsum(g² + ε₁) and colsum(g² + ε₁) (matrices) or g² + ε₁ (other
// tensors), at whole-tensor indices. Summed in double so that the float partials are the same
// up to one rounding however the elements are spread over ranks and pieces.
void Adafactor::gather_squares(std::span<const PieceData> pieces) {
  const double eps1 = config_.adafactor_eps1;
  tracked_vector<double, MemoryCategory::workspaces> sums(squares_.values().size(), 0.0);
  for_each_segment_parallel([&](const Segment& s) {
    const TensorSlots& slot = slots_[tensor_index(table_, *s.param)];
    const float* grad = pieces[s.piece].grad + (s.begin - owned()[s.piece].begin);
    const int64_t first = s.begin - s.param->offset;
    for_each_run(table_, *s.param, first, s.end - s.param->offset, [&](const ElementRun& run) {
      const float* g = grad + (run.local - first);
      if (!slot.factored) {
        for (int64_t i = 0; i < run.length; ++i) sums[size_t(slot.row(run.global + i))] += double(g[i]) * g[i] + eps1;
        return;
      }
      const int64_t row = run.global / slot.cols, col = run.global % slot.cols;
      double row_sum = 0.0;
      for (int64_t i = 0; i < run.length; ++i) {
        const double sq = double(g[i]) * g[i] + eps1;
        row_sum += sq;
        sums[size_t(slot.col(col + i))] += sq;
      }
      sums[size_t(slot.row(row))] += row_sum;
    });
  });
  std::span<float> out = squares_.values();
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(sums[i]);
}

// R, C and V become their exponential moving averages with the reduced statistics; the squares
// buffer has the same layout as the states.
void Adafactor::fold_squares(double beta2) {
  const std::span<const float> stats = squares_.values();
  float* v = second_moments_.data();
  for (size_t i = 0; i < stats.size(); ++i) v[i] = float(beta2 * double(v[i]) + (1.0 - beta2) * double(stats[i]));
  for (size_t k = 0; k < slots_.size(); ++k) {
    const TensorSlots& slot = slots_[k];
    if (!slot.factored) continue;
    double total = 0.0;
    for (int64_t i = 0; i < slot.rows; ++i) total += double(v[slot.row(i)]);
    inv_row_total_[k] = total > 0 ? 1.0 / total : 0.0;
  }
}

template <class Fn>
void Adafactor::for_each_direction(std::span<const PieceData> pieces, Fn&& fn) const {
  const float* v = second_moments_.data();
  for_each_segment_parallel([&](const Segment& s) {
    const size_t k = tensor_index(table_, *s.param);
    const TensorSlots& slot = slots_[k];
    const int64_t in_piece = s.begin - owned()[s.piece].begin;
    const float* grad = pieces[s.piece].grad + in_piece;
    float* w = pieces[s.piece].master + in_piece;
    const int64_t first = s.begin - s.param->offset;
    for_each_run(table_, *s.param, first, s.end - s.param->offset, [&](const ElementRun& run) {
      const int64_t at = run.local - first;
      if (!slot.factored) {
        for (int64_t i = 0; i < run.length; ++i) fn(k, w[at + i], direction(grad[at + i], v[slot.row(run.global + i)]));
        return;
      }
      const int64_t row = run.global / slot.cols, col = run.global % slot.cols;
      const double row_share = double(v[slot.row(row)]) * inv_row_total_[k];  // R_i / ΣR
      for (int64_t i = 0; i < run.length; ++i)
        fn(k, w[at + i], direction(grad[at + i], row_share * double(v[slot.col(col + i)])));
    });
  });
}

// Per tensor, 1 / max(1, RMS(U) / d) with the RMS over the whole tensor: this rank's Σ U² are
// reduced like the statistics.
tracked_vector<double, MemoryCategory::workspaces> Adafactor::clip_scales(std::span<const PieceData> pieces) {
  tracked_vector<double, MemoryCategory::workspaces> sums(slots_.size(), 0.0);
  for_each_direction(pieces, [&](size_t k, float&, float u) { sums[k] += double(u) * u; });
  for (size_t k = 0; k < sums.size(); ++k) *update_squares_.of(k) = float(sums[k]);
  update_squares_.reduce(groups_, comm::ReduceOp::sum);
  const double d = config_.adafactor_clip;
  tracked_vector<double, MemoryCategory::workspaces> scales(slots_.size(), 1.0);
  for (size_t k = 0; k < scales.size(); ++k) {
    const double rms = std::sqrt(double(*update_squares_.of(k)) / full_numel(table_.params()[k]));
    if (d > 0 && rms > d) scales[k] = d / rms;
  }
  return scales;
}

void Adafactor::update(std::span<const PieceData> pieces, double lr, int64_t step) {
  if (step < 1) throw std::logic_error("Adafactor::update: steps count from 1");
  const double beta2 = 1.0 - std::pow(double(step), config_.adafactor_decay_rate);
  gather_squares(pieces);
  squares_.reduce(groups_, comm::ReduceOp::sum);
  fold_squares(beta2);
  const auto scales = clip_scales(pieces);
  tracked_vector<float, MemoryCategory::workspaces> decay(slots_.size()), step_size(slots_.size());
  for (size_t k = 0; k < slots_.size(); ++k) {
    decay[k] = table_.params()[k].decay ? float(1.0 - lr * config_.weight_decay) : 1.0f;
    step_size[k] = float(lr * scales[k]);
  }
  for_each_direction(pieces, [&](size_t k, float& w, float u) { w = w * decay[k] - step_size[k] * u; });
}

}  // namespace lattice
