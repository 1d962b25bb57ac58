#pragma once
// The one source of the paper's formulas: activation memory (Table 2 for any d, eq. 5),
// model-state bytes (ZeRO stages) and FLOPs (eq. 7, eq. 8). The planner, the memory report
// and the tests all call these; nothing else restates them.
#include <cstdint>
#include <vector>

#include "core/config.hpp"
#include "core/fp8_layout.hpp"

namespace lattice::analysis {

// Shape of one micro-batch as seen by the activation formulas.
struct ActivationShape {
  int64_t s = 0, b = 0, h = 0, a = 0;
  int64_t v = 0;         // vocabulary as stored (padded) — only the extras use it
  int t = 1;             // tensor-parallel size
  bool sp = false;       // sequence parallel
  int d = 4;             // bytes per stored activation element
  bool dropout = true;   // with dropout 0 no masks are kept and dropout output aliases its input
  bool fused_attention = false;  // --attention fused: the log-sum-exp instead of the s² tensors (§3.1)
  bool packed_masks = false;     // --pack-masks: dropout masks at one bit an element (n/8 bytes, rounded up)
  // --activation-compression fp8: the GeLU and FC2 inputs and the softmax and attention-dropout
  // outputs kept in 8 bits with a scale byte per 32 elements (core/fp8_layout.hpp; docs/design.md §4).
  bool fp8_kept = false;
  // Context parallelism c (docs/design.md §5.1): a rank keeps s/c positions of each sequence, and its
  // attention runs a/(t·c) heads over the whole s (Ulysses) or a/t heads over its s/c queries (the
  // ring, keeping its own K, V only), so every term of a layer's row is ÷ c.
  int cp = 1;
  int64_t positions() const { return s / cp; }  // the positions of a sequence one rank's TP region holds
};
// The bytes a kept dropout mask of n elements takes.
inline int64_t mask_bytes(const ActivationShape& x, int64_t n) { return x.packed_masks ? (n + 7) / 8 : n; }

// The GeLU input and FC2 input one dense layer keeps (8sbh·d/t, or 8 bits each under fp8_kept).
int64_t mlp_4h_kept_bytes(const ActivationShape& x);

// Bytes one transformer layer keeps for backward, for one micro-batch, on one rank.
// `full` = this layer is fully recomputed (keeps only its input); otherwise `selective`
// drops the s² tensors. Table 2 of the paper, written for any d and for dropout on or off.
// With x.fused_attention the attention part is fused_attention_bytes and selective keeps it too
// (there is no s² tensor left to drop: selective = none, docs/design.md §3.1).
int64_t layer_activation_bytes(const ActivationShape& x, bool full, bool selective);

// The formulas count bytes in int64, multiplying before they divide (by t, c): refuses, in one line
// and in double, a shape whose products could pass 2^62 (the planner's absurd sizes: a·s²·b at 2^20
// heads, sequence and batch), before any of them is formed.
void require_countable_activations(const ActivationShape& x);

// What `layers` layers keep for one micro-batch on one rank (each `full` or `selective` as given),
// plus, `with_head`, what the embedding and head keep at p = 1 (extra_activation_bytes): the kept
// part of the lower bound by which train, eval, sample and bench refuse a shape past the machine.
// In double; a shape the int64 formulas could not count is past any machine and gets the largest
// product they would form (at least 2^62), uncounted.
double kept_activation_bound(const ActivationShape& x, double layers, bool full, bool selective, bool with_head);

// The three parts of the per-layer row, exposed so reports can show where bytes go.
struct LayerBytes {
  int64_t replicated;  // LN1/LN2/QKV/FC1 inputs + two residual masks (divided by t only under SP)
  int64_t tp_divided;  // Q, K, V, projection input, GeLU input, FC2 input
  int64_t attention;   // softmax output, its mask and dropout output (the s² part); fused: the log-sum-exp
};
LayerBytes layer_activation_parts(const ActivationShape& x);

// Fused attention's own kept bytes (docs/design.md §3.1): the fp32 log-sum-exp of every query row
// of this rank's heads, 4·a·s·b/t (dropout or not, any d; Q, K, V and the context are counted in
// tp_divided as for the unfused path).
int64_t fused_attention_bytes(const ActivationShape& x);

// Bytes kept outside the layers on the first stage (eq. 5 note): the embedding dropout mask for
// `in_flight` micro-batches, and with p == 1 the final LN input, output-projection input and
// fp32 logits of one micro-batch (and under CP the targets of this rank's positions, 4 bytes each).
int64_t extra_activation_bytes(const ActivationShape& x, int pp, int in_flight);

// A lower bound of the fp32 workspaces one forward/backward of a micro-batch needs on one rank (the
// residual-stream, 4h and logits staging buffers and three s² attention buffers), in double so an
// absurd shape is measured, not overflowed: what refuses sizes beyond the machine before allocating.
// `a_local`, `v_local`: this rank's heads and vocabulary rows.
double forward_workspace_bytes(double s, double b, double h, double a_local, double v_local);

// Is layer `layer` (0-based) of `layers` re-run whole in backward under this layout (a checkpoint or
// in a segment of its list, core/recompute_plan.hpp)? O(1), but for the block method's first k of each
// stage (O(stages)): the planner asks it of every layer.
bool layer_fully_recomputed(const LayoutConfig& layout, int layer, int layers);

// One layer's bytes by its recompute mode (core/recompute_plan.hpp; docs/design.md §4), for one micro-batch
// on one rank, LayerNorm statistics included (2 LayerNorms × mean and 1/σ, fp32: 16·s·b/(t under SP)).
// kept: from its forward to its backward — none A, selective A − S, checkpoint I (its input), in_segment 0.
// live: what its backward holds at once — its full activations A when its forward is re-run (the
// checkpoint's input is the same bytes, not a copy), A − S + S' under selective (the s² tensors re-made at
// full precision, also under fp8).
int64_t layer_norm_stats_bytes(const ActivationShape& x);
int64_t layer_kept_bytes(const ActivationShape& x, LayerRecompute mode);
int64_t layer_live_bytes(const ActivationShape& x, LayerRecompute mode);
// The forward FLOPs a layer's backward re-runs, per micro-batch on one rank: a segment's layer
// 24bsh²/t + 4bs²h/t, selective 4bs²h/t (0 under fused attention, where selective is none), none 0.
double layer_recompute_flops(const ActivationShape& x, LayerRecompute mode);
// Uniform segments of k layers on a stage of n (k divides n), I the input a checkpoint keeps and A a
// layer's live bytes: the top segment's re-run holds (n/k − 1)·I + k·A. Over the kept (n/k)·I + k·A the
// least is at k* = √(n·I/A), that is d* = √(n·A/I) segments: Chen's √n only when A = I (docs/design.md §4).
double uniform_segment_peak(int n, double I, double A, int k);
struct SegmentLength {
  double real = 0;  // k* = √(n·I/A)
  int best = 1;     // the divisor of n with the least uniform_segment_peak (ties to the smaller)
};
SegmentLength best_segment_length(int n, double I, double A);

// M_W: what a split backward's input pass keeps of one dense layer and micro-batch until its weight
// pass (docs/design.md §6): the four linears' inputs and output gradients in the compute dtype,
// d·N·(4h + 12h/t) (each linear's whole-sequence operands, also under SP; the FC2 input 8-bit under
// fp8). Beside it, the small part: the biases' column sums (fp32) and both LayerNorms' per-thread
// partial sums (`threads` × 2h fp32 each).
int64_t layer_weight_pending_bytes(const ActivationShape& x);
int64_t layer_weight_pending_small_bytes(const ActivationShape& x, int64_t threads);
// A split layer's input pass against what the layer kept when it began: it allocates W's operands as
// it goes and frees each kept tensor once read (the order of model/transformer_layer.cpp), so it
// holds the most inside the pass (`peak`, never negative) and `net` more at its end (M_W − M_B less
// the LayerNorm statistics: negative unless whole-sequence operands under SP outweigh the shards).
struct InputPassBytes {
  int64_t peak = 0, net = 0;
};
InputPassBytes layer_input_pass_bytes(const ActivationShape& x, int64_t threads);

// Eq. 5: activation bytes of the first pipeline stage's layers under 1F1B (L layers' worth
// of the per-layer row), times 1 + (p-1)/(p·m) for the interleaved schedule. With uneven stages
// (--pipeline-layers) it is stage_layer_bytes of rank 0.
double first_stage_layer_bytes(const ActivationShape& x, const LayoutConfig& layout, int layers);
// Pipeline rank r's layers under (interleaved) 1F1B: the p − r micro-batches it keeps in flight
// (2(p−r−1) + (m−1)p + 1 chunks of m when interleaved) times the rows of its own layers, as the
// layout's partition gives them (core/stage_partition.hpp); the number of micro-batches is taken ≥ p.
double stage_layer_bytes(const ActivationShape& x, const LayoutConfig& layout, int layers, int rank);
// The micro-batches (in layers' worth of its chunks) pipeline rank r keeps in flight, as above.
double stage_in_flight(const LayoutConfig& layout, int rank);

// One step of n micro-batches on p equal stages (m = 1) given a stage's forward F, input-gradient
// backward B and weight-gradient backward W per micro-batch (the fused backward is B + W), and its
// bubble, the idle share 1 − n(F+B+W)/step (docs/design.md §6). GPipe and 1F1B: (n+p−1)(F+B+W).
// ZB-H1: n(F+B+W) + (p−1)(F+B−W) when n ≥ p and W ≤ min(F, B); (n+p−1)(F+B) + W when n < p.
struct PassTimes {
  double f = 1, b = 1, w = 1;
};
double pipeline_step_time(bool zero_bubble, int p, int n_mb, PassTimes t);
double pipeline_bubble_fraction(bool zero_bubble, int p, int n_mb, PassTimes t);
// PipeDream-2BW (no flush, docs/design.md §6.3) over `steps` steps, each closed by the trainer's
// collectives over the pipeline, with one drain at the end: steps·(n(F+B+W) + (p−1)F) + (p−1)(B+W),
// n ≥ p. One step is 1F1B's; a steady step saves 1F1B's (p−1)(B+W).
double pipedream_2bw_time(int p, int n_mb, PassTimes t, int steps);
double pipedream_2bw_steady_step_time(int p, int n_mb, PassTimes t);  // n(F+B+W) + (p−1)F
double pipedream_2bw_steady_bubble_fraction(int p, int n_mb, PassTimes t);  // (p−1)F / that
double pipedream_2bw_bubble_fraction(int p, int n_mb, PassTimes t, int steps);

// The ramp of GPipe and 1F1B when the stages differ: with c_r rank r's forward + backward seconds
// for one micro-batch, a step takes n·max c + (Σ c − max c), the other stages' work for the first
// micro-batch's forward and the last one's backward (docs/design.md §6). Exact when the slowest stage
// is the last, as the output layer makes it (the simulator agrees: test PipelineSimulation.
// UnevenStagesRamp); an upper bound otherwise. Equal stages: (p−1)·c, the classical bubble. With m
// interleaved chunks each stage's part of it is a chunk's, so the ramp is divided by m.
double pipeline_ramp_seconds(const std::vector<double>& stage_seconds, int m);

// Pipeline bubble: idle share of a step, (p−1)/(m·n_mb + p−1) for n_mb micro-batches on p stages
// of m interleaved chunks each (m = 1: GPipe and 1F1B; the paper writes it as (p−1)/(m·n_mb) of
// the ideal time).
double pipeline_bubble_fraction(int p, int n_mb, int m);

// Model states per rank: what each rank owns between steps.
struct ModelStateBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};
// psi = parameters on this rank's model shard; zero = 0..3; mixed = bf16/fp16 weights and grads
// with fp32 master weights (2+2+12 bytes), otherwise fp32 (4+4+8). optimizer_state_bytes_per_param
// is 8 for Adam's two moments.
// `versions`: weight and gradient copies (PipeDream-2BW keeps 2; the masters stay one).
ModelStateBytes model_state_bytes(int64_t psi, int dp, int zero, bool mixed,
                                  int64_t optimizer_state_bytes_per_param = 8, int versions = 1);

