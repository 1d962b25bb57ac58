// ModelStates (model_states.hpp). Every choice of where a state lives is answered by the three
// predicates half(), whole_weights(), whole_grads(): the rest of the trainer never asks. Past 400
// lines: weights, gradients, their reductions, PipeDream-2BW's versions and the checkpoint pieces
// share those predicates and the bucket pieces, so they stay together.
#include "engine/model_states.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "backend/device_ops.hpp"
#include "tensor/bf16.hpp"

namespace lattice::parallel {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

StatesLayout states_layout(const LayoutConfig& layout, int layers, bool zero_prefetch) {
  // Kept over DP × CP: context-parallel ranks hold the same weights (docs/design.md §5.1).
  return {layout.dp * layout.cp > 1 ? layout.zero : 0, layout.params_dtype, layout.activation_dtype == DType::bf16,
          zero_prefetch, layers};
}

ModelStates::ModelStates(const StatesLayout& layout, std::vector<Bucket> buckets, comm::Communicator* dp,
                         comm::Communicator* expert_dp)
    : layout_(layout),
      dp_(dp),
      expert_dp_(expert_dp ? expert_dp : dp),
      stage_(dp && dp->size() > 1 ? layout.zero : 0),
      buckets_(std::move(buckets)) {
  if (layout.params_dtype != ParamsDType::fp32) half_ = HalfFormat{layout.params_dtype == ParamsDType::fp16};
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    const int n = stage_ >= 1 ? group(int(b))->size() : 1, r = stage_ >= 1 ? group(int(b))->rank() : 0;
    const int64_t chunk = (bucket.size() + n - 1) / n;
    counts_.emplace_back();
    for (int k = 0; k < n; ++k) {
      const int64_t begin = std::min(bucket.end, bucket.begin + k * chunk);
      const int64_t end = std::min(bucket.end, begin + chunk);
      counts_.back().push_back(int(end - begin));
      if (k == r) pieces_.push_back({begin, end});
    }
    // Without ZeRO the "shard" is the whole buffer in its own layout.
    shard_offset_.push_back(stage_ >= 1 ? shard_size_ : bucket.begin);
    if (pieces_.back().size() > 0) {
      owned_.push_back(pieces_.back());
      owned_bucket_.push_back(int(b));
    }
    shard_size_ += pieces_.back().size();
    total_ = std::max(total_, bucket.end);
  }
  if (stage_ == 0) owned_ = {{0, total_}}, owned_bucket_.clear();
  launched_.assign(buckets_.size(), false);
  const int64_t grads_size = whole_grads() ? total_ : shard_size_;
  if (half()) grads16_ = TrackedArray<uint16_t>(grads_size, "grads");
  else grads32_ = TrackedArray<float>(grads_size, "grads");
  if (layout_.versions == 2) {
    if (stage_ >= 3) throw std::logic_error("ModelStates: two weight versions need whole weights (ZeRO < 3)");
    if (half()) other_.grads16 = TrackedArray<uint16_t>(grads_size, "grads");
    else other_.grads32 = TrackedArray<float>(grads_size, "grads");
  }
}

