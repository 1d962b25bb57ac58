#include "model/gather_shards.hpp"

namespace lattice::parallel {

tracked_vector<float, MemoryCategory::checkpoint_io> gather_full(comm::Communicator* tp, const ModelConfig& config, const float* local) {
  const int t = tp ? tp->size() : 1;
  const ParamTable full_table(config);
  tracked_vector<float, MemoryCategory::checkpoint_io> full(size_t(full_table.total()), 0.0f);
  const ParamTable mine(config, t, tp ? tp->rank() : 0);
  const int64_t n = mine.total();
  tracked_vector<float, MemoryCategory::checkpoint_io> all(size_t(n * t));
  if (t > 1)
    tp->all_gather({local, size_t(n)}, {all.data(), all.size()});
  else
    all.assign(local, local + n);
  for (int r = 0; r < t; ++r) {
    const ParamTable shard(config, t, r);
    for (size_t k = 0; k < shard.params().size(); ++k) {
      const ParamInfo& p = shard.params()[k];
      const ParamInfo& f = full_table.params()[k];
      const float* src = all.data() + r * n + p.offset;
      for (int64_t i = 0; i < p.numel; ++i) {
        const int64_t g = shard.global_index(p, i);
        if (g < f.numel) full[size_t(f.offset + g)] = src[i];
      }
    }
  }
  return full;
}

}  // namespace lattice::parallel
