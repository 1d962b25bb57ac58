#pragma once
// Where a run's time goes, operation by operation (--profile-ops): the run's table of operations
// (backend/device_ops.hpp) wrapped so that each call is timed between two dev::synchronize() calls,
// on any device (the CPU's operations are synchronous already; a GPU's are timed to their end, which
// serialises them: the totals are the operations' own times, not the run's overlap). Copies and
// zeroing (tensor/device_memory.hpp) and the host's own work between operations are not operations:
// they are the step's time the table does not name.
#include <string>
#include <vector>

namespace lattice {

// Wraps the selected device's table (call after select_device, before the model is built).
void enable_op_profile();
bool op_profile_enabled();

struct OpTime {
  std::string op;
  long long calls = 0;
  double seconds = 0;
};
// Every operation called since the start (or the last reset), the most time first.
std::vector<OpTime> op_profile();
void reset_op_profile();  // the trainer's, after the warm-up step

}  // namespace lattice
