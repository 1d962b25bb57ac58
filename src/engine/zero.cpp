#include "engine/zero.hpp"

#include <algorithm>
#include <chrono>


namespace lattice::parallel {

namespace {
// Reduce-scatters in flight at once: one overlaps the next layer's backward, and the transient
// bucket buffers stay two layers' worth.
constexpr size_t kMaxReducing = 1;
}  // namespace

ZeroStates::ZeroStates(comm::Communicator& dp, int stage, std::vector<Bucket> buckets, const HalfFormat* half,
                       bool bf16_gemms, bool prefetch)
    : dp_(dp),
      stage_(stage),
      n_(dp.size()),
      buckets_(std::move(buckets)),
      half_(half),
      bf16_gemms_(bf16_gemms),
      prefetch_(prefetch) {
  const int r = dp.rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    const int64_t chunk = (bucket.size() + n_ - 1) / n_;
    for (int k = 0; k < n_; ++k) {
      const int64_t begin = std::min(bucket.end, bucket.begin + k * chunk);
      const int64_t end = std::min(bucket.end, begin + chunk);
      counts_.push_back(int(end - begin));
      if (k == r) pieces_.push_back({begin, end});
    }
    shard_offset_.push_back(shard_size_);
    if (pieces_.back().size() > 0) {
      owned_.push_back(pieces_.back());
      owned_bucket_.push_back(int(b));
    }
    shard_size_ += pieces_.back().size();
    total_ = std::max(total_, bucket.end);
  }
  reduced_.assign(buckets_.size(), false);
  if (stage_ >= 2 && half_) grads16_ = TrackedArray<uint16_t>(shard_size_, "grads");
  else if (stage_ >= 2) shard_grads_ = TrackedArray<float>(shard_size_, "grads");
}

void ZeroStates::take_params(const float* full) {
  keep_params([&](const FlatPiece& p, float* out) { std::copy(full + p.begin, full + p.end, out); }, full);
}

void ZeroStates::init_params(const ParamTable& table, uint64_t seed, int real_vocab) {
  keep_params([&](const FlatPiece& p, float* out) { lattice::init_params(table, out, seed, real_vocab, p); }, nullptr);
}

// fill(piece, out) writes a piece's fp32 values; `full` (stage 2, 16-bit) is the whole model.
void ZeroStates::keep_params(const std::function<void(const FlatPiece&, float*)>& fill, const float* full) {
  float* shard;
  if (!half_) {
    shard_params_ = TrackedArray<float>(shard_size_, "params");
    shard = shard_params_.data();
  } else {
    master_ = TrackedArray<float>(shard_size_, "optimizer");  // fp32 masters: part of the 12Ψ
    shard = master_.data();
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (pieces_[b].size() > 0) fill(pieces_[b], shard + shard_offset_[b]);
  if (!half_) return;
  if (stage_ >= 3) {
    params16_ = TrackedArray<uint16_t>(shard_size_, "params");
    half_->narrow(master_.data(), params16_.data(), shard_size_);
  } else {
    params16_ = TrackedArray<uint16_t>(total_, "params");
    half_->narrow(full, params16_.data(), total_);
  }
}

float* ZeroStates::master() {
  if (half_) return master_.data();
  return stage_ >= 3 ? shard_params_.data() : nullptr;
}

void ZeroStates::begin_step() {
  if (stage_ == 1) {
    shard_grads_ = TrackedArray<float>(shard_size_, "transient");
    note_transient();
  } else if (half_) {
    std::fill(grads16_.data(), grads16_.data() + shard_size_, uint16_t(0));
  } else {
    std::fill(shard_grads_.data(), shard_grads_.data() + shard_size_, 0.0f);
  }
  reduced_.assign(buckets_.size(), false);
  wait_s_ = 0;
}

void ZeroStates::reduce_bucket(int b, const float* full_grads) {
  const Bucket& bucket = buckets_[size_t(b)];
  if (reduced_[size_t(b)] || bucket.size() == 0) return;
  reduced_[size_t(b)] = true;
  Reducing r{b, {}, TrackedArray<float>(piece(b).size(), "transient"), {}};
  note_transient();
  r.pending = dp_.reduce_scatter_v_async({full_grads + bucket.begin, size_t(bucket.size())},
                                         {r.mine.data(), size_t(r.mine.size())}, counts(b));
  reducing_.push_back(std::move(r));
  while (reducing_.size() > 2 * kMaxReducing) complete_oldest_reduce();
}

void ZeroStates::complete_oldest_reduce() {
  Reducing& r = reducing_.front();
  const auto t0 = std::chrono::steady_clock::now();
  r.pending.wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Micro-batches accumulate (stages 2–3).
  const int64_t offset = shard_offset_[size_t(r.bucket)];
  if (half_) {
    half_->accumulate(r.mine.data(), grads16_.data() + offset, r.mine.size());
  } else {
    float* dst = shard_grads_.data() + offset;
    const float* src = r.mine.data();
    for (int64_t i = 0; i < r.mine.size(); ++i) dst[i] += src[i];
  }
  reducing_.pop_front();
}

void ZeroStates::finish_reduce(const float* full_grads) {
  if (stage_ == 1)
    for (size_t b = 0; b < buckets_.size(); ++b) reduce_bucket(int(b), full_grads);
  while (!reducing_.empty()) complete_oldest_reduce();
}

OwnedGrads ZeroStates::owned_grads() {
  float* grads = shard_grads_.data();
  if (half_) {  // the optimizer reads fp32: the shard widened for this step
    grads32_ = TrackedArray<float>(shard_size_, "transient");
    half_->widen(grads16_.data(), grads32_.data(), shard_size_);
    note_transient();
    grads = grads32_.data();
  }
  OwnedGrads g{owned_, {}};
  for (int b : owned_bucket_) g.data.push_back(grads + shard_offset_[size_t(b)]);
  return g;
}

std::vector<float*> ZeroStates::master_pieces() {
  std::vector<float*> out;
  float* shard = master();
  for (size_t i = 0; i < owned_.size(); ++i)
    out.push_back(shard ? shard + shard_offset_[size_t(owned_bucket_[i])] : full_params_ + owned_[i].begin);
  return out;
}

void ZeroStates::gather_params() {
  if (half_ && stage_ >= 3) {  // the 16-bit shard from the masters; gathered when forward needs it
    half_->narrow(master_.data(), params16_.data(), shard_size_);
    return;
  }
  if (half_) {
    gather_narrowed(master_.data(), *half_, params16_.data());
    return;
  }
  if (stage_ >= 3) return;  // gathered bucket by bucket when the next forward needs them
  std::vector<comm::Handle> pending;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.size() == 0) continue;
    pending.push_back(dp_.all_gather_v_async({full_params_ + pieces_[b].begin, size_t(pieces_[b].size())},
                                             {full_params_ + bucket.begin, size_t(bucket.size())},
                                             counts(int(b))));
  }
  for (auto& h : pending) h.wait();
}

