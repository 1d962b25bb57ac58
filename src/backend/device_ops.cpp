#include "backend/device_ops.hpp"

#include <cstring>
#include <vector>

#include "backend/guarded_device.hpp"
#ifdef LATTICE_HAVE_CUDA
#include "backend/cuda_device.hpp"
#endif
#include "core/error.hpp"
#include "kernels/bias.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/softmax.hpp"
#include "kernels/vocab_shard.hpp"
#include "tensor/bf16.hpp"

namespace lattice {

const char* device_name(Device d) {
  return d == Device::cuda ? "cuda" : d == Device::cpu_guarded ? "cpu-guarded" : "cpu";
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu;
  if (text == "cuda") return Device::cuda;
  if (text == "cpu-guarded") return Device::cpu_guarded;
  fail("--device must be cpu, cuda or cpu-guarded (got " + text + ")");
}

namespace {

void cpu_to_bf16(const float* src, uint16_t* dst, int64_t n) { to_bf16(src, dst, n); }
// The fused attention computes from fp32: bf16 operands widened into the room the caller gives (the
// values the model's own widening gave before the seam took them as kept, so the same bits).
FlashFp32Operands widened(const FlashOperands& in, const FlashShape& x) {
  return fp32_operands(
      in, x, [](const uint16_t* src, float* dst, int64_t n) { from_bf16(src, dst, n); },
      [](float* q, float* k, float* v, const uint16_t* rows, const FlashShape& s) {
        split_heads_widened(q, k, v, rows, heads_of(s));
      });
}
void cpu_flash_forward(float* out, float* lse, const FlashOperands& in, const FlashShape& x, const AttentionDropout& d) {
  const FlashFp32Operands f = widened(in, x);
  flash_attention_forward(out, lse, f.q, f.k, f.v, x, d);
}
void cpu_flash_backward(float* dq, float* dk, float* dv, const float* dout, const FlashOperands& in, const float* out,
                        const float* lse, const FlashShape& x, const AttentionDropout& d) {
  const FlashFp32Operands f = widened(in, x);
  flash_attention_backward(dq, dk, dv, dout, f.q, f.k, f.v, out, lse, x, d);
}
// The context in the token rows: the head-layout kernels with the layout passes around them.
void cpu_flash_forward_rows(uint16_t* out_rows, float* lse, const FlashOperands& in, const FlashShape& x,
                            const AttentionDropout& d, float* room) {
  cpu_flash_forward(room, lse, in, x, d);
  merge_heads_bf16(out_rows, room, heads_of(x));
}
void cpu_flash_backward_rows(float* dq, float* dk, float* dv, const float* dout_rows, const FlashOperands& in,
                             const uint16_t* out_rows, const float* lse, const FlashShape& x, const AttentionDropout& d,
                             float* room_dout, float* room_out) {
  unmerge_heads(room_dout, dout_rows, heads_of(x));
  unmerge_heads_bf16(room_out, out_rows, heads_of(x));
  cpu_flash_backward(dq, dk, dv, room_dout, in, room_out, lse, x, d);
}
void cpu_flash_backward_qkv_rows(uint16_t* dqkv16, float* db, const float* dout_rows, const FlashOperands& in,
                                 const uint16_t* out_rows, const float* lse, const FlashShape& x,
                                 const AttentionDropout& d, const FlashRowsRooms& r) {
  cpu_flash_backward_rows(r.dq, r.dk, r.dv, dout_rows, in, out_rows, lse, x, d, r.dout, r.out);
  merge_qkv_grads_narrow(dqkv16, db, r.dq, r.dk, r.dv, heads_of(x));
}
// oneDNN writes a bf16 destination itself for bf16 operands (the bits of the fp32 product then
// to_bf16); fp32 operands go through the room.
void cpu_gemm_bf16_out(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* c, const float* bias, float* room) {
  if (a.dtype == DType::bf16 && b.dtype == DType::bf16) return gemm_bf16_out(s, a, b, c, bias);
  if (!room) throw std::logic_error("a bf16 GEMM output from fp32 operands needs the fp32 room (device_ops.hpp)");
  gemm(s, a, b, room, bias);
  to_bf16(room, c, s.M * s.N);
}
void cpu_linear_forward_bf16(uint16_t* y16, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in,
                             int64_t out, float* room) {
  GemmShape s;
  s.M = N, s.N = out, s.K = in;
  std::vector<float> rounded;  // bf16(bias), widened: oneDNN adds it in fp32, as the bf16 bias is added
  if (bias) {
    rounded.resize(size_t(out));
    for (int64_t i = 0; i < out; ++i) rounded[size_t(i)] = from_bf16(to_bf16(bias[i]));
  }
  cpu_gemm_bf16_out(s, x, w, y16, bias ? rounded.data() : nullptr, room);
}
void cpu_linear_backward_input_bf16(uint16_t* dx16, GemmOperand dy, GemmOperand w, int64_t N, int64_t in, int64_t out,
                                    float* room) {
  GemmShape s;
  s.M = N, s.N = in, s.K = out, s.trans_b = true;
  cpu_gemm_bf16_out(s, dy, w, dx16, nullptr, room);
}
void cpu_linear_forward_residual(float* x, GemmOperand y, GemmOperand w, const float* bias, int64_t N, int64_t in,
                                 int64_t out, float* room) {
  linear_forward(room, y, w, bias, N, in, out);
  residual_add(x, room, N * out);
}
void cpu_linear_gelu_forward_bf16(uint16_t* act16, uint16_t* pre16, GemmOperand x, GemmOperand w, const float* bias,
                                  int64_t N, int64_t in, int64_t out, float* room) {
  cpu_linear_forward_bf16(pre16, x, w, bias, N, in, out, room);
  gelu_forward16(act16, pre16, N * out);
}
void cpu_linear_backward_input_gelu_bf16(uint16_t* g16, float* db, GemmOperand dy, GemmOperand w,
                                         const uint16_t* pre16, int64_t N, int64_t in, int64_t out, float* room) {
  cpu_linear_backward_input_bf16(g16, dy, w, N, in, out, room);
  gelu_backward_narrow(g16, db, pre16, g16, N, in);  // in place: each element read, then written
}
void cpu_synchronize() {}
void cpu_half_narrow(bool fp16, const float* src, uint16_t* dst, int64_t n) { HalfFormat{fp16}.narrow(src, dst, n); }
void cpu_half_widen(bool fp16, const uint16_t* src, float* dst, int64_t n) { HalfFormat{fp16}.widen(src, dst, n); }
void cpu_half_accumulate(bool fp16, const float* src, uint16_t* dst, int64_t n) {
  HalfFormat{fp16}.accumulate(src, dst, n);
}

const DeviceOps kCpu = {
    Device::cpu,
    AttentionLimits{},
    gemm,
    linear_forward,
    cpu_linear_forward_bf16,
    linear_backward_input,
    cpu_linear_backward_input_bf16,
    linear_backward_weight,
    cpu_linear_forward_residual,
    cpu_linear_gelu_forward_bf16,
    cpu_linear_backward_input_gelu_bf16,
    layernorm_forward,
    layernorm_backward,
    layernorm_partial_floats,
    layernorm_backward_input,
    layernorm_reduce_partials,
    gelu_forward,
    gelu_backward,
    bias_backward,
    bias_column_sums,
    bias_add,
    bias_add_rows,
    residual_add,
    dropout_mask_fill,
    dropout_forward,
    dropout_backward,
    softmax_dropout_forward,
    softmax_causal_backward,
    cpu_flash_forward,
    cpu_flash_backward,
    cpu_flash_forward_rows,
    cpu_flash_backward_rows,
    cpu_flash_backward_qkv_rows,
    flash_block_forward,
    flash_block_backward,
    split_heads,
    merge_heads,
    unmerge_heads,
    merge_qkv_grads,
    embedding_shard_forward,
    embedding_shard_backward,
    add_positions,
    position_grads,
    ce_shard_max_target,
    ce_shard_exp_sum,
    ce_shard_normalize,
    ce_whole_forward,
    ce_shard_backward,
    cpu_to_bf16,
    cpu_half_narrow,
    cpu_half_widen,
    cpu_half_accumulate,
    adamw_update,
    adamw_update_segments,
    grad_sums_squares,
    scale_grads,
    all_finite,
    layernorm_forward_bf16,
    split_heads16,
    merge_heads_bf16,
    unmerge_heads_bf16,
    gelu_forward16,
    narrow_bias_backward,
    gelu_backward_narrow,
    merge_qkv_grads_narrow,
    softmax_causal_backward_bf16,
    layernorm_backward_bf16,
    ce_shard_backward_bf16,
    ce_whole_forward_bf16,
    ce_shard_max_target_bf16,
    ce_shard_exp_sum_bf16,
    ce_row_losses,
    cpu_synchronize,
};

const DeviceOps* g_selected = &kCpu;

}  // namespace

const DeviceOps& cpu_ops() { return kCpu; }
const DeviceOps& device_ops() { return *g_selected; }
void replace_device_ops(const DeviceOps& ops) { g_selected = &ops; }

void select_device(Device d) {
  if (d == Device::cpu) {
    set_device_memory(host_memory());
    g_selected = &kCpu;
    return;
  }
  if (d == Device::cpu_guarded) {
    set_device_memory(guarded_memory());
    g_selected = &guarded_ops();
    return;
  }
#ifndef LATTICE_HAVE_CUDA
  fail("--device cuda: this lattice was built without CUDA (configure with cmake -DLATTICE_CUDA=ON; docs/gpu.md)");
#else
  const std::string why = cuda_unavailable();
  if (!why.empty()) fail("--device cuda: " + why);
  set_device_memory(cuda_memory());
  g_selected = &cuda_ops();
#endif
}

}  // namespace lattice
