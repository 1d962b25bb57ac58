#pragma once
// Data-parallel gradient synchronisation: the flat gradient buffer is all-reduced over the DP group
// in buckets — one per transformer layer, launched (non-blocking) as soon as backward has finished
// that layer, so communication overlaps the backward of the layers below; the embedding and final
// LayerNorm go last. Accumulation micro-batches do not synchronise at all.
#include <vector>

#include "comm/communicator.hpp"
#include "model/params.hpp"

namespace lattice::parallel {

class GradientSync {
 public:
  GradientSync(comm::Communicator* dp, const ParamTable& table, int layers);
  bool active() const { return dp_ && dp_->size() > 1; }
  void layer_ready(float* grads, int layer);  // launch the bucket of `layer`
  void finish(float* grads);                  // launch what is left and wait for everything

 private:
  struct Range {
    int64_t begin, end;
  };
  comm::Communicator* dp_;
  std::vector<Range> layer_ranges_;
  std::vector<Range> rest_;  // embedding, position embedding, final LayerNorm
  std::vector<bool> launched_;
  std::vector<comm::Handle> pending_;
};

}  // namespace lattice::parallel
