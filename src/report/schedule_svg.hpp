#pragma once
// The simulated timeline drawn as the familiar pipeline figure (GPipe / Megatron-LM papers): one
// row per rank, time to the right, a box per forward (blue) and backward (green) labelled by its
// micro-batch, shaded by model chunk under interleaving; white gaps are the bubble.
#include <string>

#include "report/simulate.hpp"

namespace lattice::parallel::pipeline {

inline constexpr int kMaxSvgActions = 20000;  // beyond this a drawing stops being readable

struct TimelineCaption {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int p = 1, n_mb = 1, m = 1;
  SimulationOptions options;
  int steps = 1;  // a run of PipeDream-2BW steps (build_run): step ends drawn as dashed lines
  bool measured = false;  // drawn from a trace: its bubble measured, not simulated
};

// A self-contained SVG document. Throws lattice::InputError above kMaxSvgActions actions.
std::string schedule_svg(const Simulation& sim, const TimelineCaption& caption);

}  // namespace lattice::parallel::pipeline
