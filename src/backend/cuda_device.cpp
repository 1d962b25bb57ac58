// The CUDA device's table of operations (backend/cuda_device.hpp). Past the usual length on purpose:
// one short function for each of the seam's operations, so that the one place that chooses a kernel,
// a workspace and a copy for each operation on this device stays one place.
#include "backend/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/env_switch.hpp"
#include "cuda/bf16_fused.hpp"
#include "cuda/flash_attention.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// ---- memory ----
void* c_allocate(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // out of memory is the caller's to report (bad_alloc), not sticky
    return nullptr;
  }
  return p;
}
void c_release(void* p) { (void)cudaFree(p); }  // at exit the context may be gone already
void c_fill_zero(void* dst, size_t bytes) {
  if (bytes) check(cudaMemset(dst, 0, bytes), "cudaMemset");
}
void c_copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy device to device");
}
void c_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
}
void c_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
}
void c_to_bf16(const float* src, uint16_t* dst, int64_t n) { cuda::to_bf16(src, dst, n); }
void c_from_bf16(const uint16_t* src, float* dst, int64_t n) { cuda::from_bf16(src, dst, n); }

int64_t c_driver_used() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
  return int64_t(total - free_bytes);
}
// Measured once, when the device is chosen: the context's own memory before any allocation.
int64_t g_context_bytes = 0;
int64_t c_context() { return g_context_bytes; }
bool c_holds(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

const DeviceMemory kCudaMemory = {"cuda",      false,      false,      c_allocate, c_release,   c_fill_zero,    c_copy,
                                  c_to_device, c_to_host,  c_to_bf16,  c_from_bf16, c_driver_used, c_context, c_holds};

// Scratch of the kernels that need it (LayerNorm, bias, embedding backward, ...): one grow-only
// device buffer; launches are ordered on one stream, so one scratch serves them all in turn.
cuda::Workspace scratch(size_t bytes) {
  static ScratchArray<uint8_t> buf(MemoryCategory::workspaces, "cuda_scratch");
  return {buf.ensure(int64_t(bytes)), bytes};
}

// The GEMM tuner's copy of an accumulating call's C (cuda/gemm.hpp), tracked while it lives: a
// `workspaces` buffer "cublaslt_tuning", given back when the key's tuning ends (the first step).
std::map<void*, TrackedBuffer>& tuning_loans() {
  static std::map<void*, TrackedBuffer> loans;
  return loans;
}
void* tuning_borrow(size_t bytes) {
  try {
    TrackedBuffer b(bytes, kNoLayer, "cublaslt_tuning", MemoryTracker::of(MemoryCategory::workspaces));
    void* p = b.data();
    if (p) tuning_loans().emplace(p, std::move(b));
    return p;
  } catch (const std::bad_alloc&) {  // no room: the key keeps the heuristic's first algorithm
    return nullptr;
  }
}
void tuning_give_back(void* p) { tuning_loans().erase(p); }

// The cuBLASLt context, its workspace from the tracking allocator.
cuda::GemmContext& gemms() {
  static TrackedBuffer workspace(cuda::GemmContext::kDefaultWorkspaceBytes, kNoLayer, "cublaslt_workspace",
                                 MemoryTracker::of(MemoryCategory::workspaces));
  static cuda::GemmContext context({workspace.data(), workspace.bytes()});
  static const bool lent = (context.set_lender({tuning_borrow, tuning_give_back}), true);
  (void)lent;
  return context;
}

// ---- the table ----
void c_gemm(const GemmShape& s, GemmOperand a, GemmOperand b, float* c, const float* bias) {
  gemms().gemm(s, a, b, c, bias);
}
void c_linear_forward(float* y, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in, int64_t out) {
  GemmShape s;  // kernels/linear.cpp's shapes
  s.M = N, s.N = out, s.K = in;
  gemms().gemm(s, x, w, y, bias);
}
// C in bf16: cuBLASLt's bf16 D, or (no bf16 D for the shape) the fp32 product in `room`, narrowed;
// without a room (device_ops.hpp) in pieces of rows through the scratch, at most 64 MiB of fp32 at once.
void c_gemm_bf16_out(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* c, float* room) {
  if (gemms().gemm_bf16_out(s, a, b, c)) return;
  if (room) {
    gemms().gemm(s, a, b, room);
    return cuda::to_bf16(room, c, s.M * s.N);
  }
  if (s.batch != 1 || s.trans_a || s.accumulate)
    throw std::logic_error("c_gemm_bf16_out: pieces of rows need one matrix, A not transposed, no accumulation");
  const int64_t rows = std::max<int64_t>(1, (int64_t(64) << 20) / 4 / std::max<int64_t>(1, s.N));
  const cuda::Workspace ws = scratch(size_t(std::min(rows, s.M) * s.N) * sizeof(float));
  const size_t a_row_bytes = size_t(s.K) * (a.dtype == DType::bf16 ? 2 : 4);
  for (int64_t r0 = 0; r0 < s.M; r0 += rows) {
    GemmShape piece = s;
    piece.M = std::min(rows, s.M - r0);
    const GemmOperand a_piece{static_cast<const uint8_t*>(a.ptr) + size_t(r0) * a_row_bytes, a.dtype};
    float* part = static_cast<float*>(ws.data);
    gemms().gemm(piece, a_piece, b, part);
    cuda::to_bf16(part, c + r0 * s.N, piece.M * s.N);
  }
}
// The same with the bias rounded to bf16 (device_ops.hpp): cuBLASLt's epilogue takes it from the room's
// start; where it writes no bf16 D, the product goes into the room and one pass adds the rounded bias
// and narrows.
void c_linear_forward_bf16(uint16_t* y16, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in,
                           int64_t out, float* room) {
  GemmShape s;
  s.M = N, s.N = out, s.K = in;
  if (!bias) return c_gemm_bf16_out(s, x, w, y16, room);
  if (N <= 0 || out <= 0) return;  // nothing to write (and no room for the bias)
  uint16_t* bias16 = reinterpret_cast<uint16_t*>(room);  // out halves of the room's N·out floats
  cuda::to_bf16(bias, bias16, out);
  if (gemms().gemm_bf16_out(s, x, w, y16, bias16)) return;
  gemms().gemm(s, x, w, room);
  cuda::narrow_rows_bias(y16, room, bias, N, out);
}
void c_linear_backward_input(float* dx, GemmOperand dy, GemmOperand w, int64_t N, int64_t in, int64_t out) {
  GemmShape s;
  s.M = N, s.N = in, s.K = out, s.trans_b = true;
  gemms().gemm(s, dy, w, dx);
}
void c_linear_backward_input_bf16(uint16_t* dx16, GemmOperand dy, GemmOperand w, int64_t N, int64_t in, int64_t out,
                                  float* room) {
  GemmShape s;
  s.M = N, s.N = in, s.K = out, s.trans_b = true;
  c_gemm_bf16_out(s, dy, w, dx16, room);
}
void c_linear_backward_weight(float* dw, GemmOperand x, GemmOperand dy, int64_t N, int64_t in, int64_t out) {
  GemmShape s;
  s.M = in, s.N = out, s.K = N, s.trans_a = true, s.accumulate = true;
  gemms().gemm(s, x, dy, dw);
}
// The fused forms (device_ops.hpp): cuBLASLt's epilogue where it offers one, else the two calls.
// LATTICE_CUDA_GEMM_EPILOGUES=0 makes the two calls always: the switch a measurement of what the
// epilogues buy flips (scripts/device-check.sh speed), read once.
bool gemm_epilogues() {
  static const bool on = env_switch_on("LATTICE_CUDA_GEMM_EPILOGUES");
  return on;
}
void c_linear_forward_residual(float* x, GemmOperand y, GemmOperand w, const float* bias, int64_t N, int64_t in,
                               int64_t out, float* room) {
  GemmShape s;  // x += y·W (+ bias): the accumulating GEMM, the bias in its epilogue (or added after)
  s.M = N, s.N = out, s.K = in;
  if (!gemm_epilogues()) {
    gemms().gemm(s, y, w, room, bias);
    return cuda::residual_add(x, room, N * out);
  }
  s.accumulate = true;
  gemms().gemm(s, y, w, x, bias);
}
void c_linear_gelu_forward_bf16(uint16_t* act16, uint16_t* pre16, GemmOperand x, GemmOperand w, const float* bias,
                                int64_t N, int64_t in, int64_t out, float* room) {
  GemmShape s;
  s.M = N, s.N = out, s.K = in;
  if (N > 0 && out > 0 && gemm_epilogues()) {
    uint16_t* bias16 = bias ? reinterpret_cast<uint16_t*>(room) : nullptr;  // as c_linear_forward_bf16
    if (bias) cuda::to_bf16(bias, bias16, out);
    if (gemms().gemm_bf16_gelu(s, x, w, act16, pre16, bias16)) return;
  }
  c_linear_forward_bf16(pre16, x, w, bias, N, in, out, room);
  cuda::gelu_forward16(act16, pre16, N * out);
}
void c_linear_backward_input_gelu_bf16(uint16_t* g16, float* db, GemmOperand dy, GemmOperand w, const uint16_t* pre16,
                                       int64_t N, int64_t in, int64_t out, float* room) {
  GemmShape s;
  s.M = N, s.N = in, s.K = out, s.trans_b = true;
  // The scratch is taken after the GEMM: a fallback without a room could grow (and move) it.
  if (gemm_epilogues() && gemms().gemm_bf16_dgelu(s, dy, w, g16, pre16))
    return cuda::bias_backward_bf16(db, g16, N, in, scratch(cuda::bias_backward_workspace_bytes(N, in)));
  c_gemm_bf16_out(s, dy, w, g16, room);
  cuda::gelu_backward_narrow(g16, db, pre16, g16, N, in, scratch(cuda::bias_backward_workspace_bytes(N, in)));
}
void c_layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C) {
  cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
void c_layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) {
  cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                           scratch(cuda::layernorm_backward_workspace_bytes(N, C)));
}
// The split backward's partials on the device: the parameter gradients themselves (2·C), summed from
// zero by the input pass and added by the weight pass.
int64_t c_layernorm_partial_floats(int64_t C) { return 2 * C; }
void c_layernorm_backward_input(float* dinp, float* partial, int64_t, const float* dout, const float* inp,
                                const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  c_fill_zero(partial, size_t(2 * C) * sizeof(float));
  c_layernorm_backward(dinp, partial, partial + C, dout, inp, w, mean, rstd, N, C);
}
void c_layernorm_reduce_partials(float* dw, float* db, const float* partial, int64_t, int64_t C) {
  cuda::residual_add(dw, partial, C);
  cuda::residual_add(db, partial + C, C);
}
void c_gelu_forward(float* out, const float* inp, int64_t n) { cuda::gelu_forward(out, inp, n); }
void c_gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  cuda::gelu_backward(dinp, inp, dout, n);
}
void c_bias_backward(float* db, const float* dy, int64_t N, int64_t out) {
  cuda::bias_backward(db, dy, N, out, scratch(cuda::bias_backward_workspace_bytes(N, out)));
}
void c_bias_column_sums(float* sums, const float* dy, int64_t N, int64_t out) {
  c_fill_zero(sums, size_t(out) * sizeof(float));
  c_bias_backward(sums, dy, N, out);
}
void c_bias_add(float* db, const float* sums, int64_t out) { cuda::residual_add(db, sums, out); }
void c_bias_add_rows(float* y, const float* bias, int64_t N, int64_t out) { cuda::bias_add_rows(y, bias, N, out); }
void c_residual_add(float* x, const float* y, int64_t n) { cuda::residual_add(x, y, n); }
void c_dropout_mask_fill(uint8_t* mask, const DropoutStream& st, uint64_t first, int64_t n, float p) {
  cuda::dropout_mask_fill(mask, st, first, n, p);
}
void c_dropout_forward(float* out, const float* inp, const uint8_t* mask, int64_t n, float p) {
  cuda::dropout_forward(out, inp, mask, n, p);
}
void c_dropout_backward(float* dinp, const float* dout, const uint8_t* mask, int64_t n, float p) {
  cuda::dropout_backward(dinp, dout, mask, n, p);
}
void c_softmax_dropout_forward(void* probs, uint8_t* mask, void* dropped, DType dt, const float* scores,
                               int64_t heads, int64_t batch, int64_t s, const AttentionDropout& drop) {
  cuda::softmax_dropout_forward(probs, mask, dropped, dt, scores, heads, batch, s, drop);
}
void c_softmax_causal_backward(float* dscores, const float* dprobs, const float* probs, int64_t batch, int64_t s) {
  cuda::softmax_causal_backward(dscores, dprobs, probs, batch, s);
}
// The fused attention: kept bf16 Q, K, V go to the tensor-core kernels as they are (no fp32 copy
// widened first: six passes over b·s·h values a layer, forward and backward); a shape those do not
// serve widens them into the room the model gives and takes the fp32 form.
FlashFp32Operands widened(const FlashOperands& in, const FlashShape& x) {
  return fp32_operands(
      in, x, [](const uint16_t* src, float* dst, int64_t n) { cuda::from_bf16(src, dst, n); },
      [](float* q, float* k, float* v, const uint16_t* rows, const FlashShape& s) {
        cuda::split_heads_widened(q, k, v, rows, s.b, s.s, s.a, s.dh);
      });
}
const uint16_t* bits(const void* p) { return static_cast<const uint16_t*>(p); }
// The kept bits as the tensor-core kernels take them: the head layout's three tensors, or the QKV rows.
cuda::QkvBits qkv_bits(const FlashOperands& in) { return {bits(in.q), bits(in.k), bits(in.v), in.qkv_rows}; }
void c_flash_forward(float* out, float* lse, const FlashOperands& in, const FlashShape& x,
                     const AttentionDropout& drop) {
  if (in.bf16 && !in.qkv_rows && cuda::flash_tc_supported(x))
    return cuda::flash_attention_forward_bf16(out, lse, bits(in.q), bits(in.k), bits(in.v), x, drop);
  const FlashFp32Operands f = widened(in, x);
  cuda::flash_attention_forward(out, lse, f.q, f.k, f.v, x, drop);
}
void c_flash_backward(float* dq, float* dk, float* dv, const float* dout, const FlashOperands& in, const float* out,
                      const float* lse, const FlashShape& x, const AttentionDropout& drop) {
  const cuda::Workspace ws = scratch(cuda::flash_attention_backward_workspace_bytes(x));
  if (in.bf16 && !in.qkv_rows && cuda::flash_tc_supported(x))
    return cuda::flash_attention_backward_bf16(dq, dk, dv, dout, bits(in.q), bits(in.k), bits(in.v), out, lse, x, drop,
                                               ws);
  const FlashFp32Operands f = widened(in, x);
  cuda::flash_attention_backward(dq, dk, dv, dout, f.q, f.k, f.v, out, lse, x, drop, ws);
}
// The ring's blocks (context parallelism, --cp-comm-type p2p): cuda/flash_block.cu.
void c_flash_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                           const FlashBlock& x, const AttentionDropout& drop) {
  cuda::flash_block_forward(out, lse, q, k, v, x, drop);
}
void c_flash_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                            const float* v, const float* out, const float* lse, const FlashBlock& x,
                            const AttentionDropout& drop) {
  cuda::flash_block_backward(dq, dk, dv, dout, q, k, v, out, lse, x, drop,
                             scratch(cuda::flash_block_backward_workspace_bytes(x)));
}
void c_split_heads(float* q, float* k, float* v, const float* qkv, const HeadShape& x) {
  cuda::split_heads(q, k, v, qkv, x.b, x.s, x.a, x.dh);
}
void c_merge_heads(float* out, const float* heads, const HeadShape& x) { cuda::merge_heads(out, heads, x.b, x.s, x.a, x.dh); }
void c_unmerge_heads(float* heads, const float* rows, const HeadShape& x) {
  cuda::unmerge_heads(heads, rows, x.b, x.s, x.a, x.dh);
}
void c_merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const HeadShape& x) {
  cuda::merge_qkv_grads(dqkv, dq, dk, dv, x.b, x.s, x.a, x.dh);
}
void c_embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t vl, int64_t N,
                               int64_t h) {
  cuda::embedding_shard_forward(out, ids, wte, v0, vl, N, h);
}
void c_embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t vl, int64_t N,
                                int64_t h) {
  cuda::embedding_shard_backward(dwte, dout, ids, v0, vl, N, h,
                                 scratch(cuda::embedding_shard_backward_workspace_bytes(N, vl)));
}
void c_add_positions(float* x, const float* wpe, int64_t b, int64_t sl, int64_t p0, int64_t h) {
  cuda::add_positions(x, wpe, b, sl, p0, h);
}
void c_position_grads(float* dwpe, const float* dx, int64_t b, int64_t sl, int64_t p0, int64_t h) {
  cuda::position_grads(dwpe, dx, b, sl, p0, h);
}
void c_ce_max_target(float* row_max, float* target_logit, const float* logits, const int32_t* targets, int64_t v0,
                     int64_t vl, int64_t real, int64_t N) {
  cuda::ce_shard_max_target(row_max, target_logit, logits, targets, v0, vl, real, N);
}
void c_ce_exp_sum(float* row_sum, float* logits, const float* row_max, int64_t vl, int64_t real, int64_t N) {
  cuda::ce_shard_exp_sum(row_sum, logits, row_max, vl, real, N);
}
void c_ce_normalize(float* logits, float* losses, const float* row_max, const float* row_sum,
                    const float* target_logit, int64_t vl, int64_t real, int64_t N) {
  cuda::ce_shard_normalize(logits, losses, row_max, row_sum, target_logit, vl, real, N);
}
void c_ce_whole_forward(float* logits, float* losses, float* row_max, float* row_sum, float* target_logit,
                        const int32_t* targets, int64_t vl, int64_t real, int64_t N) {
  cuda::ce_whole_forward(logits, losses, row_max, row_sum, target_logit, targets, vl, real, N);
}
void c_ce_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t v0, int64_t vl, int64_t N,
                   float scale) {
  cuda::ce_shard_backward(dlogits, probs, targets, v0, vl, N, scale);
}
void c_half_narrow(bool fp16, const float* src, uint16_t* dst, int64_t n) {
  if (fp16) cuda::to_fp16(src, dst, n);
  else cuda::to_bf16(src, dst, n);
}
void c_half_widen(bool fp16, const uint16_t* src, float* dst, int64_t n) {
  if (fp16) cuda::from_fp16(src, dst, n);
  else cuda::from_bf16(src, dst, n);
}
void c_half_accumulate(bool fp16, const float* src, uint16_t* dst, int64_t n) {
  if (fp16) cuda::fp16_accumulate(src, dst, n);
  else cuda::bf16_accumulate(src, dst, n);
}
void c_adamw(float* m, float* v, float* w, const float* g, int64_t n, float decay, const AdamWScalars& a) {
  cuda::adamw_update(m, v, w, g, n, decay, a);
}
// The sums on the device, all pieces in two launches into one array, then one copy to the host: a
// step's global norm waits once, not once a tensor (~150 at GPT-2).
void c_grad_sums_squares(GradPieceSums batch) {
  if (batch.count == 0) return;
  const size_t ws = cuda::grad_sums_squares_workspace_bytes(batch.count, batch.pieces);
  const size_t sums_at = (ws + 255) / 256 * 256;
  cuda::Workspace w = scratch(sums_at + batch.count * sizeof(double));
  auto* sums = reinterpret_cast<double*>(static_cast<char*>(w.data) + sums_at);  // past the kernels' scratch
  cuda::grad_sums_squares(sums, batch.pieces, batch.count, {w.data, ws});
  c_to_host(batch.sums, sums, batch.count * sizeof(double));
}
void c_scale_grads(float* g, int64_t n, float factor) { cuda::scale_grads(g, n, factor); }
bool c_all_finite(const float* v, int64_t n) {
  cuda::Workspace w = scratch(sizeof(int32_t));
  auto* flag = static_cast<int32_t*>(w.data);
  c_fill_zero(flag, sizeof(int32_t));
  cuda::grads_nonfinite(flag, v, n);
  int32_t host = 0;
  c_to_host(&host, flag, sizeof host);
  return host == 0;
}