void ModelStates::keep_weights(GPT& model, const WeightSource& fill) {
  const bool in_place = bool(fill);
  if (in_place && !masters_sharded()) throw std::logic_error("keep_weights: only sharded weights are filled in place");
  const float* full = in_place ? nullptr : model.params();
  // This rank's pieces of the fp32 weights, into a shard-layout buffer.
  auto fill_shard = [&](float* shard) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const FlatPiece p = pieces_[b];
      if (p.size() == 0) continue;
      if (in_place) fill(p, shard + shard_offset_[b]);
      else dev::copy(shard + shard_offset_[b], full + p.begin, p.size());
    }
  };
  if (!half() && whole_weights()) {
    weights32_ = model.take_params();
    weights_bf16_ = model.take_compute_weights();
  } else if (!half() && weight_file_) {  // --offload-params: filled through the file's mapping
    fill_shard(weight_file_->mapped());
    weight_file_->drop_mapped_pages();
  } else if (!half()) {
    weights32_ = TrackedArray<float>(shard_size_, "params");
    fill_shard(weights32_.data());
  } else {
    masters_ = TrackedArray<float>(masters_sharded() ? shard_size_ : total_, "optimizer");  // part of the 12Ψ
    if (masters_sharded()) fill_shard(masters_.data());
    else dev::copy(masters_.data(), full, total_);
    if (whole_weights()) {
      weights16_ = TrackedArray<uint16_t>(total_, "params");
      dev::half_narrow(*half_, full, weights16_.data(), total_);
    } else {
      weights16_ = TrackedArray<uint16_t>(shard_size_, "params");
      dev::half_narrow(*half_, masters_.data(), weights16_.data(), shard_size_);
    }
  }
  if (layout_.versions == 2) {  // both versions start as the model (docs/design.md §6.3: W⁽⁻¹⁾ = W⁽⁰⁾)
    auto copy = [](const auto& from, auto& to, const char* op) {
      if (!from.size()) return;
      to = std::remove_cvref_t<decltype(to)>(from.size(), op);
      dev::copy(to.data(), from.data(), from.size());
    };
    copy(weights32_, other_.weights32, "params");
    copy(weights_bf16_, other_.weights_bf16, "bf16_weights");  // as the model names its copy
    copy(weights16_, other_.weights16, "params");
  }
  model.release_weights();
  model.set_bucket_store(this);
}

void ModelStates::use_version(uint64_t batch) {
  const int version = int(batch & 1);
  if (layout_.versions == 1 || version == version_) return;
  if (!gathered_.empty()) throw std::logic_error("ModelStates::use_version: weights still in use");
  while (!reducing_.empty()) complete_oldest();  // into the version they were started for
  std::swap(weights32_, other_.weights32);
  std::swap(weights_bf16_, other_.weights_bf16);
  std::swap(weights16_, other_.weights16);
  std::swap(grads32_, other_.grads32);
  std::swap(grads16_, other_.grads16);
  version_ = version;
}

void ModelStates::begin_update() {
  // fp32 weights are their own masters: the update's version first takes the newest (the other).
  if (layout_.versions == 2 && !half()) dev::copy(weights32_.data(), other_.weights32.data(), total_);
}

void ModelStates::sync_replicas() {
  if (half() || !whole_weights()) return;
  for (int version = 0; version < layout_.versions; ++version) {  // both versions alike: each in turn
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (replicated(int(b)) && buckets_[b].size() > 0)
        group(int(b))->broadcast({weights32_.data() + buckets_[b].begin, size_t(buckets_[b].size())}, 0);
    refresh_bf16();
    use_version(uint64_t(version_ + 1));
  }
}

void ModelStates::refresh_bf16() {
  if (weights_bf16_.size()) dev::to_bf16(weights32_.data(), weights_bf16_.data(), total_);
}

void ModelStates::begin_step() {
  dev::fill_zero(grads32_.data(), grads32_.size());
  dev::fill_zero(grads16_.data(), grads16_.size());
  if (stage_ == 1 && !half()) {  // the last micro-batch reduce-scatters into it as backward goes
    reduced_ = TrackedArray<float>(shard_size_, "transient");
    note_transient();
  }
  launched_.assign(buckets_.size(), false);
  last_micro_batch_ = false;
  wait_s_ = 0;
}

// ---- weights -------------------------------------------------------------------------------------

const float* ModelStates::params(int b, int next) {
  if (!half() && whole_weights()) return weights32_.data() + buckets_[size_t(b)].begin;
  if (!gathered_.count(b)) launch_gather(b);
  Gathered& g = gathered_.at(b);
  ++g.users;
  if (layout_.prefetch && stage_ >= 3 && next >= 0 && buckets_[size_t(next)].size() > 0 && !gathered_.count(next))
    launch_gather(next);
  ready(g);
  return g.values.data();
}

const uint16_t* ModelStates::params_bf16(int b) {
  if (!layout_.bf16_gemms) return nullptr;
  const int64_t begin = buckets_[size_t(b)].begin;
  if (!half() && whole_weights()) return weights_bf16_.data() + begin;
  if (stored_bf16()) return weights16_.data() + begin;
  return gathered_.at(b).bf16.data();
}

void ModelStates::params_done(int b) {
  if (!half() && whole_weights()) return;
  auto it = gathered_.find(b);
  if (it != gathered_.end() && --it->second.users == 0) gathered_.erase(it);  // the last user frees it
}

