#pragma once
// Communication of device buffers through the host (docs/gpu.md, "What runs on a device"): MPI
// reads and writes host memory, so a span that lies in the run's device memory (tensor/
// device_memory.hpp, a device the host cannot address) is copied to a host buffer before an
// operation that reads it and back after one that writes it. The Communicator stages every span it
// is given (communicator.cpp), so callers pass device buffers as they are; host spans pass untouched.
// The host copies are tracked (MemoryCategory::communication).
#include <cstddef>
#include <memory>
#include <span>

#include "comm/communicator.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::comm {

class Staged {
 public:
  // `in`: the operation reads the span (copied to the host now); `out`: it writes it (copied back
  // by done()).
  Staged(std::span<const float> span, bool in, bool out);
  Staged(Staged&&) = default;
  std::span<float> host() { return host_span_; }
  std::span<const float> host_const() const { return host_span_; }
  void done();  // once the operation completed: the host copy back to the device (out only)

 private:
  float* device_ = nullptr;  // null: the span is host memory and passes as it is
  bool out_ = false;
  std::span<float> host_span_;
  tracked_vector<float, MemoryCategory::communication> copy_;
};

// Whether any span of an operation needs staging (none on the CPU: the fast path stays as it was).
bool staging_active();

// A pending operation on staged spans: copies back once it completes.
class StagedPending final : public PendingOp {
 public:
  StagedPending(std::unique_ptr<PendingOp> inner, Staged a, Staged b);
  void wait() override;
  bool test() override;

 private:
  void finish();
  std::unique_ptr<PendingOp> inner_;
  Staged a_, b_;
  bool finished_ = false;
};

}  // namespace lattice::comm
