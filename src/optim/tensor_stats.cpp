#include "optim/tensor_stats.hpp"

#include <stdexcept>

namespace lattice {

namespace {

int64_t full_numel(const ParamInfo& p) {
  int64_t n = 1;
  for (int64_t d : p.full_shape) n *= d;
  return n;
}

}  // namespace

std::vector<TensorSlots> layout_slots(const ParamTable& table) {
  std::vector<TensorSlots> slots;
  int64_t offset = 0;
  for (const ParamInfo& p : table.params()) {
    TensorSlots s;
    s.factored = p.full_shape.size() == 2;
    s.rows = s.factored ? p.full_shape[0] : full_numel(p);
    s.cols = s.factored ? p.full_shape[1] : 0;
    s.offset = offset;
    offset += s.size();
    slots.push_back(s);
  }
  return slots;
}

int64_t total_slots(const std::vector<TensorSlots>& slots) {
  return slots.empty() ? 0 : slots.back().offset + slots.back().size();
}

std::vector<int64_t> slot_sizes(const std::vector<TensorSlots>& slots) {
  std::vector<int64_t> sizes;
  for (const TensorSlots& s : slots) sizes.push_back(s.size());
  return sizes;
}

std::vector<Optimizer::TensorState> name_slots(const ParamTable& table, const std::vector<TensorSlots>& slots,
                                               float* values, const std::string& row_prefix,
                                               const std::string& col_prefix, const std::string& element_prefix) {
  std::vector<Optimizer::TensorState> states;
  for (size_t k = 0; k < slots.size(); ++k) {
    const TensorSlots& s = slots[k];
    const std::string& name = table.params()[k].name;
    if (s.factored) {
      states.push_back({row_prefix + name, {s.rows}, values + s.row(0)});
      states.push_back({col_prefix + name, {s.cols}, values + s.col(0)});
    } else {
      states.push_back({element_prefix + name, {s.rows}, values + s.offset});
    }
  }
  return states;
}

// global_index is strictly increasing along a local row for every split, so the elements
// [begin, begin + n) are consecutive in the whole tensor exactly when the last one is n - 1 past
// the first; that property holds for every shorter prefix too, so the longest run is found by
// bisection.
int64_t consecutive_run(const ParamTable& table, const ParamInfo& p, int64_t begin, int64_t end) {
  const int64_t first = table.global_index(p, begin);
  auto consecutive = [&](int64_t n) { return table.global_index(p, begin + n - 1) - first == n - 1; };
  int64_t lo = 1, hi = end - begin;
  if (consecutive(hi)) return hi;  // the usual case: the whole rest of the row
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (consecutive(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

PartialStats::PartialStats(const ParamTable& table, const std::vector<int64_t>& sizes) : table_(table) {
  if (sizes.size() != table.params().size()) throw std::logic_error("PartialStats: one size per tensor expected");
  begin_.push_back(0);
  for (int64_t n : sizes) begin_.push_back(begin_.back() + n);
  values_.assign(static_cast<size_t>(begin_.back()), 0.0f);
}

void PartialStats::reduce(const OptimizerGroups& groups, comm::ReduceOp op) {
  if (groups.shard) groups.shard->all_reduce(values_, op);
  if (!groups.tp) return;
  if (op == comm::ReduceOp::sum && groups.tp->rank() != 0) {
    const auto& params = table_.params();
    for (size_t k = 0; k < params.size(); ++k)
      if (params[k].split == Split::replicated)
        std::fill(values_.begin() + begin_[k], values_.begin() + begin_[k + 1], 0.0f);
  }
  groups.tp->all_reduce(values_, op);
}

}  // namespace lattice
