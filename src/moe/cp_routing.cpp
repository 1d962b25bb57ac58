// Routing under context parallelism (cp_routing.hpp).
#include "moe/cp_routing.hpp"

#include <algorithm>
#include <cstring>

namespace lattice::moe {

int64_t LocalTokens::local_of(int64_t f) const {
  const int64_t at = split.local_of(f % split.S);
  return at < 0 ? -1 : f / split.S * split.local() + at;
}

void gather_tokens(const parallel::ContextParallel& cp, const LocalTokens& t, const float* local, int parts,
                   int64_t width, float* const* full, tracked_vector<float, MemoryCategory::workspaces>& staging) {
  const int c = cp.size();
  const int64_t n = t.count(), block = int64_t(parts) * n * width;
  if (int64_t(staging.size()) < c * block) staging.resize(size_t(c * block));
  cp.group->all_gather({local, size_t(block)}, {staging.data(), size_t(c * block)});
  const int64_t sl = t.split.local(), S = t.split.S;
  for (int q = 0; q < c; ++q) {
    const parallel::SequenceSplit theirs{S, c, q};
    for (int p = 0; p < parts; ++p) {
      const float* src = staging.data() + q * block + int64_t(p) * n * width;
      for (int64_t row = 0; row < t.rows; ++row)
        theirs.runs(0, sl, [&](int64_t at, int64_t global, int64_t len) {
          std::memcpy(full[p] + (row * S + global) * width, src + (row * sl + at) * width, size_t(len * width) * 4);
        });
    }
  }
}

void keep_local(Routing& r, const LocalTokens& t) {
  int64_t kept = 0;
  std::fill(r.load.begin(), r.load.end(), 0);
  for (int64_t a = 0; a < r.size(); ++a) {
    const int64_t n = t.local_of(r.token[size_t(a)]);
    if (n < 0) continue;
    r.token[size_t(kept)] = int32_t(n), r.expert[size_t(kept)] = r.expert[size_t(a)], r.gate[size_t(kept)] = r.gate[size_t(a)];
    ++r.load[size_t(r.expert[size_t(a)])];
    ++kept;
  }
  r.token.resize(size_t(kept)), r.expert.resize(size_t(kept)), r.gate.resize(size_t(kept));
}

}  // namespace lattice::moe
