#pragma once
// The GPT-2 model on one rank: embedding → L layers → final LayerNorm → tied output projection →
// cross-entropy, with the recompute mode of the layout. Its weights and gradients are its own flat
// buffers, or — in training — a BucketStore's (engine/model_states.hpp decides how they are kept);
// what it keeps for backward is measured from outside (tensor/kept_bytes.hpp, core/region.hpp).
#include <cstdint>
#include <map>
#include <utility>
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
  // `materialize` false (ZeRO-3 starting from the seed): no parameter buffer is made at all; the
  // bucket store initialises its shard.
  GPT(const ModelConfig& model, const LayoutConfig& layout, uint64_t seed, parallel::TensorParallel tp = {},
      const StageParams& stage = {}, bool materialize = true);

  const ModelConfig& config() const { return model_; }
  const LayoutConfig& layout() const { return layout_; }
  const ParamTable& table() const { return table_; }
  int64_t num_params() const { return table_.total(); }
  // The model's own buffers (null once a bucket store has taken the weights). The gradient buffer
  // is made by the first backward (or zero_grads) that runs without a store.
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  void zero_grads();
  // --tied-embedding-grads apart: adds the embedding's (input) part of the tied gradient, accumulated
  // apart over the step's micro-batches, to the head's (output) part in grads(), as a pipeline's
  // embedding group adds its first and last stage's; then zeroes it. Without apart: nothing.
  void add_tied_input_grads();
  // From now on every bucket's weights and gradients are asked of `store`.
  void set_bucket_store(BucketStore* store) { store_ = store; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // For a store taking over: the fp32 weights and their bf16 copy (empty unless activations are
  // bf16), moved out; or both freed.
  TrackedArray<float> take_params() { return std::move(params_); }
  TrackedArray<uint16_t> take_compute_weights() { return std::move(params16_); }
  void release_weights();
  // Call after the model's own weights change: refreshes the bf16 copy the GEMMs read.
  void refresh_compute_weights();
  const parallel::TensorParallel& tensor_parallel() const { return tp_; }
  // The expert-parallel group the table's experts are split over (null: this rank holds every expert).
  void set_expert_parallel(comm::Communicator* ep) { ep_ = ep; }
  // The context-parallel group each sequence is split over (docs/design.md §5.1; null: whole sequences).
  // Micro-batches still carry whole sequences: the model takes this rank's positions of them.
  void set_context_parallel(comm::Communicator* cp, CpComm comm) { cp_ = {cp, comm}; }
  const parallel::ContextParallel& context_parallel() const { return cp_; }
  // What the MoE blocks' forwards counted since the last take (auxiliary loss, drops, loads).
  moe::MoEStats take_moe_stats() { return std::exchange(moe_stats_, {}); }
  // Positions of a sequence of s this rank holds inside the TP region (s/c under CP) and outside it
  // (s/(c·t) under SP).
  int64_t s_cp(int64_t s) const { return s / cp_.size(); }
  int64_t s_local(int64_t s) const { return tp_.active() && tp_.sequence_parallel ? s_cp(s) / tp_.size() : s_cp(s); }

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
  // The same backward split for zero-bubble schedules (docs/design.md §6): the input pass leaves each
  // dense, not fully recomputed layer's parameter gradients pending (its kept tensors become their
  // operands); the weight pass, any time later, adds them for layers l1−1 … l0 and completes those
  // layers' gradient buckets. Input then weight pass equal backward_chunk bit for bit.
  void backward_input_chunk(const MicroBatch& mb, int64_t id, uint64_t step, float loss_scale, int64_t s, int l0,
                            int l1, const float* dx_in, float* dx_out);
  void backward_weight_chunk(int64_t id, int l0, int l1);
  // Forward only, no dropout, nothing kept: the loss sum of the micro-batch.
  double forward_loss(const MicroBatch& mb);
  // Its pipeline stage: layers [l0, l1), from the embedding (l0 == 0) or x_in, to the loss sum
  // (l1 == layers, returned) or x_out (0 returned). Stages in order equal forward_loss.
  double forward_loss_chunk(const MicroBatch& mb, int l0, int l1, const float* x_in, float* x_out);
  // Probabilities of the next token after ids[0..len) (len <= seq_len), real vocabulary only.
  std::vector<float> next_token_probs(const int32_t* ids, int64_t len);

 private:
  // What a forward keeps outside the layers (embedding and head), tracked like the layers.
  struct OutsideKept {
    TrackedBuffer tokens, lnf_stats, logits;
    TrackedBuffer logit_stats;  // bf16 activations: each row's maximum and sum of exponentials (2·N floats)
    TrackedBuffer targets;  // on a device whose memory the host cannot address: the targets' copy
    KeptMask emb_mask;
    Stored lnf_in, head_in;
  };
  // What one micro-batch keeps while it is in flight, per layer and outside the layers.
  struct MicroState {
    std::vector<LayerKept> layers;
    OutsideKept outside;
    int chunks = 0;  // forwards run minus backwards run
    std::vector<LayerWeightPending> pending;  // per layer: a split backward's weight pass still to run
  };
  void backward_pass(const MicroBatch& mb, int64_t id, uint64_t step, float loss_scale, int64_t s, int l0, int l1,
                     const float* dx_in, float* dx_out, bool split);
  // A segment's backward at its top layer `top` (docs/design.md §3): re-runs the forward of its layers
  // first … top − 1 from the checkpoint's kept input, leaving top's input in ws_.resid.
  void rerun_segment_below(MicroState& state, const MicroBatch& mb, uint64_t step, int64_t s, int first, int top);
  void finish_if_done(int64_t id);  // forgets micro-batch id once both its backward passes have run
  void embed_forward(const MicroBatch& mb, uint64_t step, bool training, int64_t s, OutsideKept& out);
  double head_forward(const MicroBatch& mb, int64_t s, OutsideKept& out);
  const int32_t* device_targets(const MicroBatch& mb, int64_t s, OutsideKept& out);
  void head_backward(const MicroBatch& mb, float loss_scale, int64_t s, OutsideKept& out);
  void embed_backward(const MicroBatch& mb, int64_t s, OutsideKept& out);
  // The first of the s_cp(s) positions this rank holds outside the TP region (SP).
  int64_t pos0(int64_t s) const { return tp_.active() && tp_.sequence_parallel ? tp_.rank() * s_local(s) : 0; }
  // ids [b, s] (host) → this rank's [b, s_cp(s)] positions of them, in `out` (device memory).
  void take_positions(const int32_t* ids, int64_t b, int64_t s, int32_t* out) const;
  int64_t vocab_local() const { return model_.padded_vocab(tp_.size()) / tp_.size(); }
  // `experts`: the layer's experts bucket (an MoE layer's), else null.
  LayerWeights layer_weights(int l, const float* bucket, const float* experts) const;
  LayerGrads layer_grads(int l, float* bucket, float* experts) const;
  // A bucket's parameters and gradients: the model's own buffers, or the ZeRO store's.
  const float* bucket_params(int b, int next = -1);
  void bucket_params_done(int b);
  float* bucket_grads(int b);
  void bucket_grads_done(int b);
  LayerContext layer_context(int l, uint64_t step, bool training, int64_t rows, int64_t first_row,
                             int64_t s) const;
  GemmOperand weight_operand(const float* values, int64_t offset, int bucket) const;  // fp32 or bf16
  void run_head_gemm(float* logits, GemmOperand head_in, const float* wte, int64_t N) const;
  // The same in bf16 (bf16 activations), both operands bf16: the kept logits (gpt.cpp head_forward).
  void run_head_gemm_bf16(uint16_t* logits16, GemmOperand head_in, const float* wte, int64_t N) const;
  GemmOperand head_operand(const Stored& head_in, const float* local32, int64_t b, int64_t s, bool regather);
  parallel::VocabShard vocab_shard() const;

  ModelConfig model_;
  LayoutConfig layout_;
  std::vector<LayerRecompute> recompute_;  // each layer's mode (core/recompute_plan.hpp)
  parallel::TensorParallel tp_;
  ParamTable table_;
  uint64_t seed_;
  TrackedArray<float> params_, grads_;
  TrackedArray<float> tied_input_grads_;  // --tied-embedding-grads apart: the embedding's part, [V/t, h]
  TrackedArray<uint16_t> params16_;  // bf16 copy for the GEMMs when activations are bf16
  std::map<int64_t, MicroState> in_flight_;  // by micro-batch id
  Workspace ws_;
  std::vector<Bucket> buckets_;
  BucketStore* store_ = nullptr;
  comm::Communicator* ep_ = nullptr;
  parallel::ContextParallel cp_;
  moe::MoEStats moe_stats_;
};

}  // namespace lattice
