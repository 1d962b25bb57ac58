#include "kernels/linear.hpp"

#include "tensor/bf16.hpp"

namespace lattice {

void linear_forward(float* y, GemmOperand x, GemmOperand w, const float* bias, int64_t N, int64_t in, int64_t out) {
  GemmShape s;
  s.M = N, s.N = out, s.K = in;
  gemm(s, x, w, y, bias);
}

void linear_backward_input(float* dx, GemmOperand dy_op, GemmOperand w, int64_t N, int64_t in, int64_t out) {
  GemmShape s;  // dx[N, in] = dy[N, out] · Wᵀ, W stored [in, out] = [N_gemm, K_gemm]
  s.M = N, s.N = in, s.K = out, s.trans_b = true;
  gemm(s, dy_op, w, dx);
}

void linear_backward_weight(float* dw, GemmOperand x, GemmOperand dy_op, int64_t N, int64_t in, int64_t out) {
  GemmShape s;  // dW[in, out] += xᵀ · dy, x stored [N, in] = [K_gemm, M_gemm]
  s.M = in, s.N = out, s.K = N, s.trans_a = true, s.accumulate = true;
  gemm(s, x, dy_op, dw);
}

void linear_backward(float* dx, float* dw, float* db, const float* dy, GemmOperand dy_op, GemmOperand x,
                     GemmOperand w, int64_t N, int64_t in, int64_t out) {
  if (dx) linear_backward_input(dx, dy_op, w, N, in, out);
  linear_backward_weight(dw, x, dy_op, N, in, out);
  if (db) bias_backward(db, dy, N, out);
}

GemmOperand as_operand(const float* src, int64_t n, DType dt, uint16_t* half) {
  if (dt == DType::fp32) return {src, DType::fp32};
  to_bf16(src, half, n);
  return {half, DType::bf16};
}

}  // namespace lattice
