#include "parallel/data/zero.hpp"

#include <algorithm>

namespace lattice::parallel {

ZeroShards::ZeroShards(comm::Communicator& dp, int64_t total)
    : dp_(dp),
      total_(total),
      shard_((total + dp.size() - 1) / dp.size()),
      begin_(std::min(total, int64_t(dp.rank()) * shard_)),
      end_(std::min(total, begin_ + shard_)) {}

void ZeroShards::reduce_scatter(float* grads) {
  padded_.assign(size_t(shard_ * dp_.size()), 0.0f);
  std::copy(grads, grads + total_, padded_.begin());
  std::vector<float> mine(static_cast<size_t>(shard_));
  dp_.reduce_scatter({padded_.data(), padded_.size()}, {mine.data(), mine.size()});
  std::copy(mine.begin(), mine.begin() + (end_ - begin_), grads + begin_);
}

void ZeroShards::all_gather(float* params) {
  const std::vector<float> full = gather(params + begin_);
  std::copy(full.begin(), full.begin() + total_, params);
}

std::vector<float> ZeroShards::gather(const float* shard_values) {
  std::vector<float> mine(static_cast<size_t>(shard_), 0.0f);
  std::copy(shard_values, shard_values + (end_ - begin_), mine.begin());
  padded_.assign(size_t(shard_ * dp_.size()), 0.0f);
  dp_.all_gather({mine.data(), mine.size()}, {padded_.data(), padded_.size()});
  return std::vector<float>(padded_.begin(), padded_.begin() + total_);
}

}  // namespace lattice::parallel
