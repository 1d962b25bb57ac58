// The host simulation's cuda/gemm.hpp for the whole trainer (scripts/cuda-host-trainer.sh): device
// memory is host memory there, so a GEMM is the CPU's (kernels/gemm.hpp, oneDNN) on the same
// pointers, with cuda/gemm.cu's argument checks, its empty-sum rule and its bias (added after the
// product). What it tests is the backend's use of the GEMMs, not cuBLASLt.
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/env_switch.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "tensor/bf16.hpp"

namespace lattice::cuda {
struct GemmContext::Impl {
  GemmMath math = GemmMath::fp32;
  size_t workspace_bytes = 0;
  void* owned = nullptr;
  int64_t calls = 0;
  // The tuner: one algorithm here, so nothing to choose; an accumulating call's first call of a shape
  // still borrows the copy of C from the lender, runs once and restores C, as cuda/gemm.cu's tuner does,
  // so the backend's loan (tracked, given back) runs in the simulated trainer.
  bool tuning = true;
  GemmContext::Lender lender{};
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>> tuned;
};
GemmContext::GemmContext(Workspace workspace, GemmMath math) : impl_(std::make_unique<Impl>()) {
  impl_->math = math;
  impl_->workspace_bytes = workspace.bytes;
  if (!workspace.data && workspace.bytes && cudaMalloc(&impl_->owned, workspace.bytes) != cudaSuccess)
    throw std::runtime_error("CUDA: gemm workspace: out of memory");
}
GemmContext::~GemmContext() { cudaFree(impl_->owned); }
size_t GemmContext::workspace_bytes() const { return impl_->workspace_bytes; }
GemmMath GemmContext::math() const { return impl_->math; }
void GemmContext::set_math(GemmMath math) { impl_->math = math; }
int64_t GemmContext::cached_plans() const { return impl_->calls ? 1 : 0; }
bool GemmContext::last_bias_in_epilogue() const { return false; }
std::vector<GemmContext::Tuning> GemmContext::tunings() const { return {}; }
bool GemmContext::tuning() const { return impl_->tuning; }
void GemmContext::set_tuning(bool on) { impl_->tuning = on; }
void GemmContext::set_lender(Lender lender) { impl_->lender = lender; }
void GemmContext::gemm(const GemmShape& s, GemmOperand a, GemmOperand b, float* c, const float* bias, cudaStream_t) {
  if (a.dtype != b.dtype) throw std::logic_error("cuda::gemm: A and B must share a dtype");
  if (a.dtype != DType::fp32 && a.dtype != DType::bf16) throw std::logic_error("cuda::gemm: A and B fp32 or bf16");
  if (bias && s.alpha != 1.0f) throw std::logic_error("cuda::gemm: alpha != 1 with a bias is not supported (cuda/gemm.hpp)");
  if (s.batch < 1 || s.M < 0 || s.N < 0 || s.K < 0) throw std::logic_error("cuda::gemm: bad shape");
  if (s.M == 0 || s.N == 0) return;
  ++impl_->calls;
  if (s.K == 0) {
    if (!s.accumulate) std::memset(c, 0, size_t(s.batch * s.M * s.N) * sizeof(float));
  } else {
    const size_t c_bytes = size_t(s.batch * s.M * s.N) * sizeof(float);
    if (impl_->tuning && s.accumulate && impl_->lender.borrow &&
        impl_->tuned.insert({s.batch, s.M, s.N, s.K, s.trans_a, s.trans_b}).second) {
      if (void* copy = impl_->lender.borrow(c_bytes)) {
        std::memcpy(copy, c, c_bytes);
        lattice::gemm(s, a, b, c);  // a candidate's run, then C as it was
        std::memcpy(c, copy, c_bytes);
        impl_->lender.give_back(copy);
      }
    }
    lattice::gemm(s, a, b, c);
  }
  if (bias) bias_add_rows(c, bias, s.batch * s.M, s.N, nullptr);
}
// A bf16 D (and the GeLU epilogues with it) as cuBLASLt offers one; LATTICE_HOST_SIM_GEMM_BF16_OUT=0
// answers false, as cuBLASLt does where it has no algorithm for a bf16 D: the caller's fp32-and-narrow
// path (and the GeLU's own passes) then run.
namespace {
bool bf16_out_offered() { return env_switch_on("LATTICE_HOST_SIM_GEMM_BF16_OUT"); }
// The product in fp32 with the bf16 bias widened (alpha 1, no accumulation): what a bf16 D rounds.
std::vector<float> product16(GemmContext& ctx, const GemmShape& s, GemmOperand a, GemmOperand b,
                             const uint16_t* bias16, cudaStream_t stream) {
  if (s.accumulate || s.alpha != 1.0f) throw std::logic_error("cuda::gemm_bf16_out: alpha 1, no accumulation");
  std::vector<float> full(size_t(s.batch * s.M * s.N)), bias(bias16 ? size_t(s.N) : 0);
  if (bias16) lattice::from_bf16(bias16, bias.data(), s.N);
  ctx.gemm(s, a, b, full.data(), bias16 ? bias.data() : nullptr, stream);
  return full;
}
// The GeLU epilogues' own rule (cuda/gemm.hpp): one matrix, rows a multiple of 8 long, a non-empty sum.
bool epilogue_offered(const GemmShape& s) { return bf16_out_offered() && s.batch == 1 && s.N % 8 == 0 && s.K != 0; }
}  // namespace
// The product, then to_bf16's rounding.
bool GemmContext::gemm_bf16_out(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* c,
                                const uint16_t* bias16, cudaStream_t stream) {
  if (!bf16_out_offered()) return false;
  const std::vector<float> full = product16(*this, s, a, b, bias16, stream);
  lattice::to_bf16(full.data(), c, int64_t(full.size()));
  return true;
}
// cuBLASLt's GeLU epilogues as cuda/gemm.hpp states them: the GeLU (tanh form, kernels/gelu.hpp) of
// the fp32 sum and its rounding kept; the gradient's product unrounded.
bool GemmContext::gemm_bf16_gelu(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* act16, uint16_t* pre16,
                                 const uint16_t* bias16, cudaStream_t stream) {
  if (!epilogue_offered(s)) return false;
  const std::vector<float> full = product16(*this, s, a, b, bias16, stream);
  lattice::to_bf16(full.data(), pre16, int64_t(full.size()));
  for (size_t i = 0; i < full.size(); ++i) act16[i] = lattice::to_bf16(lattice::gelu_value(full[i]));
  return true;
}
bool GemmContext::gemm_bf16_dgelu(const GemmShape& s, GemmOperand a, GemmOperand b, uint16_t* g16,
                                  const uint16_t* pre16, cudaStream_t stream) {
  if (!epilogue_offered(s)) return false;
  const std::vector<float> full = product16(*this, s, a, b, nullptr, stream);
  for (size_t i = 0; i < full.size(); ++i)
    g16[i] = lattice::to_bf16(full[i] * lattice::gelu_grad(lattice::from_bf16(pre16[i])));
  return true;
}
}  // namespace lattice::cuda
