#pragma once
// --search: every layout of `gpus` devices (t inside a node, the context-parallel size c, p, m, DP, SP,
// recompute mode and layer count, micro-batch, ZeRO stage; for an MoE model every expert-parallel size
// e dividing DP and E), those that fit ranked by predicted iteration time.
#include <cstddef>
#include <functional>
#include <vector>

#include "plan/evaluate.hpp"

namespace lattice::plan {

struct SearchResult {
  std::vector<Plan> best;  // fastest first, at most `top`
  size_t considered = 0;   // layouts that can run (inconsistent ones are skipped silently)
  size_t fitting = 0;
};

// `base` supplies the model, global batch, gpus, memory and activation dtype; its layout is
// ignored. peak_flops <= 0 takes the preset's peak for the MFU column. `progress`, when given, is
// called about every 10 s of a long search, on the calling thread, with the layouts weighed so far,
// the search's points (t, c, p, m, DP, e, micro-batch, ZeRO) done and in all, and the seconds spent. The layouts are weighed on `threads` threads (0: every CPU this process may run
// on); the result does not depend on how many.
SearchResult search_layouts(const PlanRequest& base, const Hardware& hw, size_t top, double peak_flops = 0,
                            const std::function<void(size_t, size_t, size_t, double)>& progress = {},
                            int threads = 0);

}  // namespace lattice::plan