void ModelStates::launch_gather(int b) {
  const Bucket& bucket = buckets_[size_t(b)];
  Gathered& g = gathered_[b];
  g.values = TrackedArray<float>(bucket.size(), "transient");
  if (whole_weights()) {  // 16-bit weights, whole on every rank: widen, nothing to gather
    dev::half_widen(*half_, weights16_.data() + bucket.begin, g.values.data(), bucket.size());
    note_transient();
    return;
  }
  const int64_t offset = shard_offset_[size_t(b)], n = piece(b).size();
  const float* mine = weights32_.data() + offset;
  if (weight_file_) {  // --offload-params: this rank's piece comes from the disk first
    g.piece = TrackedArray<float>(n, "transient");
    weight_file_->read(0, offset, n, g.piece.data());
    mine = g.piece.data();
  } else if (half()) {
    g.piece = TrackedArray<float>(n, "transient");
    dev::half_widen(*half_, weights16_.data() + offset, g.piece.data(), n);
    mine = g.piece.data();
  }
  note_transient();
  const auto t0 = std::chrono::steady_clock::now();  // a backend may run it at issue (docs/design.md §5)
  g.pending = group(b)->all_gather_v_async({mine, size_t(n)}, {g.values.data(), size_t(bucket.size())}, counts(b));
  wait_s_ += seconds_since(t0);
}

// A bucket's fp32 weights are about to be read: wait for them, make the bf16 copy GEMMs may need.
void ModelStates::ready(Gathered& g) {
  const auto t0 = std::chrono::steady_clock::now();
  g.pending.wait();
  wait_s_ += seconds_since(t0);
  g.piece = TrackedArray<float>();
  if (layout_.bf16_gemms && !stored_bf16()) {
    if (!g.bf16.size() && g.values.size()) {
      g.bf16 = TrackedArray<uint16_t>(g.values.size(), "transient");
      dev::to_bf16(g.values.data(), g.bf16.data(), g.values.size());
    }
    note_transient();
  }
}

// ---- gradients -----------------------------------------------------------------------------------

float* ModelStates::grads(int b) {
  if (!half() && whole_grads()) return grads32_.data() + buckets_[size_t(b)].begin;
  float* g = bucket_grads_.get(b, buckets_[size_t(b)].size());
  note_transient();
  return g;
}

void ModelStates::grads_done(int b) {
  if (!half() && whole_grads()) {
    // Only the last micro-batch reduces; the tied embedding's bucket is written twice (head and
    // embedding), so the non-layer buckets wait for reduce().
    if (last_micro_batch_ && per_layer_bucket(b, layout_.layers)) launch_reduction(b);
    return;
  }
  TrackedArray<float> done = bucket_grads_.take(b);
  if (!done.size()) return;
  if (whole_grads()) {  // the 16-bit gradient accumulates the micro-batch's fp32 bucket (one rounding)
    dev::half_accumulate(*half_, done.data(), grads16_.data() + buckets_[size_t(b)].begin, done.size());
    return;
  }
  reduce_scatter(b, std::move(done), 1);  // one in flight: transient buckets stay two layers' worth
}

void ModelStates::launch_reduction(int b) {
  const Bucket& bucket = buckets_[size_t(b)];
  // Stage 0 has nothing to do in a group of one; a shard (stages 1–2) is still moved into place.
  if (launched_[size_t(b)] || bucket.size() == 0 || !group(b) || (stage_ == 0 && !replicated(b))) return;
  launched_[size_t(b)] = true;
  if (stage_ == 0) {
    const auto t0 = std::chrono::steady_clock::now();  // a backend may run it at issue (docs/design.md §5)
    all_reducing_.push_back(group(b)->all_reduce_async({grads32_.data() + bucket.begin, size_t(bucket.size())}));
    wait_s_ += seconds_since(t0);
    return;
  }
  reduce_scatter(b, {}, 2);
}

