#pragma once
// A Chrome trace (the Trace Event format Perfetto and chrome://tracing open) of what each rank did:
// forward, backward (or its input and weight passes), receive (waiting for a peer), send (waiting for
// sends to drain), optimizer.
// Ranks record locally here; report/trace_writer.hpp gathers every rank's events into one file.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lattice {

class Trace {
 public:
  // Appended kinds keep the stored values of the earlier ones.
  enum class Kind : int64_t { forward, backward, receive, send, optimizer, backward_input, backward_weight };
  static Trace& instance();

  void enable() { enabled_ = true; }
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  int64_t now_us() const;
  void record(Kind kind, int64_t start_us, int64_t end_us, int64_t micro_batch = -1, int64_t chunk = -1,
              int64_t step = -1);

  // Flat records of six values: kind, start, end, micro-batch, chunk, step.
  const std::vector<int64_t>& events() const { return events_; }

 private:
  bool enabled_ = false;
  std::vector<int64_t> events_;  // kind, start, end, micro-batch, chunk, step
};

// Records [construction, destruction) as one event when tracing is on.
class TraceSpan {
 public:
  TraceSpan(Trace::Kind kind, int64_t micro_batch = -1, int64_t chunk = -1, int64_t step = -1)
      : kind_(kind), mb_(micro_batch), chunk_(chunk), step_(step),
        start_(Trace::instance().enabled() ? Trace::instance().now_us() : 0) {}
  ~TraceSpan() {
    if (Trace::instance().enabled())
      Trace::instance().record(kind_, start_, Trace::instance().now_us(), mb_, chunk_, step_);
  }

 private:
  Trace::Kind kind_;
  int64_t mb_, chunk_, step_, start_;
};

}  // namespace lattice
