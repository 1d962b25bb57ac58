#pragma once
// The GPT-2 model on one rank: flat parameters and gradients, embedding → L layers → final
// LayerNorm → tied output projection → cross-entropy, with the recompute mode of the layout.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "model/bucket_store.hpp"
#include "model/layer_context.hpp"
#include "model/layer_kept.hpp"
#include "model/params.hpp"
#include "model/workspace.hpp"
#include "tensor_parallel/vocab_parallel.hpp"

namespace lattice {

// Rows of one micro-batch: `rows` sequences of seq_len tokens; first_row is the global batch row
// of the first one (dropout masks are keyed by it).
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
  int64_t rows = 0;
  int64_t first_row = 0;
};

class GPT {
 public:
  // `tp` is the tensor-parallel group this model's shard lives in (default: one rank, whole model).
  // `stage`: the parameters this pipeline stage holds (all by default).
  // `materialize` false (ZeRO-3 starting from the seed): no full parameter buffer is made at all;
  // the bucket store initialises its shard (init_params over its pieces).
  GPT(const ModelConfig& model, const LayoutConfig& layout, uint64_t seed, parallel::TensorParallel tp = {},
      const StageParams& stage = {}, bool materialize = true);

  const ModelConfig& config() const { return model_; }
  const LayoutConfig& layout() const { return layout_; }
  const ParamTable& table() const { return table_; }
  int64_t num_params() const { return table_.total(); }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }  // empty under ZeRO-2/3 (the bucket store keeps them)
  void zero_grads();
  // ZeRO-2/3: gradients (and in stage 3 parameters) are kept by `store` bucket by bucket.
  void set_bucket_store(BucketStore* store) { store_ = store; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // ZeRO-3, once the store holds its shard: the full parameter buffers are freed.
  void release_full_params();
  // Call after the parameters change: refreshes the bf16 copy the GEMMs read.
  void refresh_compute_weights();
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  // Positions of a sequence of s this rank holds outside the TP region (s/t under SP).
  int64_t s_local(int64_t s) const { return tp_.active() && tp_.sequence_parallel ? s / tp_.size() : s; }
  // Called after backward has finished layer l's gradients (data parallelism overlaps its
  // all-reduce with the layers below); empty = nothing to do.
  void set_layer_grads_ready(std::function<void(int)> hook) { layer_grads_ready_ = std::move(hook); }

  // Forward and backward of one micro-batch at optimizer step `step`; gradients accumulate,
  // scaled by loss_scale (1 / tokens in the global batch). Returns the micro-batch's loss sum.
  double forward_backward(const MicroBatch& mb, uint64_t step, float loss_scale);
  // Pipeline stages run layers [l0, l1) of micro-batch `id` (several may be in flight): the chunk
  // with l0 == 0 starts from the embedding, otherwise from x_in ([rows·s_local, h] activations);
  // the chunk with l1 == layers ends with the loss (returned), otherwise writes x_out.
  double forward_chunk(const MicroBatch& mb, int64_t id, uint64_t step, bool training, int64_t s, int l0, int l1,
                       const float* x_in, float* x_out);
  // Its backward: from the loss (l1 == layers) or dx_in; down to the embedding (l0 == 0) or dx_out.
  void backward_chunk(const MicroBatch& mb, int64_t id, uint64_t step, float loss_scale, int64_t s, int l0, int l1,
                      const float* dx_in, float* dx_out);
  // Forward only, no dropout, nothing kept: the loss sum of the micro-batch.
  double forward_loss(const MicroBatch& mb);
  // Probabilities of the next token after ids[0..len) (len <= seq_len), real vocabulary only.
  std::vector<float> next_token_probs(const int32_t* ids, int64_t len);

  // Measured by the tracking allocator during the last training forward: bytes each layer kept
  // for backward, and bytes kept outside the layers (embedding mask and ids, head, logits).
  const std::vector<int64_t>& kept_bytes_per_layer() const { return kept_bytes_per_layer_; }
  int64_t kept_bytes_outside_layers() const { return kept_bytes_outside_; }
  // The same, per "layer/op" tag (first layer and outside parts), at the end of the last forward.
  const std::map<std::string, int64_t>& kept_bytes_by_op() const { return kept_bytes_by_op_; }
  // Bytes each layer sent through the tensor-parallel operators (f, f̄, g, ḡ and SP's re-gathers),
  // forward and backward, since the last reset: the per-layer communication report.
  const std::vector<double>& tp_bytes_per_layer() const { return tp_bytes_per_layer_; }
  void reset_tp_bytes_per_layer() { tp_bytes_per_layer_.assign(size_t(model_.layers), 0.0); }

 private:
  // What a forward keeps outside the layers (embedding and head), tracked like the layers.
  struct OutsideKept {
    TrackedBuffer tokens, emb_mask, lnf_stats, logits;
    Stored lnf_in, head_in;
  };
  // What one micro-batch keeps while it is in flight, per layer and outside the layers.
  struct MicroState {
    std::vector<LayerKept> layers;
    OutsideKept outside;
    int chunks = 0;  // forwards run minus backwards run
  };
  void embed_forward(const MicroBatch& mb, uint64_t step, bool training, int64_t s, OutsideKept& out);
  double head_forward(const MicroBatch& mb, int64_t s, OutsideKept& out);
  void head_backward(const MicroBatch& mb, float loss_scale, int64_t s, OutsideKept& out);
  void embed_backward(const MicroBatch& mb, int64_t s, OutsideKept& out);
  int64_t pos0(int64_t s) const { return tp_.active() && tp_.sequence_parallel ? tp_.rank() * (s / tp_.size()) : 0; }
  int64_t vocab_local() const { return model_.padded_vocab(tp_.size()) / tp_.size(); }
  LayerWeights layer_weights(int l, const float* bucket) const;
  LayerGrads layer_grads(int l, float* bucket) const;
  // A bucket's parameters and gradients: the model's own buffers, or the ZeRO store's.
  const float* bucket_params(int b, int next = -1);
  void bucket_params_done(int b);
  float* bucket_grads(int b);
  void bucket_grads_done(int b);
  LayerContext layer_context(int l, uint64_t step, bool training, int64_t rows, int64_t first_row,
                             int64_t s) const;
  GemmOperand weight_operand(const float* values, int64_t offset, int bucket) const;  // fp32 or bf16
  void run_head_gemm(float* logits, GemmOperand head_in, const float* wte, int64_t N) const;
  GemmOperand head_operand(const Stored& head_in, const float* local32, int64_t b, int64_t s, bool regather);
  parallel::VocabShard vocab_shard() const;

  ModelConfig model_;
  LayoutConfig layout_;
  parallel::TensorParallel tp_;
  ParamTable table_;
  uint64_t seed_;
  TrackedArray<float> params_, grads_;
  TrackedArray<uint16_t> params16_;  // bf16 copy for the GEMMs when activations are bf16
  std::map<int64_t, MicroState> in_flight_;  // by micro-batch id
  Workspace ws_;
  std::vector<int64_t> kept_bytes_per_layer_;
  int64_t kept_bytes_outside_ = 0;
  std::map<std::string, int64_t> kept_bytes_by_op_;
  std::vector<double> tp_bytes_per_layer_;
  std::function<void(int)> layer_grads_ready_;
  std::vector<Bucket> buckets_;
  BucketStore* store_ = nullptr;
};

}  // namespace lattice
