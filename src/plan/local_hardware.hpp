#pragma once
// `lattice plan --hardware local`: this machine as `mpirun -np ranks` runs a layout on it, so the
// planner predicts the engine's own runs here (docs/plan.md, "Planning this machine"). The ranks
// share the host's cores (each gets the share LocalHost::share says), GEMMs are timed here per shape
// at the run's threads, element-wise work moves bytes at the measured rate, and communication costs
// what a saved `lattice bench` of that many ranks measured (plan::bench_result_path): read when it
// exists, else measured now by `mpirun -np ranks lattice bench --save` within a minute.
#include "plan/hardware.hpp"

namespace lattice::plan {

// ranks: the processes mpirun starts (t·p·DP); threads: OpenMP threads each runs. `announce`: say on
// stderr which bench file was read or what is being measured.
Hardware local_hardware(int ranks, int threads, bool announce);

}  // namespace lattice::plan
