#pragma once
// Model and layout configuration shared by the engine, the planner and the reports.
#include <cstdint>
#include <string>
#include <vector>

#include "core/recompute_plan.hpp"

namespace lattice {

enum class Recompute { none, selective, full };
// Which layers --recompute full re-runs (docs/design.md §3): block = the first N layers, each its own
// one-layer segment; uniform = a k-layer segment every k layers of each virtual stage.
enum class RecomputeMethod { block, uniform };
enum class DType { fp32, bf16 };
// How model weights and gradients are stored: fp32, or 16 bits with fp32 master weights.
enum class ParamsDType { fp32, bf16, fp16 };
// How the s² part of attention runs: unfused (the scores, probabilities and dropout output as
// tensors, the paper's kept bytes) or fused (tiled, online softmax, the log-sum-exp kept:
// docs/design.md §3.1).
enum class AttentionKernel { unfused, fused };
// How context-parallel ranks share attention (docs/design.md §5.1): a2a, DeepSpeed-Ulysses (all-to-all
// from sequence shards to head shards around the s² part); p2p, a ring of K/V blocks, the default.
enum class CpComm { a2a, p2p };

const char* to_string(Recompute r);
const char* to_string(RecomputeMethod m);
const char* to_string(DType d);
const char* to_string(ParamsDType d);
const char* to_string(AttentionKernel k);
Recompute parse_recompute(const std::string& s);  // throws InputError
RecomputeMethod parse_recompute_method(const std::string& s);  // throws InputError
DType parse_dtype(const std::string& s);          // throws InputError
ParamsDType parse_params_dtype(const std::string& s);  // throws InputError
AttentionKernel parse_attention(const std::string& s);  // throws InputError
const char* to_string(CpComm c);
CpComm parse_cp_comm(const std::string& s);  // throws InputError
inline int bytes_of(DType d) { return d == DType::bf16 ? 2 : 4; }

// Bounds of a model's shape: far past any model trained today, and small enough that every size
// computed from them (parameters, bytes, FLOPs) fits 64-bit arithmetic.
inline constexpr int kMaxLayers = 10000;
inline constexpr int kMaxHidden = 1 << 20;
inline constexpr int kMaxSeqLen = 1 << 20;
// A vocabulary the planner sizes (today's largest hold about 2^18 pieces); a model lattice runs reads
// its token ids from uint16 files, so it has at most kMaxTokenVocab (ModelConfig::require_token_vocab).
inline constexpr int kMaxVocab = 1 << 20;
inline constexpr int kMaxTokenVocab = 1 << 16;

// Mixture-of-Experts (docs/design.md §12): the MLP of layer i is E experts behind a router when
// experts > 0 and i % layer_freq == 0.
enum class MoERouter { topk, gshard, switch_, expert_choice };
enum class DropPolicy { probs, position };  // which tokens over an expert's capacity are dropped
const char* to_string(MoERouter r);
const char* to_string(DropPolicy p);
MoERouter parse_moe_router(const std::string& s);    // throws InputError
DropPolicy parse_drop_policy(const std::string& s);  // throws InputError

struct MoEConfig {
  int experts = 0;            // E; 0 = dense model
  int layer_freq = 1;         // F
  int topk = 0;               // k; 0 = the router's own (topk 2, gshard 2, switch 1, expert-choice 1)
  int ffn_hidden = 0;         // each expert's hidden size f; 0 = 4h
  MoERouter router = MoERouter::topk;
  double capacity_factor = 1.0;  // cf; 0 = no dropping (token-choice routers)
  DropPolicy drop_policy = DropPolicy::probs;
  double aux_loss_coeff = 0.01;
  bool load_balancing = true;  // false: the auxiliary losses are reported, not added to the loss
  int groups = 1;             // local group dispatching: routing groups per micro-batch (G)
  double expert_dropout = 0;  // dropout on each expert's hidden activation
  double init_scale = 1.0;    // multiplies the router's and experts' init std (Switch: 0.1)

