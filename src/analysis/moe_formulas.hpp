#pragma once
// The Mixture-of-Experts formulas (docs/design.md §12): expert capacity, routed tokens, the bytes an
// MoE layer keeps for backward, parameters (total, per expert-parallel rank, active per token) and
// FLOPs. The engine's tests, the memory report and the planner all call these.
#include <cstdint>

#include "analysis/formulas.hpp"
#include "core/config.hpp"

namespace lattice::analysis {

// C = ceil(k·T·cf / E) tokens per expert for a routing group of T tokens (at most T for expert
// choice, where each expert takes C tokens); 0 = unlimited (cf = 0, token-choice routers).
int64_t expert_capacity(const MoEConfig& moe, int64_t T);

// Assignments (token, expert) a micro-batch of `tokens` tokens routes, at most: k per token, capped
// by the capacity of each group's E experts; expert choice takes exactly E·C per group.
int64_t routed_assignments_bound(const MoEConfig& moe, int64_t tokens);
// One context-parallel rank's share of them when its s/c positions route alike: ceil(bound / c)
// (exact without dropping, k·tokens/c; with a capacity a balanced estimate, docs/design.md §5.1).
int64_t cp_rank_assignments(const MoEConfig& moe, int64_t tokens, int cp);

// What one MoE layer's MLP block keeps for one micro-batch on one rank. A = assignments this rank
// routed (not dropped), R = token rows its experts received (A without expert parallelism).
struct MoEKeptShape {
  int64_t s = 0, b = 0, h = 0;
  int t = 1;
  bool sp = false;
  int d = 4;             // bytes of a stored activation (fp32 4, bf16 2)
  bool dropout = true;   // residual dropout mask kept
  int64_t experts = 0, ffn_hidden = 0;
  bool noisy_router = false;    // noisy top-k keeps clean and noise logits beside the gates
  bool expert_dropout = false;  // a 1-byte mask on each expert's hidden activation
  int64_t assignments = 0, received = 0;
  bool packed_masks = false;    // --pack-masks: every mask at one bit an element
  int cp = 1;  // context-parallel size: a rank keeps s/c positions, but routes the whole micro-batch
  int64_t local_tokens() const { return s * b / cp; }
};
struct MoEKeptBytes {
  int64_t replicated;  // LN2 input, router input, residual mask (s/c positions; ÷t under SP)
  int64_t router;      // fp32 [sb, E] probabilities (and logits, noise logits for noisy top-k): the
                       // whole micro-batch's under CP, whose routing every CP rank repeats
  int64_t dispatch;    // int32 token and expert of each assignment, send and receive counts
  int64_t combine;     // fp32 gate of each assignment, expert outputs back at the source (d)
  int64_t experts;     // each expert's FC1 input (h), GeLU input and FC2 input (f/t), dropout mask
  int64_t total() const { return replicated + router + dispatch + combine + experts; }
};
MoEKeptBytes moe_mlp_kept_bytes(const MoEKeptShape& m);
// The shape of a model's MoE block for one micro-batch of `x`, with A and R given (the planner's
// balanced bound, or what a run's routing kept).
MoEKeptShape moe_kept_shape(const ActivationShape& x, const ModelConfig& model, int64_t assignments,
                            int64_t received);

// The MoE block's scratch, reused by every MoE layer of a rank (moe/moe_layer.hpp's MoEWorkspace, sized
// by the routing and grown to the largest seen): the router's logits (and noise logits), the dispatched
// and expert-major rows, the experts' hidden activations twice (one also the all-to-all staging), the
// gates' gradient, the 16-bit staging of backward's GEMM operands, the packed expert mask, and the
// routing's token, expert and gate of each assignment. Those sized by the routed rows grow as the rows
// vary, holding old and new during a growth, so they count twice. With m's A and R at their bounds, a
// bound. Under CP also the local logits and the all-gather's receive buffer, and each assignment's
// token in the whole micro-batch.
int64_t moe_workspace_bytes(const MoEKeptShape& m);

// A whole MoE layer: the attention half of Table 2's row (layer_activation_bytes without its MLP
// half) plus the MoE block; under full recompute, the layer input only; selective drops the s² part.
int64_t moe_layer_activation_bytes(const ActivationShape& x, const MoEKeptShape& m, bool full, bool selective);

// Parameters of one MoE layer's MLP block: E experts (2hf + f + h each) and the router (hE, twice
// for noisy top-k).
int64_t moe_expert_params(const ModelConfig& model);  // one expert
int64_t moe_router_params(const ModelConfig& model);
// Parameters one rank holds under expert-parallel size e (and tensor size t, pipeline size 1):
// dense ones whole (TP-split as usual), E/e experts of each MoE layer.
int64_t moe_rank_parameters(const ModelConfig& model, int tp, int ep);
// Parameters a token passes through (its k experts instead of E): what FLOPs per token follow.
int64_t active_parameters(const ModelConfig& model);
// Forward FLOPs per token of the whole model: 2 per active matrix parameter, the router GEMMs and
// attention's 4·s·h per layer (backward is twice that).
double forward_flops_per_token(const ModelConfig& model);

// --- Planning an MoE run (src/plan, docs/design.md §12) ---

// Parameters in all experts of all MoE layers: moe_layers · E · moe_expert_params (the rest of
// num_params is dense).
int64_t all_expert_parameters(const ModelConfig& model);

// How many of pipeline rank 0's layers (its chunks, as the layout's partition gives them) are MoE layers.
int first_stage_moe_layers(const ModelConfig& model, const LayoutConfig& layout);

// Parameters of the most loaded model shard (pipeline rank 0) under tensor size t, pipeline size p
// (m chunks) and expert-parallel size e, split by the group their gradients are reduced over:
// `dense` (attention, dense MLPs, routers, LayerNorms, embeddings — the N_d data-parallel ranks; the
// same count as shard_parameters for a dense model) and `experts` (E/e experts of each of the stage's
// MoE layers, TP-split like an MLP — the N_d/e ranks of the expert-data-parallel group).
struct MoEShardParameters {
  int64_t dense = 0, experts = 0;
  int64_t total() const { return dense + experts; }
};
MoEShardParameters moe_shard_parameters(const ModelConfig& model, const LayoutConfig& layout);

// Model states per rank: the dense parameters' states as model_state_bytes over N_d ranks, the
// experts' over the N_d/e ranks of the expert-data-parallel group (ZeRO shards each over its group);
// `versions` weight and gradient copies (PipeDream-2BW: 2).
ModelStateBytes moe_model_state_bytes(const MoEShardParameters& psi, int dp, int ep, int zero, bool mixed,
                                      int64_t optimizer_state_bytes_per_param = 8, int versions = 1);

// Eq. 5 for an MoE model: first_stage_layer_bytes (L layers' worth, the first N fully recomputed, the
// interleaved factor) with each of the first stage's MoE layers at moe_layer_activation_bytes.
double moe_first_stage_layer_bytes(const ActivationShape& x, const MoEKeptShape& m, const LayoutConfig& layout,
                                   const ModelConfig& model);

// Bytes one rank sends in one all-to-all of an MoE layer (the dispatch, or the combine that brings the
// same rows back): the (e−1)/e of its `assignments` whose expert sits on another of the e ranks, h
// elements of `bytes` each (fp32 on the wire).
double moe_all_to_all_bytes(int64_t assignments, int64_t h, int ep, int bytes = 4);
// Rows the experts of one rank can receive at most for one micro-batch of `tokens` tokens per rank
// when the routing is not balanced: every one of the e ranks' A assignments (e·A, A a CP rank's share
// under CP), and with a capacity no more than C per expert from each source rank and routing group
// (E/e experts × e sources × G × C).
int64_t moe_received_rows_bound(const MoEConfig& moe, int64_t tokens, int ep, int cp = 1);
// Bytes one rank sends per MoE layer and forward under context parallelism: the all-gather of its
// s/c positions' router logits (and noise logits for noisy top-k) over the CP group, (c−1)/c of the
// micro-batch's sb·E floats (docs/design.md §5.1).
double moe_cp_gather_bytes(const MoEConfig& moe, int64_t tokens, int cp, int bytes = 4);
// All-to-alls of one MoE layer per micro-batch: dispatch and combine forward, and the same two backward.
inline constexpr int kMoEAllToAllsForward = 2;
inline constexpr int kMoEAllToAllsPerLayer = 2 * kMoEAllToAllsForward;

// Model FLOPs of one iteration of B sequences: forward and backward (3×) of forward_flops_per_token
// for each of the B·s tokens (for a dense model this is eq. 7 with the vocabulary padded for t = 1).
double moe_model_flops(const ModelConfig& model, double B);
// The same plus what recomputation runs again, op by op: full recompute one more forward of every
// layer (forward_flops_per_token without the logits' 2hv), selective QKᵀ and probs×V (4·s·h a token,
// a layer).
double moe_hardware_flops_counted(const ModelConfig& model, double B, Recompute r);

}  // namespace lattice::analysis
