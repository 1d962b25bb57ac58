#pragma once
// The MoE block that replaces an MLP (docs/design.md §12): route → dispatch → each expert's
// FC1 → GeLU (→ expert dropout) → FC2 → return → combine, as one forward/backward pair whose
// saved tensors are MoEKept. Under tensor parallelism every rank routes the whole sequence the same
// way and its experts are column/row-parallel, so the combined output is a partial sum that the
// caller reduces like a row-parallel GEMM's; under expert parallelism the tokens go to the rank that
// holds their expert through an all-to-all of the expert-parallel group. Under context parallelism a
// rank holds s/c positions and routes the whole micro-batch's gathered logits (cp_routing.hpp).
#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/gemm.hpp"
#include "kernels/kept_mask.hpp"
#include "moe/router.hpp"
#include "tensor/memory_tracker.hpp"
#include "tensor/stored.hpp"
#include "tensor_parallel/context_parallel.hpp"

namespace lattice::moe {

// What an MoE block keeps for backward, each under its own tag (A = assignments this rank routed,
// R = rows its experts received; analysis/moe_formulas.hpp counts the same).
struct MoEKept {
  TrackedBuffer router_probs;         // fp32 [N, E] softmax (noisy top-k: its gates)
  TrackedBuffer router_logits;        // fp32 [N, E] clean logits (noisy top-k only)
  TrackedBuffer router_noise_logits;  // fp32 [N, E] x·W_noise (noisy top-k only)
  TrackedBuffer dispatch;             // int32 token[A], expert[A], send counts[E], receive counts[E]
  TrackedBuffer combine_weights;      // fp32 gate[A]
  Stored combine_input;               // [A, h] the experts' outputs back at the source (partial under TP)
  Stored expert_fc1_in;               // [R, h] the permuted tokens as the experts read them
  Stored expert_gelu_in;              // [R, f/t]
  Stored expert_fc2_in;               // [R, f/t] GeLU output (after expert dropout)
  KeptMask expert_mask;               // [R, f/t] expert dropout mask (a byte, or a bit with --pack-masks)
  int64_t assignments = 0, received = 0;

  void release() {
    router_probs.reset(), router_logits.reset(), router_noise_logits.reset(), dispatch.reset();
    combine_weights.reset(), combine_input.reset(), expert_fc1_in.reset(), expert_gelu_in.reset();
    expert_fc2_in.reset(), expert_mask.reset();
    assignments = received = 0;
  }
};

struct ExpertWeights {
  GemmOperand fc1, fc2;            // [h, f/t], [f/t, h]
  const float *fc1_b, *fc2_b;      // [f/t], [h]
};
struct ExpertGrads {
  float *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};
struct MoEWeights {
  const float* router = nullptr;        // W_g [h, E], fp32
  const float* router_noise = nullptr;  // W_noise [h, E] (noisy top-k)
  std::vector<ExpertWeights> experts;   // this rank's experts
};
struct MoEGrads {
  float* router = nullptr;
  float* router_noise = nullptr;
  std::vector<ExpertGrads> experts;
};

// What the step report adds up over micro-batches and layers.
struct MoEStats {
  double aux_loss_tokens = 0;         // Σ coeff·aux·N (divided by the global batch's tokens to report)
  int64_t offered = 0, dropped = 0;
  std::vector<std::vector<int64_t>> load;  // [layer][expert] assignments, global experts
  void add_load(int layer, const std::vector<int64_t>& per_expert);
};

struct MoEContext {
  RouterSpec route;                     // tokens N = the full sequence of the micro-batch (every CP rank's)
  parallel::ContextParallel cp;         // the rank holds N/c of them (docs/design.md §5.1)
  int64_t h = 0, ffn_local = 0;         // hidden size, each expert's hidden size on this TP rank
  DType dtype = DType::fp32;            // storage of kept activations and GEMM inputs
  int tp_rank = 0;
  comm::Communicator* tp = nullptr;     // gates' gradients are summed over it (null: one rank)
  comm::Communicator* ep = nullptr;     // the expert-parallel group (null: every expert is here)
  int expert0 = 0, local_experts = 0;   // the first expert this rank holds and how many
  int64_t ffn_total = 0;                // f, for expert dropout's global element index
  float expert_dropout = 0.0f;
  bool pack_masks = false;              // keep the expert dropout mask at one bit an element
  double aux_coeff = 0;                 // the auxiliary loss's weight in the loss
  MoEStats* stats = nullptr;            // null: not counted (recompute, evaluation)
  int layer = 0;
};

// Scratch buffers reused by every MoE block (not kept: ZeRO-R's constant-size buffers; tracked as
// workspaces, sized by the routing).
struct MoEWorkspace {
  tracked_vector<float, MemoryCategory::workspaces> logits, noise, rows, rows2, hidden, hidden2, dgate;
  // Under CP: this rank's logits (and noise logits), and the all-gather's receive buffer.
  tracked_vector<float, MemoryCategory::workspaces> cp_local, cp_gathered;
  tracked_vector<int32_t, MemoryCategory::workspaces> cp_tokens;  // each assignment's micro-batch token
  tracked_vector<uint16_t, MemoryCategory::workspaces> half;
  tracked_vector<uint8_t, MemoryCategory::workspaces> mask_bytes;  // --pack-masks: the expert mask's bytes
};

// out [N, h] = Σ_a gate_a · expert_a(x[token_a]) (partial over TP); x [N, h] fp32, the block's input
// (the LayerNorm output, whole sequence; under CP N is this rank's N/c positions).
void moe_forward(float* out, const float* x, MoEKept& kept, const MoEWeights& w, const MoEContext& c,
                 MoEWorkspace& ws);

// dx [N, h] (overwritten, partial over TP) from dout [N, h]; x as in forward (re-read for the
// router's weight gradient); `aux_weight` = d loss / d (each group's auxiliary loss).
void moe_backward(float* dx, const float* dout, const float* x, const MoEKept& kept, const MoEWeights& w,
                  const MoEGrads& g, const MoEContext& c, double aux_weight, MoEWorkspace& ws);

}  // namespace lattice::moe
