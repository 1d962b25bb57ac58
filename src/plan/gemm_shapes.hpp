#pragma once
// The GEMMs of a step as the engine calls them (src/kernels/linear.cpp, src/model/attention.cpp,
// the head in src/model/gpt.cpp), one micro-batch on one rank, and their measured times on this
// machine: what `--hardware local` charges instead of one rate for every shape (docs/plan.md).
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/formulas.hpp"
#include "analysis/moe_formulas.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/gemm.hpp"

namespace lattice::plan {

enum class GemmPass { forward, backward_input, backward_weight };

struct GemmCall {
  GemmShape shape;
  GemmPass pass = GemmPass::forward;
  bool attention = false;  // the s² GEMMs (QKᵀ, P·V and their backward): what selective recompute re-runs
  bool mlp = false;        // the dense MLP's FC1 and FC2: what an MoE block replaces
  // C written in bf16 under bf16 activations (kernels/gemm.hpp, gemm_bf16_out): QKV's and FC1's
  // forward, FC2's input gradient and the head's logits, as the engine's direct bf16 path writes them.
  bool out16 = false;
};

double gemm_flops(const GemmShape& s);  // 2·batch·M·N·K

// A dense transformer layer (rows = s·b: under SP the linears see the gathered sequence; heads a/t).
std::vector<GemmCall> layer_gemms(const analysis::ActivationShape& x);
// An MoE block (src/moe/moe_layer.cpp) on `local_experts` experts of this rank, its received rows
// shared evenly among them: the router's GEMMs ([s·b, h] · [h, E], twice for the noisy top-k router,
// with their weight and input gradients) and each expert's FC1 and FC2, whose rows go in power-of-two
// chunks as the engine cuts them.
std::vector<GemmCall> moe_block_gemms(const analysis::MoEKeptShape& m, int local_experts);
// The output layer: logits [s·b, v/t] = x · wteᵀ, its input gradient and its weight gradient.
std::vector<GemmCall> head_gemms(const analysis::ActivationShape& x);

// Seconds of one call of each shape, measured once in this process at `threads` OpenMP threads with
// fp32 or bf16 operands (median of a few calls after a warm-up) and remembered.
class GemmTimer {
 public:
  explicit GemmTimer(int threads) : threads_(threads) {}
  double seconds(const GemmShape& shape, bool bf16);
  // The fused attention's kernel (kernels/flash_attention.hpp: fp32, bf16 Q, K, V widened before it)
  // forward or backward (which recomputes its QKᵀ tiles), dropout on or off: it is not GEMMs at a
  // GEMM's rate, so --hardware local times it as it times the GEMMs. ring 0: the whole-sequence kernel
  // on shape x; ring c > 1: the CP ring's blocks of one rank over its c steps (for_each_ring_block;
  // every rank's work is the same), x being the rank's heads over the whole sequence.
  double attention_seconds(const FlashShape& x, int ring, bool dropout, bool backward);
  int threads() const { return threads_; }
  size_t shapes_measured() const { return cache_.size() + attention_cache_.size(); }

 private:
  int threads_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool, bool>, double> cache_;
  // (b, a, s, dh, ring size c or 0 for the whole-sequence kernel, dropout, backward)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int, bool, bool>, double> attention_cache_;
};

}  // namespace lattice::plan
