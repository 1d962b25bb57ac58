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
};
struct MoEKeptBytes {
  int64_t replicated;  // LN2 input, router input, residual mask (÷t under SP)
  int64_t router;      // fp32 [sb, E] probabilities (and logits, noise logits for noisy top-k)
  int64_t dispatch;    // int32 token and expert of each assignment, send and receive counts
  int64_t combine;     // fp32 gate of each assignment, expert outputs back at the source (d)
  int64_t experts;     // each expert's FC1 input (h), GeLU input and FC2 input (f/t), dropout mask
  int64_t total() const { return replicated + router + dispatch + combine + experts; }
};
MoEKeptBytes moe_mlp_kept_bytes(const MoEKeptShape& m);

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

}  // namespace lattice::analysis
