#pragma once
// A Chrome trace (the Trace Event format Perfetto and chrome://tracing open) of what each rank did:
// forward, backward (or its input and weight passes), receive (waiting for a peer), send (waiting for
// sends to drain), optimizer; and, nested in those, what a step's time went to: the whole step, each
// GEMM, each recomputed forward, each wait on a collective by its group, and the pipeline receive's
// wait for the peer apart from its copy (report/trace_split.hpp turns these into the planner's parts).
// Ranks record locally here; report/trace_writer.hpp gathers every rank's events into one file.
//
// Spans are recorded on one thread, the one that turned tracing on (the thread that issues the
// collectives), so on a rank they nest: a span opened inside another closes before it.
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace lattice {

class Trace {
 public:
  // Appended kinds keep the stored values of the earlier ones (old trace files still read).
  enum class Kind : int64_t {
    forward, backward, receive, send, optimizer, backward_input, backward_weight,
    gemm,            // one gemm() call outside an OpenMP parallel region (kernels/gemm.cpp)
    recompute,       // a layer's forward run again in its backward (full or selective recompute)
    step,            // one optimizer step: forward/backward of its micro-batches, reductions, update
    comm_tp, comm_dp, comm_pp, comm_embedding, comm_ep,  // a blocking collective or a wait, by group
    comm_other,      // the same on the model or world group
    receive_wait,    // a pipeline receive waiting for the peer to send (the copy is comm_pp)
    comm_cp,         // a blocking collective or a wait on the context-parallel group (all-to-all, ring)
  };
  static constexpr int kKinds = 18;
  static const char* name(Kind kind);  // "forward", ..., "receive_wait"; the file's `cat`

  static Trace& instance();

  // Records spans opened on the calling thread from now on.
  void enable() { set_enabled(true); }
  void set_enabled(bool on) {
    enabled_ = on;
    if (on) owner_ = std::this_thread::get_id();
  }
  // On, and called on the thread that turned it on.
  bool enabled() const { return enabled_ && std::this_thread::get_id() == owner_; }
  int64_t now_ns() const;
  void record(Kind kind, int64_t start_ns, int64_t end_ns, int64_t micro_batch = -1, int64_t chunk = -1,
              int64_t step = -1);

  // Flat records of six values: kind, start (ns), end (ns), micro-batch, chunk, step.
  const std::vector<int64_t>& events() const { return events_; }
  void clear() { events_.clear(); }

 private:
  bool enabled_ = false;
  std::thread::id owner_;
  std::vector<int64_t> events_;  // kind, start, end, micro-batch, chunk, step
};

// Records [construction, destruction) as one event when tracing is on for this thread at both ends.
class TraceSpan {
 public:
  explicit TraceSpan(Trace::Kind kind, int64_t micro_batch = -1, int64_t chunk = -1, int64_t step = -1)
      : kind_(kind), mb_(micro_batch), chunk_(chunk), step_(step),
        start_(Trace::instance().enabled() ? Trace::instance().now_ns() : -1) {}
  ~TraceSpan() {
    if (start_ >= 0 && Trace::instance().enabled())
      Trace::instance().record(kind_, start_, Trace::instance().now_ns(), mb_, chunk_, step_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace::Kind kind_;
  int64_t mb_, chunk_, step_, start_;
};

}  // namespace lattice
