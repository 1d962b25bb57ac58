#include "parallel/data/zero.hpp"

#include <algorithm>

namespace lattice::parallel {

namespace {
// Reduce-scatters in flight at once: one overlaps the next layer's backward, and the transient
// bucket buffers stay two layers' worth.
constexpr size_t kMaxReducing = 1;
}  // namespace

ZeroStates::ZeroStates(comm::Communicator& dp, int stage, std::vector<Bucket> buckets)
    : dp_(dp), stage_(stage), n_(dp.size()), buckets_(std::move(buckets)) {
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
  }
  reduced_.assign(buckets_.size(), false);
  if (stage_ >= 2) shard_grads_ = TrackedArray<float>(shard_size_, "grads");
}

void ZeroStates::note_transient() {
  transient_peak_ = std::max(transient_peak_, MemoryTracker::model_states().live_bytes_of_op("transient"));
}

void ZeroStates::take_params(const float* full) {
  shard_params_ = TrackedArray<float>(shard_size_, "params");
  scatter_full(full, shard_params_.data());
}

void ZeroStates::begin_step() {
  if (stage_ == 1) {
    shard_grads_ = TrackedArray<float>(shard_size_, "transient");
    note_transient();
  } else {
    std::fill(shard_grads_.data(), shard_grads_.data() + shard_size_, 0.0f);
  }
  reduced_.assign(buckets_.size(), false);
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
  r.pending.wait();
  float* dst = shard_grads_.data() + shard_offset_[size_t(r.bucket)];
  const float* src = r.mine.data();
  for (int64_t i = 0; i < r.mine.size(); ++i) dst[i] += src[i];  // micro-batches accumulate (stage 2-3)
  reducing_.erase(reducing_.begin());
}

void ZeroStates::finish_reduce(const float* full_grads) {
  if (stage_ == 1)
    for (size_t b = 0; b < buckets_.size(); ++b) reduce_bucket(int(b), full_grads);
  while (!reducing_.empty()) complete_oldest_reduce();
}

OwnedGrads ZeroStates::owned_grads() {
  OwnedGrads g{owned_, {}};
  for (int b : owned_bucket_) g.data.push_back(shard_grads_.data() + shard_offset_[size_t(b)]);
  return g;
}

std::vector<float*> ZeroStates::master_pieces() {
  std::vector<float*> out;
  for (size_t i = 0; i < owned_.size(); ++i)
    out.push_back(stage_ >= 3 ? shard_params_.data() + shard_offset_[size_t(owned_bucket_[i])]
                              : full_params_ + owned_[i].begin);
  return out;
}

void ZeroStates::gather_params() {
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

void ZeroStates::end_step() {
  if (stage_ == 1) shard_grads_ = TrackedArray<float>();
}

std::vector<float> ZeroStates::gather_full(const float* shard_values) {
  int64_t total = 0;
  for (const Bucket& b : buckets_) total = std::max(total, b.end);
  std::vector<float> full(static_cast<size_t>(total), 0.0f);
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
  note_transient();
  g.pending = dp_.all_gather_v_async({shard_params_.data() + shard_offset_[size_t(b)], size_t(piece(b).size())},
                                     {g.values.data(), size_t(bucket.size())}, counts(b));
}

const float* ZeroStates::params(int b, int next) {
  if (!gathered_.count(b)) launch_gather(b);
  Gathered& g = gathered_.at(b);
  ++g.users;
  if (next >= 0 && buckets_[size_t(next)].size() > 0 && !gathered_.count(next)) launch_gather(next);
  g.pending.wait();
  return g.values.data();
}

void ZeroStates::params_done(int b) {
  auto it = gathered_.find(b);
  if (it != gathered_.end() && --it->second.users == 0) gathered_.erase(it);
}

float* ZeroStates::grads(int b) {
  float* g = bucket_grads_.get(b, buckets_[size_t(b)].size());
  note_transient();
  return g;
}

void ZeroStates::grads_done(int b) {
  TrackedArray<float> full = bucket_grads_.take(b);
  if (!full.size()) return;
  Reducing r{b, std::move(full), TrackedArray<float>(piece(b).size(), "transient"), {}};
  note_transient();
  r.pending = dp_.reduce_scatter_v_async({r.full.data(), size_t(r.full.size())},
                                         {r.mine.data(), size_t(r.mine.size())}, counts(b));
  reducing_.push_back(std::move(r));
  while (reducing_.size() > kMaxReducing) complete_oldest_reduce();
}

}  // namespace lattice::parallel
