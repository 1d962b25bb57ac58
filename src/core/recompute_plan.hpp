#pragma once
// What each layer keeps for backward and how it gets the rest back (docs/design.md §3, issue 19): the
// one per-layer list the engine runs, the formulas size, the planner times and the chooser fills.
//   none        keeps all its activations (Table 2's row);
//   selective   keeps all but the s² tensors, re-running QKᵀ, softmax, dropout and probs×V;
//   checkpoint  keeps only its input and starts a segment: in backward the segment is re-run from it;
//   in_segment  keeps nothing: a later layer of the segment its nearest checkpoint below starts.
// Block N (Megatron's --recompute-method block) is N one-layer segments at the bottom; uniform k
// (--recompute-method uniform --recompute-layers k, Chen et al. 2016) a k-layer segment every k layers
// of each virtual stage. Segments never cross a virtual stage (a chunk's backward is one action).
#include <string>
#include <vector>

namespace lattice {

struct LayoutConfig;

enum class LayerRecompute { none, selective, checkpoint, in_segment };

// One character a layer: n s c ~ (e.g. "c~~c~~ssnn"), for printing, for comparing across ranks and
// for --recompute-plan.
char to_char(LayerRecompute r);
std::string recompute_plan_text(const std::vector<LayerRecompute>& plan);
std::vector<LayerRecompute> parse_recompute_plan(const std::string& text);  // throws InputError

// The list a layout runs for a model of `layers` layers: its recompute_plan when given (checked: L
// entries, every in_segment above a checkpoint or in_segment of its own virtual stage), else none /
// selective (none under fused attention) everywhere, block's first N layers of each (virtual) stage as
// checkpoints, or uniform's
// k-layer segments. Throws InputError for k <= 0, k > L, k not dividing a virtual stage's layer count,
// uniform without --recompute full, and a stage partition that does not fit the layout.
std::vector<LayerRecompute> layer_recompute(const LayoutConfig& layout, int layers);

// Does layer l keep only its input (checkpoint) or nothing (in_segment): its forward is re-run.
inline bool forward_recomputed(LayerRecompute r) {
  return r == LayerRecompute::checkpoint || r == LayerRecompute::in_segment;
}

}  // namespace lattice
