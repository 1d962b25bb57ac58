#pragma once
// A Chrome trace (the Trace Event format Perfetto and chrome://tracing open) of what each rank did:
// forward, backward, receive (waiting for a peer), send (waiting for sends to drain), optimizer.
// Ranks record locally; rank 0 gathers every rank's events and writes one file, a track per rank.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace lattice {

namespace comm {
class Communicator;
}

class Trace {
 public:
  enum class Kind : int64_t { forward, backward, receive, send, optimizer };
  static Trace& instance();

  void enable() { enabled_ = true; }
  bool enabled() const { return enabled_; }
  int64_t now_us() const;
  void record(Kind kind, int64_t start_us, int64_t end_us, int64_t micro_batch = -1, int64_t chunk = -1,
              int64_t step = -1);

  // Collective over `world` (null: this process alone); rank 0 writes `path` atomically.
  void write(const std::string& path, comm::Communicator* world, int rank) const;

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
