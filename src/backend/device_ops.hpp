#pragma once
// The backend seam (docs/design.md §18): the one place that decides which implementation serves the
// kernels the model and the tensor-parallel pieces call, and the copies between their buffers. A run
// picks its device once (select_device, from --device); the model calls dev::name(...), one text for
// every device, and the chosen device's table of operations answers. The table has one entry per op:
// the CPU's fills it from src/kernels, the CUDA one (with -DLATTICE_CUDA=ON) from src/cuda. Past the
// usual length on purpose: the table and its one-line callers are one list, op by op.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.hpp"
#include "kernels/bf16_fused.hpp"
#include "kernels/dropout.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/gemm.hpp"
#include "kernels/heads.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "random/philox.hpp"
#include "tensor/half.hpp"
#include "tensor/device_memory.hpp"

namespace lattice {

// cpu_guarded: the CPU's kernels over memory the host cannot touch outside the seam
// (backend/guarded_device.hpp), the test of the GPU path's structure on a machine without one.
enum class Device { cpu, cuda, cpu_guarded };
const char* device_name(Device d);
// "cpu", "cuda" or "cpu-guarded"; anything else is an InputError naming the flag's values.
Device parse_device(const std::string& text);

// Room for an implementation of flash_attention_backward_qkv_rows_bf16 that goes through the head
// layout (the CPU's): fp32, b·a·s·dh floats each, for dq, dk, dv, dO and O. A device's kernels that
// write the rows themselves do not touch them.
struct FlashRowsRooms {
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  float* dout = nullptr;
  float* out = nullptr;
};

// The head dimensions a device's attention kernels take (0: any). The CLI refuses a model past them
// before it exists (cli/device_support.cpp), where the kernel would throw at the first step.
struct AttentionLimits {
  int64_t fused_head_dim = 0;  // --attention fused, one rank's sequence or CP's all-to-all
  int64_t ring_head_dim = 0;   // CP's ring (--cp-comm-type p2p): its blocks' kernels
};

struct DeviceOps {
  Device device;
  AttentionLimits attention_limits;
  // GEMMs (kernels/gemm.hpp, kernels/linear.hpp).
  void (*gemm)(const GemmShape&, GemmOperand, GemmOperand, float*, const float*);
  void (*linear_forward)(float*, GemmOperand, GemmOperand, const float*, int64_t, int64_t, int64_t);
  // y16 = bf16(x·W + bf16(bias)): the bias enters rounded to bf16, as a bf16 parameter does (cuBLASLt
  // takes a bf16 D's bias in bf16 alone, and PyTorch's autocast rounds it so), and a device's GEMM
  // writes the bf16 result itself (no fp32 copy written and read again); `room` (fp32 N·out) for an
  // implementation that computes the fp32 result first (fp32 operands, a shape a device's GEMM has no
  // bf16 output for) or keeps the rounded bias there.
  void (*linear_forward_bf16)(uint16_t*, GemmOperand, GemmOperand, const float*, int64_t, int64_t, int64_t,
                              float* room);
  void (*linear_backward_input)(float*, GemmOperand, GemmOperand, int64_t, int64_t, int64_t);
  // dx16 = bf16(dy·Wᵀ), as linear_forward_bf16 (`room`: fp32 N·in; may be null where both operands are
  // bf16, a device then narrowing an fp32 product in pieces of rows through scratch of its own).
  void (*linear_backward_input_bf16)(uint16_t*, GemmOperand, GemmOperand, int64_t, int64_t, int64_t, float* room);
  void (*linear_backward_weight)(float*, GemmOperand, GemmOperand, int64_t, int64_t, int64_t);
  // A linear and the pass after it in one call, where a device's GEMM does the pass in its epilogue
  // (cuBLASLt's, docs/gpu-kernels.md "The GEMMs' epilogues"); otherwise, and on the CPU, the two calls, whose
  // bits these are. An epilogue rounds once where the two calls round twice, so a device's fused
  // values are within one rounding of the two calls' (fp32 or bf16), not their bits.
  // x += y·W + bias (x fp32 [N, out], the residual stream): linear_forward into `room` (fp32 N·out),
  // then residual_add.
  void (*linear_forward_residual)(float*, GemmOperand, GemmOperand, const float*, int64_t, int64_t, int64_t,
                                  float* room);
  // pre16 = bf16(x·W + bf16(bias)) (the GeLU's kept input) and act16 = bf16(gelu(that)):
  // linear_forward_bf16 into pre16, then gelu_forward16.
  void (*linear_gelu_forward_bf16)(uint16_t* act16, uint16_t* pre16, GemmOperand, GemmOperand, const float*, int64_t,
                                   int64_t, int64_t, float* room);
  // g16 = bf16(gelu'(pre16) · dy·Wᵀ) [N, in] and db += its column sums: linear_backward_input_bf16 into
  // g16, then gelu_backward_narrow in place.
  void (*linear_backward_input_gelu_bf16)(uint16_t* g16, float* db, GemmOperand, GemmOperand, const uint16_t* pre16,
                                          int64_t, int64_t, int64_t, float* room);
  // LayerNorm (kernels/layernorm.hpp).
  void (*layernorm_forward)(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t);
  void (*layernorm_backward)(float*, float*, float*, const float*, const float*, const float*, const float*,
                             const float*, int64_t, int64_t);
  int64_t (*layernorm_partial_floats)(int64_t);
  void (*layernorm_backward_input)(float*, float*, int64_t, const float*, const float*, const float*, const float*,
                                   const float*, int64_t, int64_t);
  void (*layernorm_reduce_partials)(float*, float*, const float*, int64_t, int64_t);
  // GeLU, bias, dropout (kernels/gelu.hpp, bias.hpp, dropout.hpp).
  void (*gelu_forward)(float*, const float*, int64_t);
  void (*gelu_backward)(float*, const float*, const float*, int64_t);
  void (*bias_backward)(float*, const float*, int64_t, int64_t);
  void (*bias_column_sums)(float*, const float*, int64_t, int64_t);
  void (*bias_add)(float*, const float*, int64_t);
  void (*bias_add_rows)(float*, const float*, int64_t, int64_t);
  void (*residual_add)(float*, const float*, int64_t);
  void (*dropout_mask_fill)(uint8_t*, const DropoutStream&, uint64_t, int64_t, float);
  void (*dropout_forward)(float*, const float*, const uint8_t*, int64_t, float);
  void (*dropout_backward)(float*, const float*, const uint8_t*, int64_t, float);
  // Attention (kernels/softmax.hpp, flash_attention.hpp, heads.hpp).
  void (*softmax_dropout_forward)(void*, uint8_t*, void*, DType, const float*, int64_t, int64_t, int64_t,
                                  const AttentionDropout&);
  void (*softmax_causal_backward)(float*, const float*, const float*, int64_t, int64_t);
  void (*flash_attention_forward)(float*, float*, const FlashOperands&, const FlashShape&, const AttentionDropout&);
  void (*flash_attention_backward)(float*, float*, float*, const float*, const FlashOperands&, const float*,
                                   const float*, const FlashShape&, const AttentionDropout&);
  // The same two with the context in the token rows [b, s, a·dh] as bf16 bits (bf16 activations: the
  // projection's kept input): the forward writes it, the backward reads dO (fp32) and O there; dq, dk,
  // dv in the head layout. Bit for bit the head-layout calls with merge_heads_bf16 after, unmerge_heads
  // and unmerge_heads_bf16 before; `room`s: fp32 b·a·s·dh each, for an implementation that goes
  // through the head layout (the CPU's), which a device's kernels do not need.
  void (*flash_attention_forward_rows_bf16)(uint16_t*, float*, const FlashOperands&, const FlashShape&,
                                            const AttentionDropout&, float* room);
  void (*flash_attention_backward_rows_bf16)(float*, float*, float*, const float*, const FlashOperands&,
                                             const uint16_t*, const float*, const FlashShape&, const AttentionDropout&,
                                             float* room_dout, float* room_out);
  // The backward from the rows with the QKV gradient in the rows too (bf16 bits, merge_qkv_grads'
  // layout [b·s, 3·a·dh]) and its bias gradient added into db: bit for bit the call above followed by
  // merge_qkv_grads_narrow, which an implementation with the rooms (FlashRowsRooms) may run.
  void (*flash_attention_backward_qkv_rows_bf16)(uint16_t*, float*, const float*, const FlashOperands&,
                                                 const uint16_t*, const float*, const FlashShape&,
                                                 const AttentionDropout&, const FlashRowsRooms&);
  void (*flash_block_forward)(float*, float*, const float*, const float*, const float*, const FlashBlock&,
                              const AttentionDropout&);
  void (*flash_block_backward)(float*, float*, float*, const float*, const float*, const float*, const float*,
                               const float*, const float*, const FlashBlock&, const AttentionDropout&);
  void (*split_heads)(float*, float*, float*, const float*, const HeadShape&);
  void (*merge_heads)(float*, const float*, const HeadShape&);
  void (*unmerge_heads)(float*, const float*, const HeadShape&);
  void (*merge_qkv_grads)(float*, const float*, const float*, const float*, const HeadShape&);
  // The vocabulary-parallel embedding and cross-entropy pieces (kernels/vocab_shard.hpp).
  void (*embedding_shard_forward)(float*, const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t);
  void (*embedding_shard_backward)(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
  void (*add_positions)(float*, const float*, int64_t, int64_t, int64_t, int64_t);
  void (*position_grads)(float*, const float*, int64_t, int64_t, int64_t, int64_t);
  void (*ce_shard_max_target)(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
  void (*ce_shard_exp_sum)(float*, float*, const float*, int64_t, int64_t, int64_t);
  void (*ce_shard_normalize)(float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
  void (*ce_whole_forward)(float*, float*, float*, float*, float*, const int32_t*, int64_t, int64_t, int64_t);
  void (*ce_shard_backward)(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, float);
  // Casts (tensor/bf16.hpp).
  void (*to_bf16)(const float*, uint16_t*, int64_t);
  // 16-bit weights and gradients (tensor/half.hpp's HalfFormat: bf16, or fp16 when the flag says).
  void (*half_narrow)(bool, const float*, uint16_t*, int64_t);
  void (*half_widen)(bool, const uint16_t*, float*, int64_t);
  void (*half_accumulate)(bool, const float*, uint16_t*, int64_t);
  // The optimizer's (kernels/optimizer_kernels.hpp): results that are one number come to the host.
  void (*adamw_update)(float*, float*, float*, const float*, int64_t, float, const AdamWScalars&);
  void (*adamw_update_segments)(AdamWSegments, const AdamWScalars&);
  void (*grad_sums_squares)(GradPieceSums);
  void (*scale_grads)(float*, int64_t, float);
  bool (*all_finite)(const float*, int64_t);
  // bf16 activations' fused passes (kernels/bf16_fused.hpp): each bitwise the fp32 ops it replaces,
  // then their narrowing (and a linear's bias sums).
  void (*layernorm_forward_bf16)(uint16_t*, uint16_t*, float*, float*, const float*, const float*, const float*,
                                 int64_t, int64_t);
  void (*split_heads16)(uint16_t*, uint16_t*, uint16_t*, const uint16_t*, const HeadShape&);
  void (*merge_heads_bf16)(uint16_t*, const float*, const HeadShape&);
  void (*unmerge_heads_bf16)(float*, const uint16_t*, const HeadShape&);
  void (*gelu_forward16)(uint16_t*, const uint16_t*, int64_t);
  void (*narrow_bias_backward)(uint16_t*, float*, const float*, int64_t, int64_t);
  void (*gelu_backward_narrow)(uint16_t*, float*, const uint16_t*, const uint16_t*, int64_t, int64_t);
  void (*merge_qkv_grads_narrow)(uint16_t*, float*, const float*, const float*, const float*, const HeadShape&);
  void (*softmax_causal_backward_bf16)(uint16_t*, const float*, const uint16_t*, int64_t, int64_t);
  void (*layernorm_backward_bf16)(float*, float*, float*, const float*, const uint16_t*, const float*, const float*,
                                  const float*, int64_t, int64_t);
  // The cross-entropy over kept bf16 logits (kernels/bf16_fused.hpp): statistics and losses forward, the
  // probabilities made again in backward.
  void (*ce_shard_backward_bf16)(uint16_t*, const uint16_t*, const float*, const float*, const int32_t*, int64_t,
                                 int64_t, int64_t, int64_t, float);
  void (*ce_whole_forward_bf16)(const uint16_t*, float*, float*, float*, float*, const int32_t*, int64_t, int64_t,
                                int64_t);
  void (*ce_shard_max_target_bf16)(float*, float*, const uint16_t*, const int32_t*, int64_t, int64_t, int64_t,
                                   int64_t);
  void (*ce_shard_exp_sum_bf16)(float*, const uint16_t*, const float*, int64_t, int64_t, int64_t);
  void (*ce_row_losses)(float*, const float*, const float*, const float*, int64_t);
  // Returns once every operation issued so far has finished (a timer's edge; the CPU's are synchronous).
  void (*synchronize)();
  // The copies and zeroing of device buffers are tensor/device_memory.hpp's (the same memory serves
  // the kept tensors' storage below this layer); dev::copy, upload, download, fill_zero call them.
};

// Every operation of the table, for code that treats them alike (the guarded device's wrappers).
#define LATTICE_DEVICE_OPS(X)                                                                               \
  X(gemm) X(linear_forward) X(linear_forward_bf16) X(linear_backward_input) X(linear_backward_input_bf16) X(linear_backward_weight) X(linear_forward_residual) X(linear_gelu_forward_bf16) X(linear_backward_input_gelu_bf16) X(layernorm_forward)           \
  X(layernorm_backward) X(layernorm_partial_floats) X(layernorm_backward_input) X(layernorm_reduce_partials)  \
  X(gelu_forward) X(gelu_backward) X(bias_backward) X(bias_column_sums) X(bias_add) X(bias_add_rows) X(residual_add) X(dropout_mask_fill)      \
  X(dropout_forward) X(dropout_backward) X(softmax_dropout_forward) X(softmax_causal_backward)                 \
  X(flash_attention_forward) X(flash_attention_backward) X(flash_attention_forward_rows_bf16) X(flash_attention_backward_rows_bf16) X(flash_attention_backward_qkv_rows_bf16) X(flash_block_forward) X(flash_block_backward) X(split_heads) X(merge_heads) X(unmerge_heads)       \
  X(merge_qkv_grads) X(embedding_shard_forward) X(embedding_shard_backward) X(add_positions) X(position_grads) X(ce_shard_max_target)            \
  X(ce_shard_exp_sum) X(ce_shard_normalize) X(ce_whole_forward) X(ce_shard_backward) X(to_bf16) X(half_narrow) X(half_widen) X(half_accumulate) X(adamw_update) X(adamw_update_segments) X(grad_sums_squares) X(scale_grads) X(all_finite) \
  X(layernorm_forward_bf16) X(split_heads16) X(merge_heads_bf16) X(unmerge_heads_bf16) X(gelu_forward16) X(narrow_bias_backward)       \
  X(gelu_backward_narrow) X(merge_qkv_grads_narrow) X(softmax_causal_backward_bf16) X(layernorm_backward_bf16) X(ce_shard_backward_bf16) X(ce_whole_forward_bf16) X(ce_shard_max_target_bf16) X(ce_shard_exp_sum_bf16) X(ce_row_losses) \
  X(synchronize)

// The CPU's table: src/kernels, byte for byte what the model called directly before the seam.
const DeviceOps& cpu_ops();
// Picks the run's device, once, before the model is built. An InputError (one line, the cause) where
// this build or machine cannot serve it: --device cuda without -DLATTICE_CUDA=ON, or before the
// model's memory lives on the GPU (docs/gpu.md).
void select_device(Device d);
// The selected table (the CPU's until select_device says otherwise).
const DeviceOps& device_ops();
// Serves the run's operations from `ops` (a static the caller keeps), for a wrapper of the selected
// device's table (backend/op_profile.hpp); the device and its memory stay as selected.
void replace_device_ops(const DeviceOps& ops);

// The head layout of a fused attention's shape (the token rows' passes around a head-layout kernel).
inline HeadShape heads_of(const FlashShape& x) { return {x.b, x.s, x.a, x.dh}; }

// What the model calls: the same names and arguments as the kernels, served by the run's device.
namespace dev {
inline void gemm(const GemmShape& shape, GemmOperand a, GemmOperand b, float* c, const float* bias = nullptr) {
  device_ops().gemm(shape, a, b, c, bias);
}
inline void linear_forward(float* y, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in,
                           int64_t out) {
  device_ops().linear_forward(y, x, w, bias, N, in, out);
}
inline void linear_forward_bf16(uint16_t* y16, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in,
                                int64_t out, float* room) {
  device_ops().linear_forward_bf16(y16, x, w, bias, N, in, out, room);
}
inline void linear_forward_residual(float* x, GemmOperand y, GemmOperand w, const float* bias, int64_t N, int64_t in,
                                    int64_t out, float* room) {
  device_ops().linear_forward_residual(x, y, w, bias, N, in, out, room);
}
inline void linear_gelu_forward_bf16(uint16_t* act16, uint16_t* pre16, GemmOperand x, GemmOperand w, const float* bias,
                                     int64_t N, int64_t in, int64_t out, float* room) {
  device_ops().linear_gelu_forward_bf16(act16, pre16, x, w, bias, N, in, out, room);
}
inline void linear_backward_input_gelu_bf16(uint16_t* g16, float* db, GemmOperand dy, GemmOperand w,
                                            const uint16_t* pre16, int64_t N, int64_t in, int64_t out, float* room) {
  device_ops().linear_backward_input_gelu_bf16(g16, db, dy, w, pre16, N, in, out, room);
}
inline void linear_backward_input(float* dx, GemmOperand dy, GemmOperand w, int64_t N, int64_t in, int64_t out) {
  device_ops().linear_backward_input(dx, dy, w, N, in, out);
}
inline void linear_backward_input_bf16(uint16_t* dx16, GemmOperand dy, GemmOperand w, int64_t N, int64_t in,
                                       int64_t out, float* room) {
  device_ops().linear_backward_input_bf16(dx16, dy, w, N, in, out, room);
}
inline void linear_backward_weight(float* dw, GemmOperand x, GemmOperand dy, int64_t N, int64_t in, int64_t out) {
  device_ops().linear_backward_weight(dw, x, dy, N, in, out);
}
inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int64_t N, int64_t C) {
  device_ops().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
inline void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  device_ops().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
inline int64_t layernorm_partial_floats(int64_t C) { return device_ops().layernorm_partial_floats(C); }
inline void layernorm_backward_input(float* dinp, float* partial, int64_t partial_floats, const float* dout,
                                     const float* inp, const float* weight, const float* mean, const float* rstd,
                                     int64_t N, int64_t C) {
  device_ops().layernorm_backward_input(dinp, partial, partial_floats, dout, inp, weight, mean, rstd, N, C);
}
inline void layernorm_reduce_partials(float* dweight, float* dbias, const float* partial, int64_t partial_floats,
                                      int64_t C) {
  device_ops().layernorm_reduce_partials(dweight, dbias, partial, partial_floats, C);
}
inline void gelu_forward(float* out, const float* inp, int64_t n) { device_ops().gelu_forward(out, inp, n); }
inline void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  device_ops().gelu_backward(dinp, inp, dout, n);
}
inline void bias_backward(float* db, const float* dy, int64_t N, int64_t out) { device_ops().bias_backward(db, dy, N, out); }
inline void bias_column_sums(float* sums, const float* dy, int64_t N, int64_t out) {
  device_ops().bias_column_sums(sums, dy, N, out);
}
inline void bias_add(float* db, const float* sums, int64_t out) { device_ops().bias_add(db, sums, out); }
inline void bias_add_rows(float* y, const float* bias, int64_t N, int64_t out) {
  device_ops().bias_add_rows(y, bias, N, out);
}
inline void residual_add(float* x, const float* y, int64_t n) { device_ops().residual_add(x, y, n); }
inline void dropout_mask_fill(uint8_t* mask, const DropoutStream& stream, uint64_t first_index, int64_t n, float p) {
  device_ops().dropout_mask_fill(mask, stream, first_index, n, p);
}
inline void dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p) {
  device_ops().dropout_forward(out, inp, mask, n, p);
}
inline void dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p) {
  device_ops().dropout_backward(dinp, dout, mask, n, p);
}
inline void softmax_dropout_forward(void* probs, uint8_t* mask, void* dropped, DType dtype, const float* scores,
                                    int64_t local_heads, int64_t batch, int64_t s, const AttentionDropout& drop) {
  device_ops().softmax_dropout_forward(probs, mask, dropped, dtype, scores, local_heads, batch, s, drop);
}
inline void softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s) {
  device_ops().softmax_causal_backward(dscores, dprobs, probs, batch, s);
}
inline void flash_attention_forward(float* out, float* lse, const FlashOperands& qkv, const FlashShape& x,
                                    const AttentionDropout& drop) {
  device_ops().flash_attention_forward(out, lse, qkv, x, drop);
}
inline void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const FlashOperands& qkv,
                                     const float* out, const float* lse, const FlashShape& x,
                                     const AttentionDropout& drop) {
  device_ops().flash_attention_backward(dq, dk, dv, dout, qkv, out, lse, x, drop);
}
inline void flash_attention_forward_rows_bf16(uint16_t* out_rows, float* lse, const FlashOperands& qkv,
                                              const FlashShape& x, const AttentionDropout& drop, float* room) {
  device_ops().flash_attention_forward_rows_bf16(out_rows, lse, qkv, x, drop, room);
}
inline void flash_attention_backward_rows_bf16(float* dq, float* dk, float* dv, const float* dout_rows,
                                               const FlashOperands& qkv, const uint16_t* out_rows, const float* lse,
                                               const FlashShape& x, const AttentionDropout& drop, float* room_dout,
                                               float* room_out) {
  device_ops().flash_attention_backward_rows_bf16(dq, dk, dv, dout_rows, qkv, out_rows, lse, x, drop, room_dout,
                                                  room_out);
}
inline void flash_attention_backward_qkv_rows_bf16(uint16_t* dqkv16, float* db, const float* dout_rows,
                                                   const FlashOperands& qkv, const uint16_t* out_rows, const float* lse,
                                                   const FlashShape& x, const AttentionDropout& drop,
                                                   const FlashRowsRooms& rooms) {
  device_ops().flash_attention_backward_qkv_rows_bf16(dqkv16, db, dout_rows, qkv, out_rows, lse, x, drop, rooms);
}
inline void flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                const FlashBlock& x, const AttentionDropout& drop) {
  device_ops().flash_block_forward(out, lse, q, k, v, x, drop);
}
inline void flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                 const float* v, const float* out, const float* lse, const FlashBlock& x,
                                 const AttentionDropout& drop) {
  device_ops().flash_block_backward(dq, dk, dv, dout, q, k, v, out, lse, x, drop);
}
inline void split_heads(float* q, float* k, float* v, const float* qkv, const HeadShape& x) {
  device_ops().split_heads(q, k, v, qkv, x);
}
inline void merge_heads(float* out, const float* heads, const HeadShape& x) { device_ops().merge_heads(out, heads, x); }
inline void unmerge_heads(float* heads, const float* rows, const HeadShape& x) {
  device_ops().unmerge_heads(heads, rows, x);
}
inline void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const HeadShape& x) {
  device_ops().merge_qkv_grads(dqkv, dq, dk, dv, x);
}
inline void embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t v_local,
                                    int64_t N, int64_t h) {
  device_ops().embedding_shard_forward(out, ids, wte, v0, v_local, N, h);
}
inline void embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t v_local,
                                     int64_t N, int64_t h) {
  device_ops().embedding_shard_backward(dwte, dout, ids, v0, v_local, N, h);
}
inline void add_positions(float* x, const float* wpe, int64_t b, int64_t s_local, int64_t pos0, int64_t h) {
  device_ops().add_positions(x, wpe, b, s_local, pos0, h);
}
inline void position_grads(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0, int64_t h) {
  device_ops().position_grads(dwpe, dx, b, s_local, pos0, h);
}
inline void ce_shard_max_target(float* row_max, float* target_logit, const float* logits, const int32_t* targets,
                                int64_t v0, int64_t v_local, int64_t real, int64_t N) {
  device_ops().ce_shard_max_target(row_max, target_logit, logits, targets, v0, v_local, real, N);
}
inline void ce_shard_exp_sum(float* row_sum, float* logits, const float* row_max, int64_t v_local, int64_t real,
                             int64_t N) {
  device_ops().ce_shard_exp_sum(row_sum, logits, row_max, v_local, real, N);
}
inline void ce_shard_normalize(float* logits, float* losses, const float* row_max, const float* row_sum,
                               const float* target_logit, int64_t v_local, int64_t real, int64_t N) {
  device_ops().ce_shard_normalize(logits, losses, row_max, row_sum, target_logit, v_local, real, N);
}
inline void ce_whole_forward(float* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                             const int32_t* targets, int64_t v_local, int64_t real, int64_t N) {
  device_ops().ce_whole_forward(logits, losses, row_max, row_sum, target_logit, targets, v_local, real, N);
}
inline void ce_shard_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t v_local,
                              int64_t N, float scale) {
  device_ops().ce_shard_backward(dlogits, probs, targets, v0, v_local, N, scale);
}
inline void to_bf16(const float* src, uint16_t* dst, int64_t n) { device_ops().to_bf16(src, dst, n); }
inline void half_narrow(const HalfFormat& f, const float* src, uint16_t* dst, int64_t n) {
  device_ops().half_narrow(f.fp16, src, dst, n);
}
inline void half_widen(const HalfFormat& f, const uint16_t* src, float* dst, int64_t n) {
  device_ops().half_widen(f.fp16, src, dst, n);
}
inline void half_accumulate(const HalfFormat& f, const float* src, uint16_t* dst, int64_t n) {
  device_ops().half_accumulate(f.fp16, src, dst, n);
}
inline void adamw_update(float* m, float* v, float* w, const float* grad, int64_t n, float decay,
                         const AdamWScalars& a) {
  device_ops().adamw_update(m, v, w, grad, n, decay, a);
}
inline void adamw_update_segments(AdamWSegments batch, const AdamWScalars& a) {
  device_ops().adamw_update_segments(batch, a);
}
inline void grad_sums_squares(GradPieceSums batch) { device_ops().grad_sums_squares(batch); }
inline double grad_sum_squares(const float* grads, int64_t n) {
  const GradPiece piece{grads, n};
  double sum = 0.0;
  device_ops().grad_sums_squares({&piece, &sum, 1});
  return sum;
}
inline void scale_grads(float* grads, int64_t n, float factor) { device_ops().scale_grads(grads, n, factor); }
inline bool all_finite(const float* values, int64_t n) { return device_ops().all_finite(values, n); }
inline void layernorm_forward_bf16(uint16_t* x16, uint16_t* y16, float* mean, float* rstd, const float* x,
                                   const float* weight, const float* bias, int64_t N, int64_t C) {
  device_ops().layernorm_forward_bf16(x16, y16, mean, rstd, x, weight, bias, N, C);
}
inline void split_heads16(uint16_t* q, uint16_t* k, uint16_t* v, const uint16_t* qkv16, const HeadShape& x) {
  device_ops().split_heads16(q, k, v, qkv16, x);
}
inline void merge_heads_bf16(uint16_t* out, const float* heads, const HeadShape& x) {
  device_ops().merge_heads_bf16(out, heads, x);
}
inline void unmerge_heads_bf16(float* heads, const uint16_t* rows16, const HeadShape& x) {
  device_ops().unmerge_heads_bf16(heads, rows16, x);
}
inline void gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n) {
  device_ops().gelu_forward16(act16, pre16, n);
}
inline void narrow_bias_backward(uint16_t* dy16, float* db, const float* dy, int64_t N, int64_t out) {
  device_ops().narrow_bias_backward(dy16, db, dy, N, out);
}
inline void gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout16, int64_t N,
                                 int64_t out) {
  device_ops().gelu_backward_narrow(g16, db, pre16, dout16, N, out);
}
inline void merge_qkv_grads_narrow(uint16_t* dqkv16, float* db, const float* dq, const float* dk, const float* dv,
                                   const HeadShape& x) {
  device_ops().merge_qkv_grads_narrow(dqkv16, db, dq, dk, dv, x);
}
inline void softmax_causal_backward_bf16(uint16_t* ds16, const float* dprobs, const uint16_t* probs16, int64_t batch,
                                         int64_t s) {
  device_ops().softmax_causal_backward_bf16(ds16, dprobs, probs16, batch, s);
}
inline void layernorm_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                                    const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  device_ops().layernorm_backward_bf16(dinp, dweight, dbias, dout, inp16, weight, mean, rstd, N, C);
}
inline void ce_whole_forward_bf16(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                                  float* target_logit, const int32_t* targets, int64_t v_local, int64_t real,
                                  int64_t N) {
  device_ops().ce_whole_forward_bf16(logits16, losses, row_max, row_sum, target_logit, targets, v_local, real, N);
}
inline void ce_shard_max_target_bf16(float* row_max, float* target_logit, const uint16_t* logits16,
                                     const int32_t* targets, int64_t v0, int64_t v_local, int64_t real, int64_t N) {
  device_ops().ce_shard_max_target_bf16(row_max, target_logit, logits16, targets, v0, v_local, real, N);
}
inline void ce_shard_exp_sum_bf16(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t v_local,
                                  int64_t real, int64_t N) {
  device_ops().ce_shard_exp_sum_bf16(row_sum, logits16, row_max, v_local, real, N);
}
inline void ce_row_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit,
                          int64_t N) {
  device_ops().ce_row_losses(losses, row_max, row_sum, target_logit, N);
}
inline void ce_shard_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* row_max,
                                   const float* row_sum, const int32_t* targets, int64_t v0, int64_t v_local,
                                   int64_t real, int64_t N, float scale) {
  device_ops().ce_shard_backward_bf16(dlogits16, logits16, row_max, row_sum, targets, v0, v_local, real, N, scale);
}
inline void synchronize() { device_ops().synchronize(); }
// A GEMM operand of `n` fp32 values in the run's dtype: itself (fp32), or rounded into `half` (bf16).
inline GemmOperand as_operand(const float* src, int64_t n, DType dt, uint16_t* half) {
  if (dt == DType::fp32) return {src, DType::fp32};
  to_bf16(src, half, n);
  return {half, DType::bf16};
}
// Typed copies (device to device; host to device; device to host) and zeroing of `n` elements.
template <typename T>
inline void copy(T* dst, const T* src, int64_t n) {
  if (n > 0) device_memory().copy(dst, src, size_t(n) * sizeof(T));
}
template <typename T>
inline void upload(T* dst, const T* host_src, int64_t n) {
  copy_to_device(dst, host_src, n);
}
template <typename T>
inline void download(T* host_dst, const T* src, int64_t n) {
  copy_to_host(host_dst, src, n);
}
template <typename T>
inline void fill_zero(T* dst, int64_t n) {
  if (n > 0) device_memory().fill_zero(dst, size_t(n) * sizeof(T));
}
}  // namespace dev

}  // namespace lattice
