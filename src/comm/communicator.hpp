#pragma once
// A process group's collectives, as the model and trainer see them. Backend-neutral: the MPI
// backend implements the do_* hooks; an NCCL backend could be added without touching model code.
// The public calls are non-virtual so every backend counts traffic the same way (traffic.hpp).
//
// Buffers are float spans; a call returns when this rank's buffers are ready (blocking calls) or
// when the Handle's wait() returns (non-blocking calls). Issue collectives from one thread only.
// Every blocking call and every wait is a trace span (core/trace.hpp) of its group's kind (trace_kind).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "comm/traffic.hpp"
#include "comm/watchdog.hpp"
#include "core/trace.hpp"

namespace lattice::comm {

enum class ReduceOp { sum, max };

// An operation in flight. Backends implement it; callers hold it through a Handle.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // complete now? (never blocks; gives the backend a chance to progress)
};

// Move-only owner of a non-blocking operation. wait() is idempotent; destroying a Handle that was
// not waited waits, so a buffer is never released while the backend still reads or writes it.
class Handle {
 public:
  Handle() = default;
  // `what` and `group` (static strings) name the wait for the comm watchdog; `span` is its trace kind.
  Handle(std::unique_ptr<PendingOp> op, const char* what, const char* group,
         Trace::Kind span = Trace::Kind::comm_other)
      : op_(std::move(op)), what_(what), group_(group), span_(span) {}
  Handle(Handle&&) noexcept = default;
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      wait();
      op_ = std::move(other.op_);
      what_ = other.what_, group_ = other.group_, span_ = other.span_;
    }
    return *this;
  }
  ~Handle() { wait(); }

  void wait() {
    if (op_) {
      const TraceSpan span(span_);
      const WaitScope scope(what_, group_);
      op_->wait();
      op_.reset();
    }
  }
  bool pending() const { return op_ != nullptr; }
  // Completed (or nothing in flight)? Releases the operation when it has.
  bool test() {
    if (op_ && op_->test()) op_.reset();
    return op_ == nullptr;
  }

 private:
  std::unique_ptr<PendingOp> op_;
  const char* what_ = "wait";
  const char* group_ = "";
  Trace::Kind span_ = Trace::Kind::comm_other;
};

// The trace kind of a wait on a group of `kind`: comm_tp, comm_dp (expert_dp too: a gradient
// reduction), comm_pp, comm_embedding, comm_ep, comm_cp; comm_other for the model and world groups.
Trace::Kind trace_kind(GroupKind kind);

class Communicator {
 public:
  // `ledger` (may be null) receives this group's traffic under `kind`; it must outlive *this.
  Communicator(GroupKind kind, TrafficLedger* ledger) : kind_(kind), ledger_(ledger) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  GroupKind kind() const { return kind_; }

  // In place: every rank ends with the element-wise sum (or max) over the group.
  void all_reduce(std::span<float> data, ReduceOp op = ReduceOp::sum);
  // input holds size() equal chunks; rank r receives the sum of every rank's chunk r in output.
  void reduce_scatter(std::span<const float> input, std::span<float> output);
  // output = the inputs of ranks 0, 1, ..., size()-1 concatenated (equal chunks).
  void all_gather(std::span<const float> input, std::span<float> output);
  // data of group rank `root` copied to every rank.
  void broadcast(std::span<float> data, int root);
  // input and output hold size() equal chunks: chunk j of rank i lands in chunk i of rank j.
  void all_to_all(std::span<const float> input, std::span<float> output);
  // Uneven all-to-all (MoE token dispatch and return): send_counts[r] floats go to group rank r,
  // taken from `input` where the chunks lie contiguous in rank order; recv_counts[r] floats arrive
  // from rank r into `output`, likewise. Counts may be 0 and the buffers longer than their sum. Rank
  // r's recv_counts[q] must equal rank q's send_counts[r]: exchange them first (all_to_all_counts).
  // Counted as all_to_all with the exact bytes sent to other ranks (all_to_all_v_bytes_sent).
  void all_to_all_v(std::span<const float> input, std::span<const int> send_counts, std::span<float> output,
                    std::span<const int> recv_counts);
  // One int per rank each way: send[r] goes to rank r, recv[q] comes from rank q.
  void all_to_all_counts(std::span<const int> send, std::span<int> recv);
  // Point-to-point with group ranks; `tag` tells apart messages between the same pair.
  void send(std::span<const float> data, int dest, int tag = 0);
  void recv(std::span<float> data, int source, int tag = 0);
  // Returns once a message from `source` with `tag` can be received, without receiving it: the wait
  // for the peer to send, apart from the copy recv() then does (no trace span: the caller names it).
  void probe(int source, int tag = 0);
  void barrier();

