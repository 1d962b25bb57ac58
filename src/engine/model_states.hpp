#pragma once
// ModelStates: how this rank keeps the model's states — weights, gradients, fp32 master weights —
// decided in one place from the layout (ZeRO stage over the data-parallel group × weight precision),
// and the one BucketStore the model reads weights from and hands gradients to (docs/design.md §8).
//
// The flat parameter buffer is cut into buckets (a transformer layer, the token embedding, the
// position embedding, the final LayerNorm: model/bucket_store.hpp). Under ZeRO every bucket is split
// evenly over the N_d ranks (uneven last chunk, no padding), so rank r owns one piece of every
// bucket; its pieces, in bucket order, are its shard. Without ZeRO a rank owns everything.
//
//   stage  weights (fp32 | 16-bit)     gradients                          masters (16-bit runs)
//   0      whole                       whole, all-reduced by layer         whole
//   1      whole, all-gathered         whole, reduce-scattered by layer    shard
//   2      whole, all-gathered         shard: each bucket reduce-scattered shard
//                                      from a transient buffer per micro-batch
//   3      shard, gathered per bucket  shard, as stage 2                   shard
//          before forward and backward
//
// 16-bit weights are widened per bucket for compute (bf16 ones go to bf16 GEMMs as stored); 16-bit
// gradients accumulate each micro-batch's fp32 bucket; the wire carries fp32. Reductions of the
// last micro-batch start as backward finishes each layer, so they overlap the layers below.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "engine/owned_grads.hpp"
#include "engine/transient_buffers.hpp"
#include "model/bucket_store.hpp"
#include "model/gpt.hpp"
#include "optim/offloaded_states.hpp"
#include "tensor/half.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

// What decides how the states are kept (build it with states_layout()).
struct StatesLayout {
  int zero = 0;                                  // ZeRO stage (0 when the DP group has one rank)
  ParamsDType params_dtype = ParamsDType::fp32;  // weights and gradients
  bool bf16_gemms = false;                       // the model's GEMMs read bf16 weights
  bool prefetch = true;                          // stage 3: gather the next bucket while one computes
  int layers = 0;                                // buckets [0, layers) are transformer layers
  int versions = 1;  // PipeDream-2BW: 2 versions of the weights and gradients (docs/design.md §6.3)
};
StatesLayout states_layout(const LayoutConfig& layout, int layers, bool zero_prefetch);

class ModelStates final : public BucketStore {
 public:
  // `dp`: the data-parallel group (null: one process); `expert_dp`: the expert-data-parallel group
  // the experts' buckets are kept over (null: dp). Allocates the gradient buffers; the weights
  // come with keep_weights, once they are loaded. No collective here (a constructor may fail on
  // one rank alone).
  ModelStates(const StatesLayout& layout, std::vector<Bucket> buckets, comm::Communicator* dp,
              comm::Communicator* expert_dp = nullptr);

  int zero_stage() const { return stage_; }
  // The pieces of the flat buffer this rank updates (the whole buffer without ZeRO), in the order
  // of master_pieces() and reduce(); the group they are sharded over (null without ZeRO).
  const std::vector<FlatPiece>& owned() const { return owned_; }
  comm::Communicator* shard_group() const { return stage_ >= 1 ? dp_ : nullptr; }

  // Takes the model's weights (loaded or initialised, the same on every DP rank) into the form this
  // layout keeps, and becomes the model's bucket store. With `fill` (ZeRO-3, a model built without
  // weights), each piece is filled where it lives instead — fill(range, out) writes the weights of
  // flat offsets [range.begin, range.end): initialised from the seed or read from a checkpoint —
  // and the whole model never exists on one rank.
  using WeightSource = std::function<void(FlatPiece range, float* out)>;
  void keep_weights(GPT& model, const WeightSource& fill = {});
  // --offload-params (ZeRO-3, fp32 weights; before keep_weights): the weights' shard lives in the
  // optimizer's offload file (state 0, laid out like master_pieces()), not in memory; each bucket's
  // piece is read from it right before the bucket is gathered, and the optimizer updates it there.
  void keep_weights_in(OffloadedStates* file) { weight_file_ = file; }
  // Every DP replica starts from rank 0's weights (collective; after construction succeeded everywhere).
  void sync_replicas();

