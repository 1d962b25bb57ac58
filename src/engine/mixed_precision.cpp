#include "engine/mixed_precision.hpp"

#include <algorithm>
#include <cstring>


namespace lattice {

HalfStore::HalfStore(HalfFormat format, std::vector<Bucket> buckets, int64_t total, bool bf16_gemms)
    : format_(format),
      buckets_(std::move(buckets)),
      bf16_gemms_(bf16_gemms),
      params16_(total, "params"),
      grads16_(total, "grads") {}

void HalfStore::zero_grads() { std::fill(grads16_.data(), grads16_.data() + grads16_.size(), uint16_t(0)); }

const float* HalfStore::params(int b, int /*next*/) {
  TransientWeights& w = widened_[b];
  if (w.users++ == 0) {
    const Bucket& bucket = buckets_[size_t(b)];
    w.values = TrackedArray<float>(bucket.size(), "transient");
    format_.widen(params16_.data() + bucket.begin, w.values.data(), bucket.size());
    if (bf16_gemms_ && format_.fp16) w.make_bf16();  // bf16 weights are read as stored
    note_transient();
  }
  return w.values.data();
}

const uint16_t* HalfStore::params_bf16(int b) {
  if (!bf16_gemms_) return nullptr;
  if (!format_.fp16) return params16_.data() + buckets_[size_t(b)].begin;  // the weights themselves
  return widened_.at(b).bf16.data();
}

void HalfStore::params_done(int b) { release_user(widened_, b); }

float* HalfStore::grads(int b) {
  float* g = bucket_grads_.get(b, buckets_[size_t(b)].size());
  note_transient();
  return g;
}

void HalfStore::grads_done(int b) {
  TrackedArray<float> done = bucket_grads_.take(b);
  if (!done.size()) return;
  // The 16-bit gradient accumulates this micro-batch's fp32 bucket (one rounding per micro-batch).
  format_.accumulate(done.data(), grads16_.data() + buckets_[size_t(b)].begin, done.size());
}

MixedPrecision::MixedPrecision(HalfStore& store, const float* full32, int64_t total, std::vector<Bucket> buckets,
                               parallel::ZeroStates* zero, comm::Communicator* dp)
    : store_(store), total_(total), buckets_(std::move(buckets)), zero_(zero), dp_(dp), master_(zero ? zero->shard_size() : total, "optimizer") {
  if (zero_) zero_->scatter_full(full32, master_.data());
  else std::copy(full32, full32 + total, master_.data());
  store_.format().narrow(full32, store_.params16(), total);
}

parallel::OwnedGrads MixedPrecision::reduce() {
  if (zero_) {  // bucket by bucket: widen, reduce-scatter (a few buckets in flight)
    zero_->begin_step();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].size() == 0) continue;
      TrackedArray<float> values(buckets_[b].size(), "transient");
      store_.format().widen(store_.grads16() + buckets_[b].begin, values.data(), buckets_[b].size());
      zero_->reduce_bucket(int(b), std::move(values));
    }
    zero_->finish_reduce(nullptr);
    return zero_->owned_grads();
  }
  // The optimizer reads the whole fp32 gradient at once (Adafactor's statistics span tensors).
  grads32_ = TrackedArray<float>(total_, "transient");
  store_.format().widen(store_.grads16(), grads32_.data(), total_);
  store_.note_transient();
  if (dp_ && dp_->size() > 1) dp_->all_reduce({grads32_.data(), size_t(total_)});
  return {{{0, total_}}, {grads32_.data()}};
}

std::vector<float*> MixedPrecision::master_pieces() {
  if (!zero_) return {master_.data()};
  std::vector<float*> out;
  int64_t offset = 0;
  for (const FlatPiece& p : zero_->owned()) {
    out.push_back(master_.data() + offset);
    offset += p.size();
  }
  return out;
}

void MixedPrecision::finish_step(bool updated) {
  grads32_ = TrackedArray<float>();
  if (zero_) {
    if (updated) zero_->gather_narrowed(master_.data(), store_.format(), store_.params16());
    zero_->end_step();
  } else if (updated) {
    store_.format().narrow(master_.data(), store_.params16(), total_);
  }
}

std::vector<float> MixedPrecision::full_master() {
  if (zero_) return zero_->gather_full(master_.data());
  return std::vector<float>(master_.data(), master_.data() + total_);
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale = std::max(1.0, scale / 2);
    clean_steps = 0;
    ++skipped;
    return false;
  }
  if (++clean_steps >= window) scale = std::min(kMaxScale, scale * 2), clean_steps = 0;
  return true;
}

}  // namespace lattice