// Parameters held by the most loaded model shard under tensor size t and pipeline size p: the
// first stage, with L/p layers (weights and column-parallel biases split by t; row-parallel
// biases and LayerNorms replicated), the vocabulary-parallel embedding (padded for t) and the
// replicated position embedding; with p == 1 also the final LayerNorm (the output layer is tied).
int64_t shard_parameters(const ModelConfig& model, int tp, int pp);
// The same for any stage holding `stage_layers` layers (the last holds the tied embedding again and
// the final LayerNorm), and one transformer layer's share.
int64_t stage_parameters(const ModelConfig& model, int tp, int pp, int stage, int stage_layers);
int64_t layer_shard_parameters(const ModelConfig& model, int tp);

// FLOPs of one iteration for a global batch of B sequences (paper appendix).
struct FlopsShape {
  double B = 0, s = 0, L = 0, h = 0, v = 0;
};
double model_flops(const FlopsShape& f);  // eq. 7: 72BsLh²(1 + s/6h + v/12hL)
// Hardware FLOPs counted operation by operation (selective adds 4Bs²h per layer: 1 + 2s/9h).
double hardware_flops_counted(const FlopsShape& f, Recompute r);
// Fused attention's backward recomputes QKᵀ from Q, K and the log-sum-exp (docs/design.md §3.1):
// 2bs²h per layer for b sequences, 2BLs²h in all, in every recompute mode.
double fused_attention_recompute_flops_per_layer(double b, double s, double h);
double fused_attention_recompute_flops(const FlopsShape& f);
// Hardware FLOPs in the paper's own form (eq. 8 writes 1 + s/3h for selective).
double hardware_flops_paper(const FlopsShape& f, Recompute r);