// The bf16 fused passes (kernels/bf16_fused.hpp), each one kernel on the device (cuda/bf16_fused.hpp).
// AdamW takes clipping's factor in its pass, as the CPU's does (it staged a scaled copy of each
// gradient before: two passes over every gradient and two launches a tensor, each step that clipped),
// every tensor in one launch.
void c_adamw_segments(AdamWSegments batch, const AdamWScalars& a) {
  cuda::adamw_update_segments(batch.segments, batch.count, a,
                              scratch(cuda::adamw_segments_workspace_bytes(batch.count)));
}
void c_layernorm_forward_bf16(uint16_t* x16, uint16_t* y16, float* mean, float* rstd, const float* x, const float* w,
                              const float* b, int64_t N, int64_t C) {
  cuda::layernorm_forward_bf16(x16, y16, mean, rstd, x, w, b, N, C);
}
void c_split_heads16(uint16_t* q, uint16_t* k, uint16_t* v, const uint16_t* qkv16, const HeadShape& x) {
  cuda::split_heads16(q, k, v, qkv16, x.b, x.s, x.a, x.dh);
}
void c_merge_heads_bf16(uint16_t* out, const float* heads, const HeadShape& x) {
  cuda::merge_heads_bf16(out, heads, x.b, x.s, x.a, x.dh);
}
void c_unmerge_heads_bf16(float* heads, const uint16_t* rows16, const HeadShape& x) {
  cuda::unmerge_heads_bf16(heads, rows16, x.b, x.s, x.a, x.dh);
}
// The context in the token rows: the tensor-core kernels read and write it there; a shape they do not
// serve takes the head-layout call with the layout passes around it (the CPU's sequence).
void c_flash_forward_rows(uint16_t* out_rows, float* lse, const FlashOperands& in, const FlashShape& x,
                          const AttentionDropout& drop, float* room) {
  if (in.bf16 && cuda::flash_tc_supported(x))
    return cuda::flash_attention_forward_rows_bf16(out_rows, lse, qkv_bits(in), x, drop);
  c_flash_forward(room, lse, in, x, drop);
  c_merge_heads_bf16(out_rows, room, heads_of(x));
}
void c_flash_backward_rows(float* dq, float* dk, float* dv, const float* dout_rows, const FlashOperands& in,
                           const uint16_t* out_rows, const float* lse, const FlashShape& x, const AttentionDropout& drop,
                           float* room_dout, float* room_out) {
  if (in.bf16 && cuda::flash_tc_supported(x)) {
    const cuda::Workspace ws = scratch(cuda::flash_attention_backward_workspace_bytes(x));
    return cuda::flash_attention_backward_rows_bf16(dq, dk, dv, dout_rows, qkv_bits(in), out_rows, lse, x, drop, ws);
  }
  c_unmerge_heads(room_dout, dout_rows, heads_of(x));
  c_unmerge_heads_bf16(room_out, out_rows, heads_of(x));
  c_flash_backward(dq, dk, dv, room_dout, in, room_out, lse, x, drop);
}
void c_gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n) {
  cuda::gelu_forward16(act16, pre16, n);
}
void c_narrow_bias_backward(uint16_t* dy16, float* db, const float* dy, int64_t N, int64_t out) {
  cuda::narrow_bias_backward(dy16, db, dy, N, out, scratch(cuda::bias_backward_workspace_bytes(N, out)));
}
void c_gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout, int64_t N,
                            int64_t out) {
  cuda::gelu_backward_narrow(g16, db, pre16, dout, N, out, scratch(cuda::bias_backward_workspace_bytes(N, out)));
}
void c_merge_qkv_grads_narrow(uint16_t* dqkv16, float* db, const float* dq, const float* dk, const float* dv,
                              const HeadShape& x) {
  cuda::merge_qkv_grads_narrow(dqkv16, db, dq, dk, dv, x.b, x.s, x.a, x.dh,
                               scratch(cuda::bias_backward_workspace_bytes(x.b * x.s, 3 * x.a * x.dh)));
}
// The QKV gradient in the rows too: the kernels write it where they serve the shape; elsewhere the
// rows call into the rooms with the merge after (the CPU's sequence).
void c_flash_backward_qkv_rows(uint16_t* dqkv16, float* db, const float* dout_rows, const FlashOperands& in,
                               const uint16_t* out_rows, const float* lse, const FlashShape& x,
                               const AttentionDropout& drop, const FlashRowsRooms& r) {
  if (in.bf16 && cuda::flash_qkv_rows_supported(x)) {
    const cuda::Workspace ws = scratch(cuda::flash_attention_backward_qkv_rows_workspace_bytes(x));
    return cuda::flash_attention_backward_qkv_rows_bf16(dqkv16, db, dout_rows, qkv_bits(in), out_rows, lse, x, drop,
                                                        ws);
  }
  c_flash_backward_rows(r.dq, r.dk, r.dv, dout_rows, in, out_rows, lse, x, drop, r.dout, r.out);
  c_merge_qkv_grads_narrow(dqkv16, db, r.dq, r.dk, r.dv, heads_of(x));
}
void c_softmax_causal_backward_bf16(uint16_t* ds16, const float* dprobs, const uint16_t* probs16, int64_t batch,
                                    int64_t s) {
  cuda::softmax_causal_backward_bf16(ds16, dprobs, probs16, batch, s);
}
void c_layernorm_backward_bf16(float* dinp, float* dw, float* db, const float* dout, const uint16_t* inp16,
                               const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  cuda::layernorm_backward_bf16(dinp, dw, db, dout, inp16, w, mean, rstd, N, C,
                                scratch(cuda::layernorm_backward_workspace_bytes(N, C)));
}