  // One step: begin_step; the micro-batches' backwards (the last one marked with
  // set_last_micro_batch); reduce; begin_update; the optimizer on reduce()'s gradient and
  // master_pieces(); finish_step.
  //
  // With two versions (PipeDream-2BW, docs/design.md §6.3) global batch t reads weight version t & 1
  // and accumulates into gradient version t & 1: use_version(t) selects them for params(), grads(),
  // begin_step() and reduce(). Update u runs on version u & 1 (batch u is done, so its weights are
  // free): begin_update brings the newest weights into it, the optimizer writes the next ones there.
  // The fp32 masters of 16-bit runs stay one copy, the newest. With one version these are no-ops.
  void use_version(uint64_t batch);
  void begin_update();
  void begin_step();
  // With two versions a batch's gradient completes in a later step: reductions wait for reduce().
  void set_last_micro_batch(bool last) { last_micro_batch_ = last && layout_.versions == 1; }
  OwnedGrads reduce();  // the summed fp32 gradient of the owned pieces, valid until finish_step
  std::vector<float*> master_pieces();
  // The bf16 compute copy of each master piece where an update may write it in the same pass
  // (Optimizer::fuses_passes): one rank's whole fp32 weights, ZeRO 0; else none (empty).
  std::vector<uint16_t*> master_bf16_pieces();
  // The updated masters become every rank's compute weights; `updated` false (an fp16 step skipped
  // for an overflow) only releases the step's buffers. `bf16_written`: the update wrote
  // master_bf16_pieces() already.
  void finish_step(bool updated, bool bf16_written = false);

  // Checkpoints: what this rank contributes when the whole model is written from `owned_values`
  // (laid out like master_pieces(): optimizer element states), or from the fp32 weights (masters of
  // 16-bit runs) when null. Sharded values give this rank's piece of every bucket; whole ones the
  // buckets of which it is its group's rank 0, so no element comes from two ranks of a DP group.
  // Nothing is copied or gathered (a checkpoint streams: docs/design.md §14).
  struct SavePiece {
    FlatPiece range;       // flat offsets of this rank's layout
    const float* values;   // values[0] is range.begin's
  };
  std::vector<SavePiece> save_pieces(const float* owned_values) const;
  // Two versions: the weights older than the newest (the version the next batch reads after a
  // drain), as save_pieces(nullptr) gives the newest: whole buckets from each group's rank 0,
  // widened from 16 bits into `widened` (checkpoint I/O) when kept in 16. Empty with one version.
  struct PreviousPieces {
    std::vector<SavePiece> pieces;
    TrackedArray<float> widened;
  };
  PreviousPieces previous_save_pieces() const;
  // Two versions, on resume (after keep_weights took the newest): fills the previous version, the one
  // global batch `next_batch` reads, from fill(range, out) over the whole flat buffer.
  void keep_previous_weights(const WeightSource& fill, uint64_t next_batch);
  int versions() const { return layout_.versions; }

  // The most transient bytes (gathered or widened weights, gradient buckets, reduced gradient) alive
  // at once, measured by the allocator; seconds blocked on ZeRO's collectives in the last step.
  int64_t transient_peak_bytes() const { return transient_peak_.bytes(); }
  double wait_seconds() const { return wait_s_; }

  // BucketStore
  const float* params(int bucket, int next) override;
  const uint16_t* params_bf16(int bucket) override;
  void params_done(int bucket) override;
  float* grads(int bucket) override;
  void grads_done(int bucket) override;

