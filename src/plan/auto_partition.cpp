#include "plan/auto_partition.hpp"

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "analysis/memory_categories.hpp"
#include "core/error.hpp"
#include "plan/memory_model.hpp"
#include "plan/time_model.hpp"

namespace lattice::plan {

analysis::PartitionCosts partition_costs(const PlanRequest& r, const Hardware& hw) {
  const int L = r.model.layers, p = r.layout.pp;
  const StageSeconds seconds = stage_seconds(r, hw);
  // Prefix sums: a stage's layer seconds and fully recomputed layers in O(1).
  auto time = std::make_shared<std::vector<double>>(size_t(L) + 1, 0.0);
  auto full = std::make_shared<std::vector<int>>(size_t(L) + 1, 0);
  for (int l = 0; l < L; ++l) {
    (*time)[size_t(l) + 1] = (*time)[size_t(l)] + seconds.layer[size_t(l)];
    (*full)[size_t(l) + 1] = (*full)[size_t(l)] + analysis::layer_fully_recomputed(r.layout, l, L);
  }
  // Two cases: world rank 0 (on the first stage) writes the checkpoint, the others do not.
  auto memory = std::make_shared<std::vector<analysis::MemoryCase>>(2, memory_case(r));
  (*memory)[0].writer = r.save;
  for (auto& m : *memory) m.layout.stage_layers.clear();  // each candidate stage is given its layers explicitly
  analysis::PartitionCosts c;
  c.layers = L;
  c.stages = p;
  const double head = seconds.head;
  c.seconds = [time, head, p](int stage, int i, int j) {
    return (*time)[size_t(j)] - (*time)[size_t(i)] + (stage == p - 1 ? head : 0.0);
  };
  // A stage's bytes depend only on the stage, its layer count and how many are fully recomputed.
  auto known = std::make_shared<std::map<std::tuple<int, int, int>, double>>();
  c.bytes = [memory, full, known](int stage, int i, int j) {
    const analysis::StageLayers layers{j - i, (*full)[size_t(j)] - (*full)[size_t(i)]};
    const auto key = std::make_tuple(stage, int(layers.count), int(layers.fully_recomputed));
    const auto it = known->find(key);
    if (it != known->end()) return it->second;
    const double bytes = double(analysis::rank_memory((*memory)[stage == 0 ? 0 : 1], stage, layers).accounted_peak);
    known->emplace(key, bytes);
    return bytes;
  };
  return c;
}

analysis::Partition auto_partition(const PlanRequest& r, const Hardware& hw, double memory_cap) {
  require(r.layout.virtual_stages == 1, "--pipeline-layers auto needs --virtual-stages 1");
  require(!r.model.moe.enabled(),
          "--pipeline-layers auto does not partition Mixture-of-Experts models yet: give the counts (3,4,4,1)");
  return analysis::partition_layers(partition_costs(r, hw), memory_cap);
}

}  // namespace lattice::plan
