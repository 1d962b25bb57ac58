#pragma once
// Adafactor (Shazeer & Stern 2018) without momentum (β1 = 0), with an external learning rate and
// decoupled weight decay as in AdamW. A matrix keeps the running row and column sums of g² (its
// second moment is estimated as V̂ = R Cᵀ / ΣR); any other tensor keeps one second moment per
// element. All of them are tensor states in whole-tensor coordinates: no per-element array is
// sharded with the parameters, so the state is rows + cols floats per matrix.
//
// Each update makes two reduction rounds, each an all_reduce (sum) over the shard group and then
// one over the TP group (those present): the g² statistics, then the per-tensor sums of U² for
// the update clipping.
#include <span>
#include <vector>

#include "optim/optimizer.hpp"
#include "optim/tensor_stats.hpp"

namespace lattice {

class Adafactor final : public Optimizer {
 public:
  Adafactor(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
            OptimizerGroups groups = {});
  const char* name() const override { return "adafactor"; }
  void update(std::span<const PieceData> pieces, double lr, int64_t step) override;
  std::vector<ElementState> element_states() override { return {}; }
  // "exp_avg_sq_row." / "exp_avg_sq_col." + name for matrices, "exp_avg_sq." + name otherwise.
  std::vector<TensorState> tensor_states() override;
  int64_t state_bytes() const override { return 4 * second_moments_.size(); }

 private:
  void gather_squares(std::span<const PieceData> pieces);
  void fold_squares(double beta2);
  // Calls fn(tensor, weight, u) for every owned element, u = g / sqrt(V̂) unclipped.
  template <class Fn>
  void for_each_direction(std::span<const PieceData> pieces, Fn&& fn) const;
  tracked_vector<double, MemoryCategory::workspaces> clip_scales(std::span<const PieceData> pieces);

  std::vector<TensorSlots> slots_;
  TrackedArray<float> second_moments_;  // R and C of each matrix, V of the other tensors
  std::vector<double> inv_row_total_;   // 1 / ΣR per matrix (0 when ΣR is 0)
  PartialStats squares_;                // this rank's sums of g² + ε₁, laid out as second_moments_
  PartialStats update_squares_;         // this rank's Σ U² per tensor
};

}  // namespace lattice