// What one rank's step traffic scales with (docs/design.md §5). `StepPasses`: the micro-batch forwards
// and backwards each of its layers ran in the step (a zero-bubble backward counts once, by its input
// pass: its weight pass, which runs as often, issues the layer's gradient reductions and SP's
// re-gathers, which the formulas count per backward) and the optimizer updates it applied. A step of every schedule runs n_mb
// of each and one update; PipeDream-2BW's step that drains also runs the previous batch's last
// backwards and its update, and its first step no update (§6.3). `StageTraffic`: the rank's part of
// the model, which a pipeline stage holds only a share of.
struct StepPasses {
  int64_t forwards = 0, backwards = 0, updates = 0;
  static StepPasses whole(int64_t n_mb) { return {n_mb, n_mb, 1}; }
};
struct StageTraffic {
  int layers = 0;           // this rank's transformer layers
  int reruns = 0;           // of those, the layers whose forward runs again in backward (full recompute)
  bool embedding = false;   // holds the embedding (the first stage)
  bool head = false;        // holds the head (the last stage)
  bool sequence_parallel = false;
};

// Bytes one rank sends in a step through the tensor-parallel conjugate operators (ring accounting),
// in units of one all-reduce of sbh elements of `bytes` each, 2(t−1)/t · sbh·bytes: per micro-batch every
// layer's two f̄ in forward and two f in backward, a re-run layer's two f̄ again in backward, the
// embedding's f̄ (forward) and the head's f (backward). Under SP each all-reduce becomes a
// reduce-scatter plus an all-gather, the same bytes (paper §4.3), except that the ends' halves fall
// one in each direction: the embedding's ḡ reduce-scatters in forward and all-gathers in backward,
// the head's g the other way round. A whole model's step: (4L + 2) units per micro-batch.
double tp_conjugate_bytes(int64_t s, int64_t b, int64_t h, int t, const StageTraffic& stage, const StepPasses& passes,
                          int bytes = 4);
