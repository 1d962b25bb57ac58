#pragma once
// One layout, fully evaluated: memory, FLOPs, utilisation and predicted time.
#include "plan/hardware.hpp"
#include "plan/memory_model.hpp"
#include "plan/plan_request.hpp"
#include "plan/time_model.hpp"

namespace lattice::plan {

struct FlopsPlan {
  double model_flops = 0;             // eq. 7 (MoE: 3 × forward FLOPs per token × tokens), per iteration, all devices
  double hardware_flops = 0;          // eq. 8's form (the paper's HFU)
  double hardware_flops_counted = 0;  // the literal operation count
};

struct Utilisation {
  double iteration_s = 0;  // measured (--iteration-time) or predicted
  bool measured = false;
  double peak_flops = 0;   // per device
  double mfu = 0, hfu = 0, hfu_counted = 0;  // fractions
};

struct Plan {
  PlanRequest request;
  MemoryPlan memory;
  FlopsPlan flops;
  TimePlan time;
  Utilisation use;
};

FlopsPlan plan_flops(const PlanRequest& r);
// MFU/HFU over `gpus` devices of `peak_flops` each for an iteration of `seconds`.
Utilisation utilisation(const FlopsPlan& f, int gpus, double seconds, double peak_flops);

// iteration_time <= 0: use the predicted time; peak_flops <= 0: the preset's peak for the dtype.
Plan evaluate(const PlanRequest& r, const Hardware& hw, double iteration_time = 0, double peak_flops = 0);

}  // namespace lattice::plan
