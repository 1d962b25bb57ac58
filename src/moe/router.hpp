#pragma once
// The four routers of docs/design.md §12, each one forward (router logits → assignments of tokens to
// experts, their gates, the auxiliary loss) and one backward (gate gradients and the auxiliary loss's
// weight → logit gradients):
//   topk           Shazeer et al. 2017: softmax over the k largest of x·W_g + ε·softplus(x·W_noise),
//                  importance and load losses (squared coefficients of variation)
//   gshard         Lepikhin et al. 2020: top-2 of softmax, gates renormalised over the two, the second
//                  expert kept with probability min(1, 2·g₂) (random routing), aux E·mean_i(f_i·P_i)
//   switch         Fedus et al. 2021: top-1 of softmax, gate = its probability, aux E·Σ_i f_i·P_i
//   expert_choice  Zhou et al. 2022: each expert takes its C tokens of highest probability; no aux
// Token-choice routers then apply each expert's capacity C per routing group, dropping by the policy.
// Everything is a pure function of the logits and (seed, step, layer, global token position), so
// every layout routes the same.
#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "random/philox.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::moe {

struct RouterSpec {
  MoERouter kind = MoERouter::switch_;
  int experts = 0, k = 1;
  DropPolicy policy = DropPolicy::probs;
  int64_t tokens = 0;      // N: the micro-batch's tokens, rows of the logits
  int groups = 1;          // G contiguous routing groups of N/G tokens
  int64_t capacity = 0;    // C per expert per group; 0 = unlimited
  bool training = false;   // noise and random routing only while training
  DropoutStream stream;    // seed, step, layer
  int64_t seq = 1, first_row = 0;  // token n is global token (first_row + n / seq)·seq + n % seq

  uint64_t global_token(int64_t n) const { return uint64_t((first_row + n / seq) * seq + n % seq); }
  int64_t group_tokens() const { return tokens / groups; }
};

// One micro-batch's routing: assignments (token, expert, gate) in dispatch order — expert-major,
// tokens ascending within an expert — and what the step report shows.
struct Routing {
  tracked_vector<int32_t, MemoryCategory::workspaces> token, expert;
  tracked_vector<float, MemoryCategory::workspaces> gate;
  std::vector<int64_t> load;   // assignments per expert, after dropping
  double aux_loss = 0;         // the router's auxiliary loss, mean over the groups (unweighted)
  int64_t offered = 0, dropped = 0;  // token choice: assignments wanted / over capacity;
                                     // expert choice: tokens / tokens no expert took
  int64_t size() const { return int64_t(token.size()); }
};

// `logits` [N, E] = x·W_g, `noise_logits` [N, E] = x·W_noise (topk only, else null). Writes `probs`
// [N, E]: the softmax (topk: the top-k gates, zero elsewhere) that the backward reads.
Routing route_forward(const RouterSpec& spec, const float* logits, const float* noise_logits, float* probs);

// From the gates' gradients dgate[A] (assignment order) and aux_weight, the derivative of the loss by
// each group's auxiliary loss: dlogits [N, E] and (topk) dnoise_logits [N, E], both overwritten.
void route_backward(const RouterSpec& spec, const float* logits, const float* noise_logits, const float* probs,
                    const int32_t* token, const int32_t* expert, const float* dgate, int64_t assignments,
                    double aux_weight, float* dlogits, float* dnoise_logits);

}  // namespace lattice::moe
