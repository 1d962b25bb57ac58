#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "backend/device_ops.hpp"
#include "core/error.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "optim/adafactor.hpp"
#include "optim/sm3.hpp"

namespace lattice {

Optimizer::Optimizer(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
                     OptimizerGroups groups)
    : table_(table), config_(config), groups_(groups), owned_(std::move(owned)) {
  if (owned_.empty() && table.total() > 0) owned_.push_back({0, table.total()});
  for (size_t i = 0; i < owned_.size(); ++i) {
    const FlatPiece& piece = owned_[i];
    for (const auto& p : table.params()) {
      const int64_t b = std::max(p.offset, piece.begin), e = std::min(p.offset + p.numel, piece.end);
      if (b < e) segments_.push_back({i, &p, b, e, owned_size_ + (b - piece.begin)});
    }
    owned_size_ += piece.size();
  }
  std::map<const ParamInfo*, std::vector<size_t>> by_tensor;
  for (size_t i = 0; i < segments_.size(); ++i) by_tensor[segments_[i].param].push_back(i);
  for (auto& [param, list] : by_tensor) segments_by_tensor_.push_back(std::move(list));
}

AdamW::AdamW(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
             OptimizerGroups groups)
    : Optimizer(table, config, std::move(owned), groups) {
  if (config.offload_dir.empty()) {
    m_ = TrackedArray<float>(owned_size(), "optimizer");
    v_ = TrackedArray<float>(owned_size(), "optimizer");
    return;
  }
  std::vector<int64_t> units;
  for (int64_t first = 0; first < owned_size(); first += kOffloadUnit)
    units.push_back(std::min(kOffloadUnit, owned_size() - first));
  offload_ = std::make_unique<OffloadedStates>(config.offload_dir, std::move(units), config.offload_params ? 3 : 2);
}

std::vector<Optimizer::ElementState> AdamW::element_states() {
  if (offload_) {
    float* m = offload_->mapped() + (config_.offload_params ? offload_->total() : 0);
    return {{"exp_avg.", m}, {"exp_avg_sq.", m + offload_->total()}};
  }
  return {{"exp_avg.", m_.data()}, {"exp_avg_sq.", v_.data()}};
}

void AdamW::update(std::span<const PieceData> pieces, double lr, int64_t step) {
  const AdamWScalars scalars = adamw_scalars(config_.beta1, config_.beta2, config_.eps, lr, step);
  auto adam = [&](float* m, float* v, float* w, const float* grad, int64_t n, float decay) {
    dev::adamw_update(m, v, w, grad, n, decay, scalars);
  };
  if (offload_) offload_->begin();
  size_t staged_unit = size_t(-1);
  float* staged = nullptr;
  std::vector<AdamWSegment> batch;  // without offload: every tensor's update in one call, below
  for (const Segment& s : segments()) {
    const float decay = s.param->decay ? float(1.0 - lr * config_.weight_decay) : 1.0f;
    const int64_t in_piece = s.begin - owned()[s.piece].begin;
    float* w = pieces[s.piece].master + in_piece;  // (offloaded weights: staged below instead)
    const float* grad = pieces[s.piece].grad + in_piece;
    const int64_t n = s.end - s.begin;
    if (!offload_) {  // clipping's scale and the GEMMs' bf16 copy in the same pass
      uint16_t* w16 = pieces[s.piece].bf16;
      batch.push_back({m_.data() + s.state_index, v_.data() + s.state_index, w, w16 ? w16 + in_piece : nullptr, grad,
                       n, decay, pieces[s.piece].grad_scale});
      continue;
    }
    // Offloaded: the moments come in units of kOffloadUnit elements, in order; a segment may span
    // several, and each unit's two moments sit one after the other in its staging slot.
    for (int64_t done = 0; done < n;) {
      const int64_t at = s.state_index + done;
      const size_t unit = size_t(at / kOffloadUnit);
      if (unit != staged_unit) {
        if (staged_unit != size_t(-1)) offload_->done(staged_unit);
        staged = offload_->piece(unit);
        staged_unit = unit;
      }
      const int64_t unit_first = int64_t(unit) * kOffloadUnit;
      const int64_t unit_size = std::min(kOffloadUnit, owned_size() - unit_first);
      const int64_t len = std::min(n - done, unit_first + unit_size - at);
      // States in the slot: [weights (offload_params)] [m] [v], unit_size elements each.
      float* unit_states = staged + (config_.offload_params ? unit_size : 0) + (at - unit_first);
      float* weights = config_.offload_params ? staged + (at - unit_first) : w + done;
      adam(unit_states, unit_states + unit_size, weights, grad + done, len, decay);
      done += len;
    }
  }
  if (!batch.empty()) dev::adamw_update_segments({batch.data(), batch.size()}, scalars);
  if (offload_) {
    if (staged_unit != size_t(-1)) offload_->done(staged_unit);
    offload_->end();
  }
}

std::unique_ptr<Optimizer> make_optimizer(const ParamTable& table, const OptimizerConfig& config,
                                          std::vector<FlatPiece> owned, OptimizerGroups groups) {
  if (config.kind == "adamw") return std::make_unique<AdamW>(table, config, std::move(owned), groups);
  require(config.offload_dir.empty(), "--offload-optimizer keeps AdamW's moments on disk; --optimizer " + config.kind +
                                          " keeps its states in memory (use --optimizer adamw)");
  if (config.kind == "adafactor") return std::make_unique<Adafactor>(table, config, std::move(owned), groups);
  if (config.kind == "sm3") return std::make_unique<SM3>(table, config, std::move(owned), groups);
  throw InputError("--optimizer must be adamw, adafactor or sm3 (got '" + config.kind + "')");
}

double grad_norm(const float* grads, int64_t n) { return std::sqrt(dev::grad_sum_squares(grads, n)); }

}  // namespace lattice
