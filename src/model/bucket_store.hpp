#pragma once
// The flat parameter buffer in buckets — one per transformer layer, then the token embedding, the
// position embedding and the final LayerNorm — and BucketStore, the interface through which the
// model's weights and gradients are kept outside its own buffers (engine/model_states.hpp): the
// model asks for a bucket right before it uses it and says when it is done with it.
#include <cstdint>
#include <vector>

#include "model/params.hpp"

namespace lattice {

struct Bucket {
  int64_t begin = 0, end = 0;  // flat offsets; empty when this pipeline stage does not hold it
  bool experts = false;        // an MoE layer's experts: data-parallel over the expert-DP group only
  int64_t size() const { return end - begin; }
};

// Bucket indices: layers 0..L-1, then these, then each layer's experts (empty for a dense layer).
inline int wte_bucket(int layers) { return layers; }
inline int wpe_bucket(int layers) { return layers + 1; }
inline int lnf_bucket(int layers) { return layers + 2; }
inline int experts_bucket(int layers, int layer) { return layers + 3 + layer; }
// Buckets a backward hands back once per micro-batch (the layers and their experts), as opposed to
// the embedding's and head's, which the tied embedding touches twice.
inline bool per_layer_bucket(int bucket, int layers) { return bucket < layers || bucket >= layers + 3; }
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

}  // namespace lattice
