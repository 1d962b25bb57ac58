#include "plan/auto_partition.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "analysis/memory_categories.hpp"
#include "core/error.hpp"
#include "core/recompute_plan.hpp"
#include "plan/memory_model.hpp"
#include "plan/time_model.hpp"

namespace lattice::plan {

analysis::PartitionCosts partition_costs(const PlanRequest& r, const Hardware& hw) {
  const int L = r.model.layers, p = r.layout.pp;
  const StageSeconds seconds = stage_seconds(r, hw);
  // Prefix sums: a stage's layer seconds in O(1).
  auto time = std::make_shared<std::vector<double>>(size_t(L) + 1, 0.0), again = time;
  for (int l = 0; l < L; ++l) (*time)[size_t(l) + 1] = (*time)[size_t(l)] + seconds.layer[size_t(l)];
  if (seconds.block_k >= 0) {  // the re-runs of a stage's first k layers
    again = std::make_shared<std::vector<double>>(size_t(L) + 1, 0.0);
    for (int l = 0; l < L; ++l) (*again)[size_t(l) + 1] = (*again)[size_t(l)] + seconds.recompute[size_t(l)];
  }
  // Each layer's recompute mode: none, selective, full of every layer and a plan fix it per layer;
  // uniform k makes a k-layer segment every k layers of each candidate stage, which k must divide, and
  // block k checkpoints the first k layers of each candidate stage (docs/design.md §3).
  const bool full_by_stage = r.layout.recompute == Recompute::full && r.layout.recompute_plan.empty();
  const bool uniform = full_by_stage && r.layout.recompute_method == RecomputeMethod::uniform;
  const int k = r.layout.recompute_layers;
  const bool block = full_by_stage && !uniform && k >= 0;
  auto modes = std::make_shared<std::vector<LayerRecompute>>();
  if (!uniform && !block) {
    LayoutConfig one_stage = r.layout;
    one_stage.pp = 1, one_stage.virtual_stages = 1, one_stage.stage_layers.clear();
    *modes = layer_recompute(one_stage, L);
  } else {
    require(k >= 1 && k <= L, "--recompute-method uniform needs --recompute-layers between 1 and --layers");
  }
  // Two cases: world rank 0 (on the first stage) writes the checkpoint, the others do not.
  auto memory = std::make_shared<std::vector<analysis::MemoryCase>>(2, memory_case(r));
  (*memory)[0].writer = r.save;
  for (auto& m : *memory) m.layout.stage_layers.clear();  // each candidate stage is given its layers explicitly
  analysis::PartitionCosts c;
  c.layers = L;
  c.stages = p;
  const double head = seconds.head;
  const int block_k = seconds.block_k;
  c.seconds = [time, again, block_k, head, p](int stage, int i, int j) {
    const int rerun_end = block_k < 0 ? i : std::min(j, i + block_k);
    return (*time)[size_t(j)] - (*time)[size_t(i)] + (*again)[size_t(rerun_end)] - (*again)[size_t(i)] +
           (stage == p - 1 ? head : 0.0);
  };
  // A stage's bytes depend only on the stage and its layers' modes. Block, none and selective order a
  // stage's modes one way (checkpoints lowest), so the counts of each mode say them: prefix counts make
  // that key in O(1), for the O(L²·p) questions the partitioner asks (--search asks it per layout).
  auto counts = std::make_shared<std::vector<std::array<int, 3>>>(size_t(L) + 1, std::array<int, 3>{0, 0, 0});
  for (int l = 0; !uniform && !block && l < L; ++l) {
    (*counts)[size_t(l) + 1] = (*counts)[size_t(l)];
    const LayerRecompute mode = (*modes)[size_t(l)];
    if (mode != LayerRecompute::in_segment) ++(*counts)[size_t(l) + 1][size_t(mode)];
  }
  using Key = std::tuple<int, int, int, int>;  // stage, then the counts (uniform and block: the stage's length)
  // Hashed, not ordered: the partitioner looks a stage up twice per (stage, first, last) it weighs, and
  // the search weighs millions; an ordered map's lookups were 40% of `plan --search`'s time.
  struct KeyHash {
    size_t operator()(const Key& k) const {
      const auto [a, b, c, d] = k;
      uint64_t h = uint64_t(uint32_t(a));
      for (int v : {b, c, d}) h = h * 0x9E3779B97F4A7C15ull ^ uint64_t(uint32_t(v));
      return size_t(h ^ (h >> 29));
    }
  };
  auto known = std::make_shared<std::unordered_map<Key, double, KeyHash>>();
  auto known_text = std::make_shared<std::map<std::pair<int, std::string>, double>>();
  const bool explicit_plan = !r.layout.recompute_plan.empty();
  c.bytes = [memory, modes, counts, known, known_text, uniform, block, k, explicit_plan](int stage, int i, int j) {
    if (uniform && (j - i) % k != 0) return std::numeric_limits<double>::infinity();
    const auto& a = (*counts)[size_t(i)];
    const auto& b = (*counts)[size_t(j)];
    const Key key = uniform || block ? Key{stage, j - i, -1, -1} : Key{stage, b[0] - a[0], b[1] - a[1], b[2] - a[2]};
    if (!explicit_plan) {
      const auto it = known->find(key);
      if (it != known->end()) return it->second;
    }
    analysis::StageLayers layers;
    if (uniform) {
      for (int l = 0; l < j - i; ++l) layers.modes.push_back(l % k == 0 ? LayerRecompute::checkpoint : LayerRecompute::in_segment);
    } else if (block) {
      for (int l = 0; l < j - i; ++l) layers.modes.push_back(l < k ? LayerRecompute::checkpoint : LayerRecompute::none);
    } else {
      layers.modes.assign(modes->begin() + i, modes->begin() + j);
    }
    std::pair<int, std::string> text_key;
    if (explicit_plan) {
      text_key = {stage, recompute_plan_text(layers.modes)};
      const auto it = known_text->find(text_key);
      if (it != known_text->end()) return it->second;
    }
    const double bytes = double(analysis::rank_memory((*memory)[stage == 0 ? 0 : 1], stage, layers).accounted_peak);
    if (explicit_plan) known_text->emplace(text_key, bytes);
    else known->emplace(key, bytes);
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
