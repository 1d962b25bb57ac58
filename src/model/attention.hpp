#pragma once
// The s² part of self-attention: scores = QKᵀ/√dh with causal mask, softmax, dropout,
// context = dropped·V. These are the tensors selective recompute drops and re-creates.
#include "kernels/heads.hpp"
#include "model/layer_context.hpp"
#include "model/layer_kept.hpp"
#include "model/workspace.hpp"

namespace lattice {

// The layer's head layout for the head kernels: b sequences of s positions, a heads of dh.
HeadShape head_shape(const LayerContext& c);
// Head split/merge between [N, 3h] (or [N, h]) token rows and [b, a, s, dh] per-head blocks.
void split_heads(float* q, float* k, float* v, const float* qkv, const LayerContext& c);
void merge_heads(float* out, const float* heads, const LayerContext& c);             // [b,a,s,dh] → [N,h]
void unmerge_heads(float* heads, const float* rows, const LayerContext& c);          // [N,h] → [b,a,s,dh]
void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const LayerContext& c);

// With c.fused_attention the tiled kernel (docs/design.md §3.1) runs instead: it keeps only the
// per-row log-sum-exp (`kept.attn_lse`) whatever keep_s2 says, and its backward reads Q, K, V,
// the kept context (`kept.proj_in`) and the log-sum-exp.
// From kept Q, K, V. When keep_s2, the softmax output, mask and dropout output are stored in
// `kept` (tracked); otherwise they live only in the workspace. When ctx_out is non-null the
// context dropped·V is written there ([b, a, s, dh], fp32).
void attention_core_forward(LayerKept& kept, bool keep_s2, float* ctx_out, const LayerContext& c, Workspace& ws);
// The fused attention with its context in the token rows (the seam's *_rows_bf16 calls): under bf16
// activations without context parallelism, the forward writes the projection's kept input
// (`kept.proj_in`, made by the caller) itself and the backward reads dO ([N, h] rows, fp32) and O
// there, so no layout pass runs between the attention and the projection (the same bits as one).
bool fused_context_in_rows(const LayerContext& c);
void attention_fused_forward_rows(LayerKept& kept, const LayerContext& c, Workspace& ws);
void attention_fused_backward_rows(float* dq, float* dk, float* dv, const float* dctx_rows, const LayerKept& kept,
                                   const LayerContext& c, Workspace& ws);
// The same backward with the QKV gradient in the rows too: dqkv16 [N, 3·hl] as bf16 bits, the QKV bias
// gradient added into db (merge_qkv_grads_narrow's, with no fp32 dq, dk, dv between on a device
// whose kernels write the rows).
void attention_fused_backward_qkv_rows(uint16_t* dqkv16, float* db, const float* dctx_rows, const LayerKept& kept,
                                       const LayerContext& c, Workspace& ws);
// dq, dk, dv [b,a,s,dh] from dctx [b,a,s,dh]; needs the s² tensors in `kept`. `o_heads` (fused only):
// the context as [b,a,s,dh] when it is not kept.proj_in's heads at c's shape (context parallelism,
// where proj_in holds this rank's positions of all its heads); null: from kept.proj_in.
void attention_core_backward(float* dq, float* dk, float* dv, const float* dctx, const LayerKept& kept,
                             const LayerContext& c, Workspace& ws, const float* o_heads = nullptr);

}  // namespace lattice
