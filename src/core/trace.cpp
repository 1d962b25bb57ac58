#include "core/trace.hpp"

namespace lattice {

Trace& Trace::instance() {
  static Trace trace;
  return trace;
}

int64_t Trace::now_us() const {
  // The monotonic clock's own epoch, shared by every process on a machine, so ranks line up.
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Trace::record(Kind kind, int64_t start_us, int64_t end_us, int64_t micro_batch, int64_t chunk, int64_t step) {
  events_.insert(events_.end(), {int64_t(kind), start_us, end_us, micro_batch, chunk, step});
}

}  // namespace lattice