  bool enabled() const { return experts > 0; }
  bool is_moe_layer(int layer) const { return experts > 0 && layer % layer_freq == 0; }
  int k() const;  // the number of experts each token is sent to (expert choice: the c of C = k·T·cf/E)
};

struct ModelConfig {
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int seq_len = 64;
  int vocab = 256;     // the tokenizer's vocabulary; padded internally
  double dropout = 0.1;
  MoEConfig moe;

  int ffn_hidden() const { return moe.ffn_hidden ? moe.ffn_hidden : 4 * hidden; }
  int moe_layers() const;  // how many layers are MoE layers
  int head_dim() const { return hidden / heads; }
  // Megatron's --make-vocab-size-divisible-by 128, times the tensor-parallel size.
  int padded_vocab(int tp = 1) const {
    const int q = 128 * tp;
    return (vocab + q - 1) / q * q;
  }
  int64_t num_params() const;  // with the padded vocabulary (what the engine stores)
  void validate() const;       // throws InputError naming the bad field
  // train, eval and sample: the vocabulary fits the uint16 token ids of lattice's token files.
  void require_token_vocab() const;
};

// How the work is split; everything defaults to one rank.
struct LayoutConfig {
  int tp = 1;             // tensor-parallel size t
  int pp = 1;             // pipeline-parallel size p
  int virtual_stages = 1; // m, interleaved chunks per pipeline rank
  int dp = 1;             // data-parallel size N_d
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int recompute_layers = -1;  // block: full recompute of each stage's first N layers, -1 = all; uniform: k
  RecomputeMethod recompute_method = RecomputeMethod::block;
  // --recompute-plan: each layer's mode given outright (L entries, core/recompute_plan.hpp); empty =
  // derived from recompute, recompute_method and recompute_layers (layer_recompute).
  std::vector<LayerRecompute> recompute_plan;
  DType activation_dtype = DType::fp32;
  int zero = 0;
  int ep = 1;             // expert-parallel size e (divides N_d)
  int cp = 1;             // context-parallel size c: each sequence split over c ranks (docs/design.md §5.1)
  CpComm cp_comm = CpComm::p2p;
  // Model weights and gradients for compute: fp32, or 16-bit (bf16, fp16) with fp32 master
  // weights in the optimizer (mixed precision, docs/design.md §8).
  ParamsDType params_dtype = ParamsDType::fp32;
  AttentionKernel attention = AttentionKernel::unfused;
  bool pack_masks = false;  // dropout masks kept at one bit an element (docs/design.md §4)
  bool fp8_kept = false;    // --activation-compression fp8: selected kept tensors in 8 bits (docs/design.md §4)
  // --tied-embedding-grads apart: one rank accumulates the tied embedding's input and output gradients
  // in two buffers and adds them at the step's end, in the order pipeline stages do, so a pipeline
  // reproduces it bit for bit (docs/design.md §17).
  bool tied_grads_apart = false;
  // --pipeline-layers: layers per virtual stage (c·p + r order), summing to L; empty = L/(p·m) each
  // (core/stage_partition.hpp, docs/design.md §6).
  std::vector<int> stage_layers;
  bool fused_attention() const { return attention == AttentionKernel::fused; }
  // The recompute that actually runs: with fused attention there is no s² tensor for selective to
  // drop, so selective is none (docs/design.md §3.1).
  Recompute recompute_in_effect() const {
    return fused_attention() && recompute == Recompute::selective ? Recompute::none : recompute;
  }
  bool mixed_precision() const { return params_dtype != ParamsDType::fp32; }
  // The N_d·c ranks that hold the same weights (DP with CP, docs/design.md §5.1): gradients are reduced,
  // and ZeRO shards the model states, over them.
  int dp_cp() const { return dp * cp; }
};

// Context parallelism against the model and the layout (docs/design.md §5.1): empty when the a2a
// (Ulysses) split can run, else the one line naming the broken rule. The trainer and the planner
// both ask it, so a layout is refused in the same words by each.
std::string context_parallel_problem(const ModelConfig& m, const LayoutConfig& layout);

}  // namespace lattice
