#pragma once
// The flat parameter buffer in buckets — one per transformer layer, then the token embedding, the
// position embedding and the final LayerNorm — and BucketStore, the interface through which the
// model's weights and gradients are kept outside its own buffers (engine/model_states.hpp): the
// model asks for a bucket right before it uses it and says when it is done with it.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "model/params.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

struct Bucket {
  int64_t begin = 0, end = 0;  // flat offsets; empty when this pipeline stage does not hold it
  int64_t size() const { return end - begin; }
};

// Bucket indices: layers 0..L-1, then these.
inline int wte_bucket(int layers) { return layers; }
inline int wpe_bucket(int layers) { return layers + 1; }
inline int lnf_bucket(int layers) { return layers + 2; }
std::vector<Bucket> model_buckets(const ParamTable& table, int layers);

class BucketStore {
 public:
  virtual ~BucketStore() = default;
  // The whole bucket's values (bucket-relative), valid until params_done; `next` (or -1) is the
  // bucket the model will ask for next, to prefetch while this one is used.
  virtual const float* params(int bucket, int next) = 0;
  // The same values in bf16 for bf16 GEMMs, if the store keeps or makes them (else null).
  virtual const uint16_t* params_bf16(int /*bucket*/) { return nullptr; }
  virtual void params_done(int bucket) = 0;
  // The bucket's gradient buffer for this micro-batch (bucket-relative, zero the first time it is
  // asked for); grads_done hands it back for reduction.
  virtual float* grads(int bucket) = 0;
  virtual void grads_done(int bucket) = 0;
};

// A bucket's weights made fp32 for the model (widened from 16 bits, or gathered from shards), shared
// by its users until the last one is done; with a bf16 copy when bf16 GEMMs read weights that are
// not stored in bf16.
struct TransientWeights {
  TrackedArray<float> values;
  TrackedArray<uint16_t> bf16;
  int users = 0;
  void make_bf16();  // once; from `values`
};

// Releases one user of `bucket` in a map of TransientWeights (or types derived from it); the last
// one frees the buffers.
template <class Map>
void release_user(Map& live, int bucket) {
  auto it = live.find(bucket);
  if (it != live.end() && --it->second.users == 0) live.erase(it);
}

// The most transient bytes (tag "transient" of the model-state tracker) seen at once by a store.
class TransientPeak {
 public:
  void note() { peak_ = std::max(peak_, MemoryTracker::model_states().live_bytes_of_op("transient")); }
  int64_t bytes() const { return peak_; }

 private:
  int64_t peak_ = 0;
};

// The gradient buffers of the buckets backward is writing (stores keeping gradients elsewhere):
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

}  // namespace lattice
