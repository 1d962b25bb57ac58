#include "core/trace.hpp"

namespace lattice {

Trace& Trace::instance() {
  // Never destroyed: a Handle waited in a static's destructor may still ask whether tracing is on.
  static Trace* trace = new Trace;
  return *trace;
}

const char* Trace::name(Kind kind) {
  static const char* const names[kKinds] = {
      "forward", "backward",  "receive", "send",    "optimizer", "backward_input", "backward_weight", "gemm",
      "recompute", "step",    "comm_tp", "comm_dp", "comm_pp",   "comm_embedding", "comm_ep",        "comm_other",
      "receive_wait", "comm_cp"};
  const auto k = int64_t(kind);
  return k >= 0 && k < kKinds ? names[k] : "unknown";
}

int64_t Trace::now_ns() const {
  // The monotonic clock's own epoch, shared by every process on a machine, so ranks line up.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Trace::record(Kind kind, int64_t start_ns, int64_t end_ns, int64_t micro_batch, int64_t chunk, int64_t step) {
  events_.insert(events_.end(), {int64_t(kind), start_ns, end_ns, micro_batch, chunk, step});
}

}  // namespace lattice
