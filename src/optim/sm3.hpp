#pragma once
// SM3-II (Anil et al. 2019) with momentum. A matrix's covers are its rows and its columns: each
// keeps the largest accumulated ν of its elements, and an element's ν is rebuilt every step as
// ν = min(μ_row, μ_col) + g². Any other tensor keeps a plain per-element accumulator ν += g².
// Accumulators are tensor states in whole-tensor coordinates (rows + cols floats per matrix);
// the momentum is an element state, sharded with the parameters (none when beta1 is 0).
//
// The update needs no reduced statistics before it is applied: each rank knows ν for the elements
// it owns. The new cover maxima are then reduced in one round: an all_reduce (max) over the
// shard group, then one over the TP group (those present).
#include <span>
#include <vector>

#include "optim/optimizer.hpp"
#include "optim/tensor_stats.hpp"

namespace lattice {

class SM3 final : public Optimizer {
 public:
  SM3(const ParamTable& table, const OptimizerConfig& config, std::vector<FlatPiece> owned,
      OptimizerGroups groups = {});
  const char* name() const override { return "sm3"; }
  void update(std::span<const PieceData> pieces, double lr, int64_t step) override;
  // "momentum." (when beta1 > 0).
  std::vector<ElementState> element_states() override;
  // "accumulator_row." / "accumulator_col." + name for matrices, "accumulator." + name otherwise.
  std::vector<TensorState> tensor_states() override;
  int64_t state_bytes() const override { return 4 * (accumulators_.size() + momentum_.size()); }

 private:
  void update_segment(const PieceData& piece, const Segment& s, double lr);

  std::vector<TensorSlots> slots_;
  TrackedArray<float> accumulators_;  // μ_row and μ_col of each matrix, ν of the other tensors
  TrackedArray<float> momentum_;      // owned_size() values, or none when beta1 is 0
  PartialStats maxima_;               // this rank's new accumulators, laid out as accumulators_
};

}  // namespace lattice