void ZeroStates::gather_narrowed(const float* shard_values, const HalfFormat& format, uint16_t* full16) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.size() == 0) continue;
    TrackedArray<float> values(bucket.size(), "transient");
    note_transient();
    dp_.all_gather_v_async({shard_values + shard_offset_[b], size_t(pieces_[b].size())},
                           {values.data(), size_t(bucket.size())}, counts(int(b)))
        .wait();
    format.narrow(values.data(), full16 + bucket.begin, bucket.size());
  }
}

void ZeroStates::end_step() {
  if (stage_ == 1) shard_grads_ = TrackedArray<float>();
  grads32_ = TrackedArray<float>();
}

std::vector<float> ZeroStates::gather_full(const float* shard_values) {
  std::vector<float> full(static_cast<size_t>(total_), 0.0f);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.size() == 0) continue;
    dp_.all_gather_v_async({shard_values + shard_offset_[b], size_t(pieces_[b].size())},
                           {full.data() + bucket.begin, size_t(bucket.size())}, counts(int(b)))
        .wait();
  }
  return full;
}

void ZeroStates::scatter_full(const float* full, float* shard_values) const {
  for (size_t b = 0; b < buckets_.size(); ++b)
    std::copy(full + pieces_[b].begin, full + pieces_[b].end, shard_values + shard_offset_[b]);
}

void ZeroStates::launch_gather(int b) {
  const Bucket& bucket = buckets_[size_t(b)];
  Gathered& g = gathered_[b];
  g.values = TrackedArray<float>(bucket.size(), "transient");
  const int64_t offset = shard_offset_[size_t(b)], n = piece(b).size();
  if (stage_ < 3) {  // 16-bit weights, whole on every rank: widen, nothing to gather
    half_->widen(params16_.data() + bucket.begin, g.values.data(), bucket.size());
    note_transient();
    return;
  }
  const float* mine = shard_params_.data() + offset;
  if (half_) {
    g.piece = TrackedArray<float>(n, "transient");
    half_->widen(params16_.data() + offset, g.piece.data(), n);
    mine = g.piece.data();
  }
  note_transient();
  g.pending = dp_.all_gather_v_async({mine, size_t(n)}, {g.values.data(), size_t(bucket.size())}, counts(b));
}

// A gathered bucket is about to be read: wait for it, and make its bf16 copy if GEMMs need one.
void ZeroStates::ready(Gathered& g) {
  const auto t0 = std::chrono::steady_clock::now();
  g.pending.wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g.piece = TrackedArray<float>();
  const bool stored_bf16 = half_ && !half_->fp16 && stage_ < 3;
  if (bf16_gemms_ && !stored_bf16) {
    g.make_bf16();
    note_transient();
  }
}

const float* ZeroStates::params(int b, int next) {
  if (!gathered_.count(b)) launch_gather(b);
  Gathered& g = gathered_.at(b);
  ++g.users;
  if (prefetch_ && stage_ >= 3 && next >= 0 && buckets_[size_t(next)].size() > 0 && !gathered_.count(next))
    launch_gather(next);
  ready(g);
  return g.values.data();
}

const uint16_t* ZeroStates::params_bf16(int b) {
  if (!bf16_gemms_) return nullptr;
  if (half_ && !half_->fp16 && stage_ < 3) return params16_.data() + buckets_[size_t(b)].begin;  // stored bf16
  return gathered_.at(b).bf16.data();
}

void ZeroStates::params_done(int b) { release_user(gathered_, b); }

float* ZeroStates::grads(int b) {
  float* g = bucket_grads_.get(b, buckets_[size_t(b)].size());
  note_transient();
  return g;
}

void ZeroStates::grads_done(int b) {
  TrackedArray<float> full = bucket_grads_.take(b);
  if (full.size()) reduce_bucket(b, std::move(full));
}

void ZeroStates::reduce_bucket(int b, TrackedArray<float> values) {
  reduced_[size_t(b)] = true;
  Reducing r{b, std::move(values), TrackedArray<float>(piece(b).size(), "transient"), {}};
  note_transient();
  r.pending = dp_.reduce_scatter_v_async({r.full.data(), size_t(r.full.size())},
                                         {r.mine.data(), size_t(r.mine.size())}, counts(b));
  reducing_.push_back(std::move(r));
  while (reducing_.size() > kMaxReducing) complete_oldest_reduce();
}

}  // namespace lattice::parallel
