#pragma once
// ZeRO stage 1 (Megatron's distributed optimizer) over the data-parallel group. The flat gradient
// buffer, padded to a multiple of N_d, is reduce-scattered so each rank holds the summed gradient of
// its 1/N_d shard; the optimizer keeps moments for that shard only and updates it; the updated
// shards are all-gathered into every rank's parameters. Reduce-scatter + all-gather move the same
// 2Ψ as the all-reduce they replace (SPEC §8).
#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"

namespace lattice::parallel {

class ZeroShards {
 public:
  ZeroShards(comm::Communicator& dp, int64_t total);

  int64_t begin() const { return begin_; }  // this rank's shard of the flat buffer, [begin, end)
  int64_t end() const { return end_; }
  int64_t shard_size() const { return shard_; }  // padded: shard_size · N_d >= total

  // grads (full size, this rank's sum over its micro-batches) → grads[begin, end) summed over DP.
  void reduce_scatter(float* grads);
  // Every rank's params[begin, end) → all of params.
  void all_gather(float* params);
  // A shard-sized array (e.g. Adam moments) of every rank → the full-size array.
  std::vector<float> gather(const float* shard_values);

 private:
  comm::Communicator& dp_;
  int64_t total_, shard_, begin_, end_;
  std::vector<float> padded_;  // transient full-size staging (padding counted)
};

}  // namespace lattice::parallel
