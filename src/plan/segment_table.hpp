#pragma once
// The planner's table of uniform segment lengths (issue 19, docs/design.md §4): for each pipeline stage
// under --recompute full, every k that divides its chunks, with the kept bytes K = (n/k)·I a micro-batch
// and the stage's accounted peak, the least marked, beside k* = √(n·I/A), d* = √(n·A/I) segments and
// Chen's √n (which holds only when a layer's live bytes A equal its input I).
#include <vector>

#include "plan/plan_request.hpp"

namespace lattice::plan {

struct SegmentRow {
  int k = 1;
  double kept = 0, peak = 0;
  bool least = false;
};
struct StageSegments {
  int stage = 0;
  int layers = 0;        // n: the layers of one of its chunks (uneven chunks: their greatest common divisor's rows)
  double I = 0, A = 0;   // a checkpoint's kept input, a re-run layer's live bytes
  double k_star = 0, d_star = 0, chen = 0;
  std::vector<SegmentRow> rows;
};

// Empty unless --recompute full on a dense model.
std::vector<StageSegments> segment_table(const PlanRequest& r);

}  // namespace lattice::plan
