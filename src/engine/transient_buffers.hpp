#pragma once
// Transient model-state buffers of ModelStates (engine/model_states.hpp): the gradient buckets
// backward is writing, and the peak of everything tagged "transient" seen at once.
#include <algorithm>
#include <cstdint>
#include <map>

#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

// The most transient bytes (tag "transient" of the model-state tracker) seen at once.
class TransientPeak {
 public:
  void note() { peak_ = std::max(peak_, MemoryTracker::model_states().live_bytes_of_op("transient")); }
  int64_t bytes() const { return peak_; }

 private:
  int64_t peak_ = 0;
};

// The gradient buffers of the buckets backward is writing (when the whole fp32 gradient is not kept):
// made zeroed on the first request of a micro-batch, handed over when backward is done.
class TransientGrads {
 public:
  float* get(int bucket, int64_t size) {
    auto it = live_.find(bucket);
    if (it == live_.end()) it = live_.emplace(bucket, TrackedArray<float>(size, "transient")).first;
    return it->second.data();
  }
  TrackedArray<float> take(int bucket) {  // empty when backward never asked for it
    auto it = live_.find(bucket);
    if (it == live_.end()) return {};
    TrackedArray<float> out = std::move(it->second);
    live_.erase(it);
    return out;
  }

 private:
  std::map<int, TrackedArray<float>> live_;
};

}  // namespace lattice::parallel
