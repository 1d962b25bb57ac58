#pragma once
// Mixed precision (SPEC §8): the model's weights and gradients are kept in 16 bits (bf16 or fp16,
// 2Ψ + 2Ψ), the optimizer updates fp32 master weights (4Ψ, or its ZeRO-1 shard) beside its
// moments. The model reads each bucket's weights widened to fp32 (or, for bf16 GEMMs, the bf16
// values themselves) and writes each bucket's gradient into a transient fp32 buffer that is added
// into the 16-bit gradient when backward is done with it. fp16 adds dynamic loss scaling.
#include <cstdint>
#include <map>
#include <vector>

#include "comm/communicator.hpp"
#include "model/bucket_store.hpp"
#include "engine/owned_grads.hpp"
#include "engine/zero.hpp"
#include "tensor/half.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

class HalfStore final : public BucketStore {
 public:
  HalfStore(HalfFormat format, std::vector<Bucket> buckets, int64_t total, bool bf16_gemms);
  const HalfFormat& format() const { return format_; }
  uint16_t* params16() { return params16_.data(); }
  uint16_t* grads16() { return grads16_.data(); }
  void zero_grads();
  // The largest amount of transient buffers (widened weights, fp32 gradient buckets, the reduced
  // gradient) alive at once, measured by the allocator.
  int64_t transient_peak_bytes() const { return transient_peak_.bytes(); }
  void note_transient() { transient_peak_.note(); }

  bool holds_params() const override { return true; }
  const float* params(int bucket, int next) override;
  const uint16_t* params_bf16(int bucket) override;
  void params_done(int bucket) override;
  float* grads(int bucket) override;
  void grads_done(int bucket) override;

 private:
  HalfFormat format_;
  std::vector<Bucket> buckets_;
  bool bf16_gemms_;
  TrackedArray<uint16_t> params16_, grads16_;
  std::map<int, TransientWeights> widened_;
  TransientGrads bucket_grads_;
  TransientPeak transient_peak_;
};

// The optimizer's side of mixed precision: fp32 master weights (all, or the ZeRO-1 shard), the
// reduced fp32 gradient it reads, and the 16-bit weights refreshed from the masters after a step.
class MixedPrecision {
 public:
  // `full32`: the model's initial (or loaded) fp32 weights, the same on every DP rank; `zero`:
  // ZeRO-1's pieces, or null. No collective here (a constructor may fail on one rank alone).
  MixedPrecision(HalfStore& store, const float* full32, int64_t total, std::vector<Bucket> buckets,
                 parallel::ZeroStates* zero, comm::Communicator* dp);
  // The summed fp32 gradient of the owned pieces: the 16-bit gradient widened, all-reduced over
  // DP or (ZeRO-1) reduce-scattered. Valid until finish_step.
  parallel::OwnedGrads reduce();
  std::vector<float*> master_pieces();
  float* master() { return master_.data(); }  // owned elements, in piece order
  // Masters → 16-bit weights (ZeRO-1: the updated shards all-gathered first); `updated` false
  // (a step skipped for an fp16 overflow) only releases the step's buffers.
  void finish_step(bool updated);
  std::vector<float> full_master();  // the whole fp32 weights (collective under ZeRO-1)

 private:
  HalfStore& store_;
  int64_t total_;
  std::vector<Bucket> buckets_;
  parallel::ZeroStates* zero_;
  comm::Communicator* dp_;
  TrackedArray<float> master_;  // tagged "optimizer": part of the 12Ψ
  TrackedArray<float> grads32_;  // transient, whole buffer when not sharded
};

// fp16's dynamic loss scaling: the loss is multiplied by `scale` before backward; a step whose
// gradient holds an inf or NaN is skipped and the scale halved; after `window` clean steps it doubles.
struct LossScaler {
  static constexpr double kMaxScale = 4294967296.0;  // 2^32: scaled fp32 losses stay finite
  double scale = 65536.0;
  int64_t window = 1000, clean_steps = 0, skipped = 0;
  // Returns whether the step may be applied (and how the scale moves).
  bool update(bool finite);
};

}  // namespace lattice
