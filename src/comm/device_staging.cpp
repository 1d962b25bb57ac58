#include "comm/device_staging.hpp"

#include "tensor/device_memory.hpp"

namespace lattice::comm {

bool staging_active() { return !device_memory().host_addressable; }

Staged::Staged(std::span<const float> span, bool in, bool out) : out_(out) {
  float* p = const_cast<float*>(span.data());
  const DeviceMemory& m = device_memory();
  if (span.empty() || m.host_addressable || !m.holds || !m.holds(p)) {
    host_span_ = {p, span.size()};
    return;
  }
  device_ = p;
  copy_.resize(span.size());
  host_span_ = {copy_.data(), copy_.size()};
  if (in) copy_to_host(copy_.data(), p, int64_t(span.size()));
}

void Staged::done() {
  if (device_ && out_) copy_to_device(device_, copy_.data(), int64_t(copy_.size()));
  device_ = nullptr;
}

StagedPending::StagedPending(std::unique_ptr<PendingOp> inner, Staged a, Staged b)
    : inner_(std::move(inner)), a_(std::move(a)), b_(std::move(b)) {}

void StagedPending::finish() {
  if (finished_) return;
  finished_ = true;
  a_.done(), b_.done();
}

void StagedPending::wait() {
  inner_->wait();
  finish();
}

bool StagedPending::test() {
  if (!inner_->test()) return false;
  finish();
  return true;
}

}  // namespace lattice::comm
