#pragma once
// What Adafactor and SM3 share: tensor states in whole-tensor coordinates (a matrix keeps a row
// vector and a column vector, any other tensor one value per element), the walk from owned
// elements to whole-tensor indices, and the buffer of per-tensor partial statistics every rank
// fills from the elements it owns and then reduces with the ranks owning the rest.
//
// The reductions assume the owned pieces of the shard group's ranks together cover every element
// of their (TP-shard) table, as ZeRO's shards do; a rank may own nothing at all.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "optim/optimizer.hpp"

namespace lattice {

// One tensor's whole-tensor vectors at `offset` of a flat array. Factored (a 2-D tensor, Conv1D
// [in, out]): `rows` row values, then `cols` column values. Otherwise `rows` values, one per
// element of the whole tensor, and cols = 0.
struct TensorSlots {
  bool factored = false;
  int64_t rows = 0, cols = 0;
  int64_t offset = 0;
  int64_t size() const { return rows + cols; }
  int64_t row(int64_t i) const { return offset + i; }
  int64_t col(int64_t j) const { return offset + rows + j; }
};

// The slots of every tensor of `table`, in table order, packed from offset 0.
std::vector<TensorSlots> layout_slots(const ParamTable& table);
int64_t total_slots(const std::vector<TensorSlots>& slots);
std::vector<int64_t> slot_sizes(const std::vector<TensorSlots>& slots);  // per tensor, for PartialStats

// Position of p in table.params() (p must be one of its entries).
inline size_t tensor_index(const ParamTable& table, const ParamInfo& p) {
  return static_cast<size_t>(&p - table.params().data());
}

// Checkpoint names of the slots over `values`: row_prefix + name and col_prefix + name for
// factored tensors, element_prefix + name for the others.
std::vector<Optimizer::TensorState> name_slots(const ParamTable& table, const std::vector<TensorSlots>& slots,
                                               float* values, const std::string& row_prefix,
                                               const std::string& col_prefix, const std::string& element_prefix);

// Owned elements of one tensor whose whole-tensor indices are consecutive, within one row.
struct ElementRun {
  int64_t local;   // index of the first element in this rank's shard of the tensor
  int64_t global;  // its index in the whole tensor (row-major over full_shape)
  int64_t length;
};

// How many elements from local index `begin` (up to `end`, within one local row) map to
// consecutive whole-tensor indices. Asks table.global_index rather than restating each split.
int64_t consecutive_run(const ParamTable& table, const ParamInfo& p, int64_t begin, int64_t end);

// Calls fn(run) for the runs covering local elements [begin, end) of p, in order. A run never
// crosses a local row, and a local row always lies in one row of the whole tensor.
template <class Fn>
void for_each_run(const ParamTable& table, const ParamInfo& p, int64_t begin, int64_t end, Fn&& fn) {
  const int64_t local_cols = p.shape.back();
  for (int64_t i = begin; i < end;) {
    const int64_t row_end = std::min(end, (i / local_cols + 1) * local_cols);
    const int64_t length = consecutive_run(table, p, i, row_end);
    fn(ElementRun{i, table.global_index(p, i), length});
    i += length;
  }
}

// Per-tensor partial statistics packed into one buffer, so that a step reduces all tensors with
// one all_reduce per group.
class PartialStats {
 public:
  // sizes[k] values for tensor k of `table`.
  PartialStats(const ParamTable& table, const std::vector<int64_t>& sizes);
  float* of(size_t tensor) { return values_.data() + begin_[tensor]; }
  std::span<float> values() { return values_; }
  void fill(float value) { std::fill(values_.begin(), values_.end(), value); }
  // Every rank ends with the sum (or max) over all ranks holding parts of each tensor: first over
  // the shard group, then over the TP group. A replicated tensor is whole on every TP rank, so for
  // a sum only TP rank 0 contributes it (a max needs no such care).
  void reduce(const OptimizerGroups& groups, comm::ReduceOp op);

 private:
  const ParamTable& table_;
  std::vector<int64_t> begin_;  // tensor k's values are [begin_[k], begin_[k + 1])
  tracked_vector<float, MemoryCategory::workspaces> values_;   // scratch, not optimizer state
};

}  // namespace lattice