void ModelStates::reduce_scatter(int b, TrackedArray<float> values, size_t max_in_flight) {
  const Bucket& bucket = buckets_[size_t(b)];
  const float* full = values.size() ? values.data() : grads32_.data() + bucket.begin;
  Reducing r{b, std::move(values), TrackedArray<float>(piece(b).size(), "transient"), {}};
  note_transient();
  const auto t0 = std::chrono::steady_clock::now();  // a backend may run it at issue (docs/design.md §5)
  r.pending = group(b)->reduce_scatter_v_async({full, size_t(bucket.size())}, {r.mine.data(), size_t(r.mine.size())},
                                               counts(b));
  wait_s_ += seconds_since(t0);
  reducing_.push_back(std::move(r));
  while (reducing_.size() > max_in_flight) complete_oldest();
}

void ModelStates::complete_oldest() {
  Reducing& r = reducing_.front();
  const auto t0 = std::chrono::steady_clock::now();
  r.pending.wait();
  wait_s_ += seconds_since(t0);
  // Into the step's shard (stage 1) or the kept shard gradient, where micro-batches accumulate.
  const int64_t offset = shard_offset_[size_t(r.bucket)];
  if (half() && stage_ >= 2) {
    dev::half_accumulate(*half_, r.mine.data(), grads16_.data() + offset, r.mine.size());
  } else {
    float* dst = (stage_ == 1 ? reduced_.data() : grads32_.data()) + offset;
    dev::residual_add(dst, r.mine.data(), r.mine.size());  // x += y, element by element
  }
  reducing_.pop_front();
}

void ModelStates::finish_all_reduces() {
  for (auto& h : all_reducing_) h.wait();
  all_reducing_.clear();
  while (!reducing_.empty()) complete_oldest();
}

OwnedGrads ModelStates::shard_grads(float* shard) {
  OwnedGrads g{owned_, {}};
  for (int b : owned_bucket_) g.data.push_back(shard + shard_offset_[size_t(b)]);
  return g;
}

OwnedGrads ModelStates::reduce() {
  if (!half() && whole_grads()) {  // what the last backward did not start, then wait for all
    if (stage_ == 1 && !reduced_.size()) {  // a second update in one step (PipeDream-2BW's drain)
      reduced_ = TrackedArray<float>(shard_size_, "transient");
      note_transient();
    }
    for (size_t b = 0; b < buckets_.size(); ++b) launch_reduction(int(b));
    finish_all_reduces();
    return stage_ == 0 ? OwnedGrads{owned_, {grads32_.data()}} : shard_grads(reduced_.data());
  }
  if (half() && stage_ == 0) {  // the optimizer reads the whole fp32 gradient at once
    reduced_ = TrackedArray<float>(total_, "transient");
    dev::half_widen(*half_, grads16_.data(), reduced_.data(), total_);
    note_transient();
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (replicated(int(b)) && buckets_[b].size() > 0)
        group(int(b))->all_reduce({reduced_.data() + buckets_[b].begin, size_t(buckets_[b].size())});
    wait_s_ += seconds_since(t0);
    return {owned_, {reduced_.data()}};
  }
  if (half() && stage_ == 1) {  // bucket by bucket: widen, reduce-scatter (one in flight)
    reduced_ = TrackedArray<float>(shard_size_, "transient");
    note_transient();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const Bucket& bucket = buckets_[b];
      if (bucket.size() == 0) continue;
      TrackedArray<float> values(bucket.size(), "transient");
      dev::half_widen(*half_, grads16_.data() + bucket.begin, values.data(), bucket.size());
      reduce_scatter(int(b), std::move(values), 1);
    }
    finish_all_reduces();
    return shard_grads(reduced_.data());
  }
  finish_all_reduces();  // stages 2–3: the shard gradient is complete
  if (!half()) return shard_grads(grads32_.data());
  reduced_ = TrackedArray<float>(shard_size_, "transient");  // the optimizer reads fp32
  dev::half_widen(*half_, grads16_.data(), reduced_.data(), shard_size_);
  note_transient();
  return shard_grads(reduced_.data());
}

// ---- after the update ----------------------------------------------------------------------------

std::vector<float*> ModelStates::master_pieces() {
  if (stage_ == 0) return {master_base()};
  std::vector<float*> out;
  for (int b : owned_bucket_) out.push_back(master_base() + offset_in(masters_sharded(), b));
  return out;
}