void c_ce_backward_bf16(uint16_t* d16, const uint16_t* logits16, const float* row_max, const float* row_sum,
                        const int32_t* targets, int64_t v0, int64_t vl, int64_t real, int64_t N, float scale) {
  cuda::ce_shard_backward_bf16(d16, logits16, row_max, row_sum, targets, v0, vl, real, N, scale);
}
void c_ce_whole_forward_bf16(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                             float* target_logit, const int32_t* targets, int64_t vl, int64_t real, int64_t N) {
  cuda::ce_whole_forward_bf16(logits16, losses, row_max, row_sum, target_logit, targets, vl, real, N);
}
void c_ce_max_target_bf16(float* row_max, float* target_logit, const uint16_t* logits16, const int32_t* targets,
                          int64_t v0, int64_t vl, int64_t real, int64_t N) {
  cuda::ce_shard_max_target_bf16(row_max, target_logit, logits16, targets, v0, vl, real, N);
}
void c_ce_exp_sum_bf16(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t vl, int64_t real,
                       int64_t N) {
  cuda::ce_shard_exp_sum_bf16(row_sum, logits16, row_max, vl, real, N);
}
void c_ce_row_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int64_t N) {
  cuda::ce_row_losses(losses, row_max, row_sum, target_logit, N);
}

