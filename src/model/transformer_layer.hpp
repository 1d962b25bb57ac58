#pragma once
// One pre-LN transformer layer: x + Dropout(Proj(Attn(LN1(x)))), then x + Dropout(FC2(GeLU(FC1(LN2(x))))).
// Forward keeps exactly docs/design.md §3's tensors in `kept`; backward reads only `kept`.
#include "model/attention.hpp"
#include "model/layer_context.hpp"
#include "model/layer_kept.hpp"
#include "model/workspace.hpp"

namespace lattice {

// A dropout mask over rows [b, n, h] of positions [pos0, pos0 + n) of the TP region's sequence: element
// (row, position, column) is drawn at global index ((first_row + row)·S + global position)·h + column
// (docs/design.md §10), global positions through the CP split, so every layout draws one rank's mask.
void fill_sequence_mask(uint8_t* mask, const DropoutStream& stream, int64_t first_row, int64_t b,
                        const parallel::SequenceSplit& split, int64_t pos0, int64_t n, int64_t h, float p);

// x: the residual stream [N, h] (fp32), replaced by the layer's output. keep_s2 = false is
// selective recompute's forward (the softmax output, its mask and dropout output are not kept).
void layer_forward(float* x, LayerKept& kept, bool keep_s2, const LayerWeights& w, const LayerContext& c,
                   Workspace& ws);

// Selective recompute: re-create the s² tensors in `kept` from its Q, K, V (fused attention keeps
// none, so nothing: docs/design.md §3.1).
void layer_recompute_attention(LayerKept& kept, const LayerContext& c, Workspace& ws);

// dx: gradient w.r.t. the layer output [N, h], replaced by the gradient w.r.t. its input.
// Parameter gradients accumulate into g.
void layer_backward(float* dx, const LayerKept& kept, const LayerWeights& w, const LayerGrads& g,
                    const LayerContext& c, Workspace& ws);

// The same backward split in two (docs/design.md §6, zero-bubble schedules): the input pass (B)
// computes dx and keeps what the parameter gradients need in `pending`, releasing `kept` as it reads
// it; the weight pass (W), later, adds the parameter gradients into g. B then W is layer_backward
// bit for bit: the same kernels on the same operands in the same order. Dense layers only (an MoE
// layer's backward stays whole).
void layer_backward_input(float* dx, LayerKept& kept, const LayerWeights& w, const LayerContext& c, Workspace& ws,
                          LayerWeightPending& pending);
void layer_backward_weight(LayerWeightPending& pending, const LayerGrads& g, Workspace& ws);

}  // namespace lattice