 private:
  // A bucket's weights made fp32 for the model (widened from 16 bits, or gathered from shards),
  // shared by its users until the last one is done; with a bf16 copy when bf16 GEMMs read weights
  // that are not stored in bf16.
  struct Gathered {
    TrackedArray<float> values;
    TrackedArray<uint16_t> bf16;
    TrackedArray<float> piece;  // this rank's piece widened (16-bit), until the gather lands
    comm::Handle pending;
    int users = 0;
  };
  struct Reducing {
    int bucket;
    TrackedArray<float> full, mine;  // a transient bucket gradient (or none); this rank's summed piece
    comm::Handle pending;
  };
  bool half() const { return half_.has_value(); }
  bool whole_weights() const { return stage_ < 3; }
  bool whole_grads() const { return stage_ < 2; }
  bool masters_sharded() const { return half() ? stage_ >= 1 : stage_ >= 3; }
  bool stored_bf16() const { return half() && !half_->fp16 && whole_weights(); }  // GEMMs read the weights as kept
  void refresh_bf16();  // fp32 whole weights → their bf16 copy, if GEMMs read one
  float* master_base() { return weight_file_ ? weight_file_->mapped() : half() ? masters_.data() : weights32_.data(); }
  const float* master_base() const {
    return weight_file_ ? weight_file_->mapped() : half() ? masters_.data() : weights32_.data();
  }
  int64_t offset_in(bool sharded, int bucket) const {
    return sharded ? shard_offset_[size_t(bucket)] : pieces_[size_t(bucket)].begin;
  }
  std::span<const int> counts(int bucket) const { return counts_[size_t(bucket)]; }
  // The group a bucket is data-parallel over: the expert-DP group for experts, else the DP group.
  comm::Communicator* group(int bucket) const { return buckets_[size_t(bucket)].experts ? expert_dp_ : dp_; }
  bool replicated(int bucket) const { return group(bucket) && group(bucket)->size() > 1; }
  FlatPiece piece(int bucket) const { return pieces_[size_t(bucket)]; }
  void note_transient() { transient_peak_.note(); }

  void launch_gather(int bucket);
  void ready(Gathered& g);
  void launch_reduction(int bucket);  // the last micro-batch's bucket of the whole fp32 gradient
  // Reduce-scatters a bucket's full gradient: `values`, or when empty the bucket of grads32_.
  void reduce_scatter(int bucket, TrackedArray<float> values, size_t max_in_flight);
  void complete_oldest();
  void finish_all_reduces();
  void gather_narrowed();  // masters' shards → every rank's whole 16-bit weights
  OwnedGrads shard_grads(float* shard);

  StatesLayout layout_;
  comm::Communicator* dp_;
  comm::Communicator* expert_dp_;  // experts' buckets (the DP group without expert parallelism)
  int stage_;
  std::optional<HalfFormat> half_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<int>> counts_;  // [bucket][rank of its group]: elements of each rank's piece
  std::vector<FlatPiece> pieces_;      // this rank's piece of each bucket (may be empty)
  std::vector<int64_t> shard_offset_;  // where each bucket's piece starts in the shard
  std::vector<FlatPiece> owned_;
  std::vector<int> owned_bucket_;
  int64_t shard_size_ = 0, total_ = 0;  // total_: the flat buffer's size

  TrackedArray<float> weights32_;       // fp32 runs: whole (stages 0–2) or shard (3; none when offloaded)
  OffloadedStates* weight_file_ = nullptr;  // --offload-params: the shard's file (state 0)
  TrackedArray<uint16_t> weights_bf16_; // fp32 whole weights read by bf16 GEMMs: their bf16 copy
  TrackedArray<uint16_t> weights16_;    // 16-bit runs: whole (stages 0–2) or shard (3)
  TrackedArray<float> masters_;         // 16-bit runs: fp32 masters, whole (stage 0) or shard
  TrackedArray<float> grads32_;         // fp32 runs: whole (stages 0–1) or shard (2–3)
  TrackedArray<uint16_t> grads16_;      // 16-bit runs: whole (stages 0–1) or shard (2–3)
  TrackedArray<float> reduced_;         // the step's summed gradient when grads32_ is not it (transient)
  // Two versions: the other version's weights and gradients, swapped with the arrays above by
  // use_version (a move, nothing copied), so everything else reads the arrays above.
  struct Version {
    TrackedArray<float> weights32, grads32;
    TrackedArray<uint16_t> weights_bf16, weights16, grads16;
  };
  Version other_;
  int version_ = 0;                     // the version the arrays above hold: batch & 1

  bool last_micro_batch_ = false;
  std::vector<bool> launched_;          // the last micro-batch's reductions started, by bucket
  std::vector<comm::Handle> all_reducing_;
  std::deque<Reducing> reducing_;       // reduce-scatters in flight, oldest first
  TransientGrads bucket_grads_;         // gradient buckets backward is writing (not whole fp32)
  std::map<int, Gathered> gathered_;    // weights made fp32 for compute (gathered or widened)
  TransientPeak transient_peak_;
  double wait_s_ = 0;
};

}  // namespace lattice::parallel
