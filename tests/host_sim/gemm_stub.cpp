// The host simulation's cuda/gemm.hpp: cuBLASLt is a library, not kernel text, so the simulation has
// none; lattice_cuda_check built for the host (LATTICE_CUDA_HOST_SIM) does not call it, and these
// definitions say so if anything does.
#include <stdexcept>

#include "cuda/gemm.hpp"

namespace lattice::cuda {
struct GemmContext::Impl {};
namespace {
[[noreturn]] void no_cublaslt() { throw std::runtime_error("cuBLASLt is not simulated on the host"); }
}  // namespace
GemmContext::GemmContext(Workspace, GemmMath) { no_cublaslt(); }
GemmContext::~GemmContext() = default;
size_t GemmContext::workspace_bytes() const { no_cublaslt(); }
GemmMath GemmContext::math() const { no_cublaslt(); }
void GemmContext::set_math(GemmMath) { no_cublaslt(); }
int64_t GemmContext::cached_plans() const { no_cublaslt(); }
bool GemmContext::last_bias_in_epilogue() const { no_cublaslt(); }
std::vector<GemmContext::Tuning> GemmContext::tunings() const { no_cublaslt(); }
bool GemmContext::tuning() const { no_cublaslt(); }
void GemmContext::set_tuning(bool) { no_cublaslt(); }
void GemmContext::set_lender(Lender) { no_cublaslt(); }
void GemmContext::gemm(const GemmShape&, GemmOperand, GemmOperand, float*, const float*, cudaStream_t) { no_cublaslt(); }
bool GemmContext::gemm_bf16_out(const GemmShape&, GemmOperand, GemmOperand, uint16_t*, const uint16_t*, cudaStream_t) {
  no_cublaslt();
}
bool GemmContext::gemm_bf16_gelu(const GemmShape&, GemmOperand, GemmOperand, uint16_t*, uint16_t*, const uint16_t*,
                                 cudaStream_t) {
  no_cublaslt();
}
bool GemmContext::gemm_bf16_dgelu(const GemmShape&, GemmOperand, GemmOperand, uint16_t*, const uint16_t*,
                                  cudaStream_t) {
  no_cublaslt();
}
}  // namespace lattice::cuda
