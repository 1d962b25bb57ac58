#pragma once
// ZeRO over the data-parallel group (SPEC §8), bucket by bucket (model/bucket_store.hpp). Each
// bucket — a layer, the token embedding, the position embedding, the final LayerNorm — is split
// evenly over the N_d ranks (uneven last chunk, no padding), so rank r owns one piece of every
// bucket; its pieces, concatenated in bucket order, are its shard. The optimizer keeps states for
// the shard only (stage 1), the gradient is kept for the shard only (stage 2: each bucket's gradient
// lives in a transient buffer from the moment backward writes it until its reduce-scatter lands),
// and so are the parameters (stage 3: each bucket is all-gathered right before forward and again
// before backward, freed after use, the next layer's gather prefetched while one computes).
//   stage 1: reduce-scatter + all-gather = the 2Ψ of an all-reduce;  stage 3: + a second gather = 3Ψ.
// With 16-bit weights (stages 2–3), the weights and the gradient shard are kept in 16 bits and the
// fp32 masters of the owned pieces sit beside the optimizer's moments; the wire carries fp32.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "comm/communicator.hpp"
#include "model/bucket_store.hpp"
#include "engine/owned_grads.hpp"
#include "tensor/half.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

class ZeroStates final : public BucketStore {
 public:
  // `half` (stages 2–3; null = fp32): 16-bit weights and gradients. `bf16_gemms`: the model's GEMMs
  // read bf16 weights (params_bf16).
  ZeroStates(comm::Communicator& dp, int stage, std::vector<Bucket> buckets, const HalfFormat* half = nullptr,
             bool bf16_gemms = false, bool prefetch = true);
  int stage() const { return stage_; }
  const std::vector<FlatPiece>& owned() const { return owned_; }  // non-empty pieces, bucket order
  int64_t shard_size() const { return shard_size_; }

  // Stages 1–2: the model's full parameters (the master copy of the owned pieces lives in them).
  void set_full_params(float* params) { full_params_ = params; }
  // Stage 3 (or 16-bit weights): keep this rank's pieces of the full parameters, and the 16-bit
  // weights; the model then frees its copy.
  void take_params(const float* full);
  // The same from the seed (stage 3), each piece initialised where it lives: the whole model never
  // exists on one rank.
  void init_params(const ParamTable& table, uint64_t seed, int real_vocab);
  // The fp32 values of the owned pieces when they live here (stage-3 shard, or the 16-bit runs'
  // masters), in shard order; null when they live in the model's full buffer.
  float* master();

  // One step: begin_step; backward (stage 1: reduce_bucket per finished bucket, from the model's
  // full gradient; stages 2–3: the BucketStore calls); finish_reduce; optimizer on owned_grads();
  // gather_params (stages 1–2); end_step.
  void begin_step();
  void reduce_bucket(int bucket, const float* full_grads);
  // The same from a bucket-sized buffer this object keeps until the reduction lands.
  void reduce_bucket(int bucket, TrackedArray<float> values);
  void finish_reduce(const float* full_grads);
  OwnedGrads owned_grads();
  std::vector<float*> master_pieces();  // where each owned piece's fp32 values are updated
  void gather_params();
  void end_step();

  // Every rank's updated shard values, bucket by bucket, into full-size 16-bit weights.
  void gather_narrowed(const float* shard_values, const HalfFormat& format, uint16_t* full16);
  // Every rank's shard values (e.g. Adam moments, or stage-3 parameters) → the full-size array.
  std::vector<float> gather_full(const float* shard_values);
  // This rank's pieces of a full-size array → shard_values.
  void scatter_full(const float* full, float* shard_values) const;
  // The largest amount of gather/scatter buffers alive at once, measured by the allocator.
  int64_t transient_peak_bytes() const { return transient_peak_.bytes(); }
  // Seconds this rank blocked on ZeRO's collectives since begin_step (gathers stage 3 waited
  // for, reduce-scatters that had not landed): what prefetching and overlap did not hide.
  double wait_seconds() const { return wait_s_; }

  // BucketStore (stages 2–3).
  bool holds_params() const override { return stage_ >= 3 || half_; }
  const float* params(int bucket, int next) override;
  const uint16_t* params_bf16(int bucket) override;
  void params_done(int bucket) override;
  float* grads(int bucket) override;
  void grads_done(int bucket) override;

 private:
  struct Gathered : TransientWeights {
    TrackedArray<float> piece;  // this rank's piece widened (16-bit), until the gather lands
    comm::Handle pending;
  };
  struct Reducing {
    int bucket;
    TrackedArray<float> full, mine;  // the bucket's gradient; this rank's summed piece
    comm::Handle pending;
  };
  void keep_params(const std::function<void(const FlatPiece&, float*)>& fill, const float* full);
  void launch_gather(int bucket);
  void ready(Gathered& g);
  void complete_oldest_reduce();
  void note_transient() { transient_peak_.note(); }
  std::span<const int> counts(int bucket) const { return {counts_.data() + size_t(bucket) * n_, size_t(n_)}; }
  FlatPiece piece(int bucket) const { return pieces_[size_t(bucket)]; }

  comm::Communicator& dp_;
  int stage_, n_;
  std::vector<Bucket> buckets_;
  std::vector<int> counts_;             // [bucket][rank]: elements of each rank's piece
  std::vector<FlatPiece> pieces_;       // this rank's piece of each bucket (may be empty)
  std::vector<int64_t> shard_offset_;   // where each bucket's piece starts in the shard
  std::vector<FlatPiece> owned_;
  std::vector<int> owned_bucket_;
  int64_t shard_size_ = 0, total_ = 0;  // total_: the flat buffer's size
  const HalfFormat* half_;
  bool bf16_gemms_, prefetch_;
  double wait_s_ = 0;
  float* full_params_ = nullptr;
  TrackedArray<float> shard_params_, shard_grads_;  // fp32 runs
  TrackedArray<uint16_t> params16_, grads16_;       // 16-bit runs: full (stage 2) or shard weights; shard grads
  TrackedArray<float> master_, grads32_;            // 16-bit runs: fp32 masters; the step's widened shard grads
  std::vector<bool> reduced_;                       // stage 1: bucket launched this step
  std::deque<Reducing> reducing_;                   // in flight, oldest first
  TransientGrads bucket_grads_;                     // stages 2–3: being written by backward
  std::map<int, Gathered> gathered_;                // stage 3
  TransientPeak transient_peak_;
};

}  // namespace lattice::parallel