std::vector<uint16_t*> ModelStates::master_bf16_pieces() {
  if (stage_ != 0 || half() || weight_file_ || !weights_bf16_.size()) return {};
  return {weights_bf16_.data()};
}

void ModelStates::finish_step(bool updated, bool bf16_written) {
  launched_.assign(buckets_.size(), false);  // the next reduce() starts every reduction again
  if (updated && !half()) {
    if (stage_ == 1 || stage_ == 2) {  // every rank's updated pieces, gathered in place
      std::vector<comm::Handle> pending;
      for (size_t b = 0; b < buckets_.size(); ++b) {
        const Bucket& bucket = buckets_[b];
        if (bucket.size() == 0) continue;
        pending.push_back(group(int(b))->all_gather_v_async({weights32_.data() + pieces_[b].begin, size_t(pieces_[b].size())},
                                                  {weights32_.data() + bucket.begin, size_t(bucket.size())},
                                                  counts(int(b))));
      }
      for (auto& h : pending) h.wait();
    }
    if (!bf16_written) refresh_bf16();
  } else if (updated) {
    if (whole_weights() && stage_ >= 1) gather_narrowed();
    else dev::half_narrow(*half_, masters_.data(), weights16_.data(), weights16_.size());  // whole, or stage 3's shard
  }
  reduced_ = TrackedArray<float>();
}

void ModelStates::gather_narrowed() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.size() == 0) continue;
    TrackedArray<float> values(bucket.size(), "transient");
    note_transient();
    group(int(b))->all_gather_v_async({masters_.data() + shard_offset_[b], size_t(pieces_[b].size())},
                            {values.data(), size_t(bucket.size())}, counts(int(b)))
        .wait();
    dev::half_narrow(*half_, values.data(), weights16_.data() + bucket.begin, bucket.size());
  }
}

// ---- checkpoints ---------------------------------------------------------------------------------

ModelStates::PreviousPieces ModelStates::previous_save_pieces() const {
  PreviousPieces out;
  if (layout_.versions == 1) return out;
  // Whole weights: each bucket comes from its group's rank 0, widened (16-bit runs) into one
  // buffer of checkpoint I/O holding just those buckets.
  std::vector<size_t> mine;
  int64_t widened = 0;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (buckets_[b].size() > 0 && (!group(int(b)) || group(int(b))->rank() == 0))
      mine.push_back(b), widened += buckets_[b].size();
  if (half()) out.widened = TrackedArray<float>(widened, "previous_weights", MemoryCategory::checkpoint_io);
  float* next = out.widened.data();
  for (size_t b : mine) {
    const Bucket& bucket = buckets_[b];
    const float* values = other_.weights32.data() + bucket.begin;
    if (half()) {
      dev::half_widen(*half_, other_.weights16.data() + bucket.begin, next, bucket.size());
      values = next, next += bucket.size();
    }
    out.pieces.push_back({{bucket.begin, bucket.begin + bucket.size()}, values});
  }
  return out;
}

void ModelStates::keep_previous_weights(const WeightSource& fill, uint64_t next_batch) {
  if (layout_.versions == 1) return;
  version_ = int((next_batch + 1) & 1);  // the arrays above hold the newest: the version the next batch does not read
  TrackedArray<float> values(total_, "transient");
  note_transient();
  fill({0, total_}, values.data());
  if (half()) {
    dev::half_narrow(*half_, values.data(), other_.weights16.data(), total_);
  } else {
    dev::copy(other_.weights32.data(), values.data(), total_);
    if (other_.weights_bf16.size()) dev::to_bf16(values.data(), other_.weights_bf16.data(), total_);
  }
}

std::vector<ModelStates::SavePiece> ModelStates::save_pieces(const float* owned_values) const {
  const bool sharded = owned_values ? stage_ >= 1 : masters_sharded();
  const float* base = owned_values ? owned_values : master_base();
  std::vector<SavePiece> out;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (sharded) {
      if (pieces_[b].size() > 0) out.push_back({pieces_[b], base + shard_offset_[b]});
    } else if (bucket.size() > 0 && (!group(int(b)) || group(int(b))->rank() == 0)) {
      out.push_back({{bucket.begin, bucket.begin + bucket.size()}, base + bucket.begin});
    }
  }
  return out;
}

}  // namespace lattice::parallel