  // Non-blocking variants: the buffers must stay alive and untouched until wait().
  [[nodiscard]] Handle all_reduce_async(std::span<float> data, ReduceOp op = ReduceOp::sum);
  // Uneven chunks: rank r's chunk holds counts[r] floats (input of reduce_scatter_v and output of
  // all_gather_v are the chunks in rank order). all_gather_v runs in place when `input` already
  // sits at this rank's chunk of `output`. ZeRO's buckets, split over DP ranks without padding.
  [[nodiscard]] Handle reduce_scatter_v_async(std::span<const float> input, std::span<float> output,
                                              std::span<const int> counts);
  [[nodiscard]] Handle all_gather_v_async(std::span<const float> input, std::span<float> output,
                                          std::span<const int> counts);
  [[nodiscard]] Handle send_async(std::span<const float> data, int dest, int tag = 0);
  [[nodiscard]] Handle recv_async(std::span<float> data, int source, int tag = 0);

 protected:
  // Whether the operations move data. A group that moves nothing (silent_communicator.hpp) has its
  // device spans left where they are: staging them through the host would time copies no run makes.
  virtual bool moves_data() const { return true; }
  virtual void do_all_reduce(std::span<float> data, ReduceOp op) = 0;
  virtual void do_reduce_scatter(std::span<const float> input, std::span<float> output) = 0;
  virtual void do_all_gather(std::span<const float> input, std::span<float> output) = 0;
  virtual void do_broadcast(std::span<float> data, int root) = 0;
  virtual void do_all_to_all(std::span<const float> input, std::span<float> output) = 0;
  virtual void do_all_to_all_v(std::span<const float> input, std::span<const int> send_counts,
                               std::span<float> output, std::span<const int> recv_counts) = 0;
  virtual void do_all_to_all_counts(std::span<const int> send, std::span<int> recv) = 0;
  virtual void do_send(std::span<const float> data, int dest, int tag) = 0;
  virtual void do_recv(std::span<float> data, int source, int tag) = 0;
  virtual void do_probe(int /*source*/, int /*tag*/) {}  // a backend without one waits in do_recv
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<PendingOp> do_all_reduce_async(std::span<float> data, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> do_reduce_scatter_v_async(std::span<const float> input,
                                                               std::span<float> output,
                                                               std::span<const int> counts) = 0;
  virtual std::unique_ptr<PendingOp> do_all_gather_v_async(std::span<const float> input, std::span<float> output,
                                                           std::span<const int> counts) = 0;
  virtual std::unique_ptr<PendingOp> do_send_async(std::span<const float> data, int dest, int tag) = 0;
  virtual std::unique_ptr<PendingOp> do_recv_async(std::span<float> data, int source, int tag) = 0;

 private:
  bool stages() const;  // whether device spans go through the host (device_staging.hpp)
  void count(CollectiveOp op, size_t floats, int root = 0);  // ring accounting (traffic.hpp)
  void record(CollectiveOp op, double sent_bytes, int64_t payload_bytes);  // exact bytes
  void check_peer(int peer, const char* what) const;
  size_t chunk_of(size_t whole, size_t part, const char* what) const;
  void check_counts(size_t whole, size_t mine, std::span<const int> counts, const char* what) const;
  size_t check_v_counts(size_t buffer, std::span<const int> counts, const char* which) const;

  GroupKind kind_;
  TrafficLedger* ledger_;
};

}  // namespace lattice::comm