// Context parallelism's Ulysses all-to-alls (docs/design.md §5.1): per micro-batch and layer, Q, K,
// V and the context in forward, their four gradients in backward, and with fused attention the kept
// context once more in backward; each moves b·(s/c)·h/t elements of which (c−1)/c leave the rank. A
// re-run layer adds its four forward exchanges in backward.
inline constexpr int kCpAllToAllsForward = 4;
inline int cp_all_to_alls_backward(bool fused_attention) { return fused_attention ? 5 : 4; }
// The bytes one exchange sends from a rank, (c−1)/c of its b·(s/c)·h/t elements (none when c = 1).
double cp_all_to_all_sent_bytes(int64_t s, int64_t b, int64_t h, int t, int c, int bytes = 4);
// Context parallelism's ring (--cp-comm-type p2p): the bytes of one K, V pair a rank passes to its
// neighbour, 2·b·(s/c)·h/t elements (0 when c = 1). Per micro-batch and layer the pair goes on c − 1
// times in forward and again in backward, where the pair's dK, dV partial sums also go on c times
// (the last home to their owner): c − 1 pairs forward, 2c − 1 backward; a re-run layer adds its
// forward's c − 1 in backward.
double cp_ring_pair_bytes(int64_t s, int64_t b, int64_t h, int t, int c, int bytes = 4);
// What one rank's CP group carries in a step for the layout's comm type: the all-to-alls' or the ring's bytes.
double cp_bytes(CpComm comm, int64_t s, int64_t b, int64_t h, int t, int c, bool fused_attention,
                const StageTraffic& stage, const StepPasses& passes, int bytes = 4);
// The data-parallel group's bytes in a step under ZeRO stage `zero`: stages 0–1 move 2Ψ an update
// (all-reduce, or reduce-scatter + all-gather); stage 2 reduce-scatters each micro-batch's gradient
// as backward produces it, then all-gathers once an update; stage 3 also gathers the parameters
// before each micro-batch's forward and again before its backward: 3Ψ per micro-batch.
// `extra_gathered` corrects stage 3 for tensors gathered more or less often a micro-batch (the tied
// embedding gathered again for the head, the position embedding not needed in backward);
// `extra_reduced` stages 2-3 for tensors reduce-scattered twice a backward (the tied embedding's
// head part and embedding part, handed back separately when one stage holds both).
double dp_bytes(int64_t psi, int dp, int zero, const StepPasses& passes, int64_t extra_gathered = 0,
                int64_t extra_reduced = 0, int bytes = 4);

}  // namespace lattice::analysis