void c_synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

const DeviceOps kCudaOps = {
    Device::cuda,
    AttentionLimits{cuda::kFlashMaxHeadDim, cuda::kFlashBlockMaxHeadDim},
    c_gemm,
    c_linear_forward,
    c_linear_forward_bf16,
    c_linear_backward_input,
    c_linear_backward_input_bf16,
    c_linear_backward_weight,
    c_linear_forward_residual,
    c_linear_gelu_forward_bf16,
    c_linear_backward_input_gelu_bf16,
    c_layernorm_forward,
    c_layernorm_backward,
    c_layernorm_partial_floats,
    c_layernorm_backward_input,
    c_layernorm_reduce_partials,
    c_gelu_forward,
    c_gelu_backward,
    c_bias_backward,
    c_bias_column_sums,
    c_bias_add,
    c_bias_add_rows,
    c_residual_add,
    c_dropout_mask_fill,
    c_dropout_forward,
    c_dropout_backward,
    c_softmax_dropout_forward,
    c_softmax_causal_backward,
    c_flash_forward,
    c_flash_backward,
    c_flash_forward_rows,
    c_flash_backward_rows,
    c_flash_backward_qkv_rows,
    c_flash_block_forward,
    c_flash_block_backward,
    c_split_heads,
    c_merge_heads,
    c_unmerge_heads,
    c_merge_qkv_grads,
    c_embedding_shard_forward,
    c_embedding_shard_backward,
    c_add_positions,
    c_position_grads,
    c_ce_max_target,
    c_ce_exp_sum,
    c_ce_normalize,
    c_ce_whole_forward,
    c_ce_backward,
    c_to_bf16,
    c_half_narrow,
    c_half_widen,
    c_half_accumulate,
    c_adamw,
    c_adamw_segments,
    c_grad_sums_squares,
    c_scale_grads,
    c_all_finite,
    c_layernorm_forward_bf16,
    c_split_heads16,
    c_merge_heads_bf16,
    c_unmerge_heads_bf16,
    c_gelu_forward16,
    c_narrow_bias_backward,
    c_gelu_backward_narrow,
    c_merge_qkv_grads_narrow,
    c_softmax_causal_backward_bf16,
    c_layernorm_backward_bf16,
    c_ce_backward_bf16,
    c_ce_whole_forward_bf16,
    c_ce_max_target_bf16,
    c_ce_exp_sum_bf16,
    c_ce_row_losses,
    c_synchronize,
};

}  // namespace

std::string cuda_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device usable (") + cudaGetErrorString(e) + ")";
  if (n == 0) return "no CUDA device on this machine";
  const cudaError_t init = cudaFree(nullptr);  // makes the context, so its memory is measured now
  if (init != cudaSuccess) return std::string("the CUDA context could not be made (") + cudaGetErrorString(init) + ")";
  g_context_bytes = c_driver_used();
  return "";
}
const DeviceMemory& cuda_memory() { return kCudaMemory; }
const DeviceOps& cuda_ops() { return kCudaOps; }
void cuda_allow_tf32(bool allow) { gemms().set_math(allow ? cuda::GemmMath::tf32 : cuda::GemmMath::fp32); }

}  // namespace lattice
