// lattice_cuda_check: every CUDA kernel of cuda/kernels.hpp against its CPU kernel on random inputs,
// forward and backward, one line each:
//   kernel NAME fwd|bwd max_abs_diff=D rel=R tol=T ok|FAIL
// fp32: rel = max|gpu − cpu| / max|cpu| ≤ 1e-5; bf16 outputs: rel ≤ 2^-7; dropout masks: bit-identical
// (rel = the fraction of flags that differ, tol 0). Outputs are poisoned (NaN bytes) before each
// launch, so an element a kernel never writes fails. The kernels whose reductions the device orders
// itself also run twice and must repeat bit for bit ("repeat" lines). The GEMMs are compared with a
// double-precision loop over the same (fp32, or bf16-rounded) inputs; the fused attention with the
// CPU's flash_attention_forward/backward (its tensor-core form, on bf16 operands, within the bf16 bound); the head layouts, fp16 casts and the loss-scaling pieces
// exactly. After the checks, "timing" lines (not pass/fail) give the bf16 GEMMs at GPT-2 124M's shapes,
// the cross-entropy's forward, a layer's memory-bound passes (GB/s) and the fused attention at b 8,
// a 12, s 1024, dh 64. Exit status 1 on any FAIL, 2 when no GPU is
// usable or the seed is not a whole number. docs/gpu-kernels.md. Usage: lattice_cuda_check [seed]
// One file past the usual length on purpose: one program, its checks in cuda/kernels.hpp's order, each a
// few lines of setup around the same compare helpers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/bf16_fused.hpp"
#include "cuda/flash_attention.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"
#include "cuda/mma.cuh"
#include "kernels/bf16_fused.hpp"
#include "kernels/bias.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dropout.hpp"
#include "kernels/embedding.hpp"
#include "kernels/fast_math.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "kernels/softmax.hpp"
#include "tensor/bf16.hpp"
#include "tensor/half.hpp"

namespace {

using lattice::DType;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "lattice_cuda_check: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A device copy of a host vector (or `n` poisoned elements), freed at scope end.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    cuda_ok(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)), "cudaMalloc");
    poison();
  }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { upload(h); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void upload(const std::vector<T>& h) { cuda_ok(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "upload"); }
  void poison() { cuda_ok(cudaMemset(p, 0xFF, std::max<size_t>(1, n) * sizeof(T)), "poison"); }  // NaN floats
  std::vector<T> get() const {
    cuda_ok(cudaDeviceSynchronize(), "kernel");
    std::vector<T> h(n);
    cuda_ok(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Scratch(size_t b) : bytes(b) { cuda_ok(cudaMalloc(&p, std::max<size_t>(1, b)), "cudaMalloc workspace"); }
  ~Scratch() { cudaFree(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  lattice::cuda::Workspace ws() const { return {p, bytes}; }
};

int failures = 0;
std::mt19937_64 rng;
// Built by scripts/cuda-host-check.sh against the host simulation: the kernels' checks only (cuBLASLt
// is a library the simulation has none of; timings are the device's).
#ifdef LATTICE_CUDA_HOST_SIM
constexpr bool kHostSim = true;
#else
constexpr bool kHostSim = false;
#endif

std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The elements after the first: the results of a call made one element in (its pointers misaligned).
template <class T>
std::vector<T> past_first(const std::vector<T>& v) {
  return std::vector<T>(v.begin() + 1, v.end());
}

// The values rounded to bf16 and widened again.
std::vector<float> bf16_valued(std::vector<float> v) {
  for (float& x : v) x = lattice::from_bf16(lattice::to_bf16(x));
  return v;
}
// The values as bf16 bits, and bf16 bits widened.
std::vector<uint16_t> narrowed(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  lattice::to_bf16(x.data(), r.data(), int64_t(x.size()));
  return r;
}
std::vector<float> widened(const std::vector<uint16_t>& h) {
  std::vector<float> w(h.size());
  lattice::from_bf16(h.data(), w.data(), int64_t(h.size()));
  return w;
}

void line(const std::string& name, const char* dir, double maxabs, double rel, double tol) {
  const bool ok = rel <= tol;  // NaN fails
  if (!ok) ++failures;
  std::printf("kernel %-34s %s max_abs_diff=%.3e rel=%.3e tol=%.1e %s\n", name.c_str(), dir, maxabs, rel, tol,
              ok ? "ok" : "FAIL");
  std::fflush(stdout);
}

// max|got − ref| and that over max|ref| (both NaN where the sizes differ or a difference is NaN).
struct Diff {
  double maxabs, rel;
};
Diff diff_of(const std::vector<float>& ref, const std::vector<float>& got) {
  double maxabs = 0.0, maxref = 0.0;
  bool nan = ref.size() != got.size();
  for (size_t i = 0; i < ref.size() && !nan; ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (std::isnan(d)) nan = true;
    maxabs = std::max(maxabs, d);
    maxref = std::max(maxref, std::fabs(double(ref[i])));
  }
  if (nan) return {NAN, NAN};
  return {maxabs, maxref > 0 ? maxabs / maxref : maxabs};
}
void compare(const std::string& name, const char* dir, const std::vector<float>& ref, const std::vector<float>& got,
             double tol = 1e-5) {
  const Diff d = diff_of(ref, got);
  line(name, dir, d.maxabs, d.rel, tol);
}

void compare_bf16(const std::string& name, const char* dir, const std::vector<uint16_t>& ref,
                  const std::vector<uint16_t>& got) {
  std::vector<float> r(ref.size()), g(got.size());
  for (size_t i = 0; i < ref.size(); ++i) r[i] = lattice::from_bf16(ref[i]);
  for (size_t i = 0; i < got.size(); ++i) g[i] = lattice::from_bf16(got[i]);
  compare(name + " [bf16]", dir, r, g, 1.0 / 128.0);
}

void compare_mask(const std::string& name, const char* dir, const std::vector<uint8_t>& ref,
                  const std::vector<uint8_t>& got) {
  size_t differ = ref.size() == got.size() ? 0 : 1;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) differ += ref[i] != got[i];
  line(name + " [mask]", dir, differ ? 1.0 : 0.0, ref.empty() ? 0.0 : double(differ) / double(ref.size()), 0.0);
}

template <class T>
void compare_repeat(const std::string& name, const char* dir, const std::vector<T>& a, const std::vector<T>& b) {
  const bool same = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  line(name + " [repeat]", dir, same ? 0.0 : 1.0, same ? 0.0 : 1.0, 0.0);
}

template <class T>
void compare_bits(const std::string& name, const char* dir, const std::vector<T>& ref, const std::vector<T>& got) {
  const bool same = ref.size() == got.size() && std::memcmp(ref.data(), got.data(), ref.size() * sizeof(T)) == 0;
  line(name + " [bits]", dir, same ? 0.0 : 1.0, same ? 0.0 : 1.0, 0.0);
  if (same || ref.size() != got.size()) return;
  // Where, and how often: what a lent GPU's minutes can't be spent asking again.
  size_t first = ref.size(), count = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&ref[i], &got[i], sizeof(T)) != 0) first = std::min(first, i), ++count;
  std::printf("  note %s: %zu of %zu elements differ, the first at %zu (%.9g against %.9g)\n", name.c_str(), count,
              ref.size(), first, double(ref[first]), double(got[first]));
}

// ---- the checks ----
void check_embedding() {
  const int64_t b = 4, s = 256, h = 768, vocab = 50304, N = b * s;
  std::uniform_int_distribution<int32_t> id(0, 999);  // few distinct ids: many repeats for the backward
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (auto& x : ids) x = id(rng);
  ids[0] = int32_t(vocab - 1);
  const auto wte = randn(size_t(vocab * h), 0.02f), wpe = randn(size_t(s * h), 0.02f);
  std::vector<float> out(static_cast<size_t>(N * h));
  lattice::embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), b, s, h);
  Dev<int32_t> d_ids(ids);
  Dev<float> d_wte(wte), d_wpe(wpe), d_out(out.size());
  lattice::cuda::embedding_forward(d_out.p, d_ids.p, d_wte.p, d_wpe.p, b, s, h);
  compare("embedding", "fwd", out, d_out.get());

  const auto dout = randn(out.size());
  auto dwte = randn(wte.size(), 0.1f), dwpe = randn(wpe.size(), 0.1f);  // accumulated into
  Dev<float> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  Scratch ws(lattice::cuda::embedding_backward_workspace_bytes(b, s, vocab));
  lattice::cuda::embedding_backward(d_dwte.p, d_dwpe.p, d_dout.p, d_ids.p, b, s, h, vocab, ws.ws());
  const auto g_dwte = d_dwte.get(), g_dwpe = d_dwpe.get();
  d_dwte.upload(dwte), d_dwpe.upload(dwpe);
  lattice::cuda::embedding_backward(d_dwte.p, d_dwpe.p, d_dout.p, d_ids.p, b, s, h, vocab, ws.ws());
  compare_repeat("embedding dwte", "bwd", g_dwte, d_dwte.get());
  lattice::embedding_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), b, s, h);
  compare("embedding dwte", "bwd", dwte, g_dwte);
  compare("embedding dwpe", "bwd", dwpe, g_dwpe);
  // Runs of one id longer than the kernels' batch of rows (16): eight ids over the 1024 tokens, about
  // 128 each, and a run of one id as the last token. Each row adds its tokens in token order, as the
  // CPU does, so the bits are the CPU's; the shard form (the half of the vocabulary from v0) the same
  // on its rows and leaves the others alone.
  std::uniform_int_distribution<int32_t> few(0, 7);
  for (auto& x : ids) x = few(rng) * 6000;
  ids[size_t(N - 1)] = int32_t(vocab - 1);
  d_ids.upload(ids);
  std::vector<float> dwte_cpu = randn(wte.size(), 0.1f), dwpe_cpu = randn(wpe.size(), 0.1f);
  const std::vector<float> dwte0 = dwte_cpu;
  d_dwte.upload(dwte_cpu), d_dwpe.upload(dwpe_cpu);
  lattice::cuda::embedding_backward(d_dwte.p, d_dwpe.p, d_dout.p, d_ids.p, b, s, h, vocab, ws.ws());
  lattice::embedding_backward(dwte_cpu.data(), dwpe_cpu.data(), dout.data(), ids.data(), b, s, h);
  compare_bits("embedding dwte, runs of 128", "bwd", dwte_cpu, d_dwte.get());
  const int64_t v0 = vocab / 2, v_local = vocab - v0;
  Dev<float> d_shard(std::vector<float>(dwte0.begin() + v0 * h, dwte0.end()));
  Scratch sws(lattice::cuda::embedding_shard_backward_workspace_bytes(N, v_local));
  lattice::cuda::embedding_shard_backward(d_shard.p, d_dout.p, d_ids.p, v0, v_local, N, h, sws.ws());
  compare_bits("embedding_shard dwte, runs of 128", "bwd",
               std::vector<float>(dwte_cpu.begin() + v0 * h, dwte_cpu.end()), d_shard.get());
}

void check_layernorm() {
  const int64_t N = 1024, C = 768;
  const auto x = randn(size_t(N * C), 2.0f), w = randn(static_cast<size_t>(C)), bias = randn(static_cast<size_t>(C));
  std::vector<float> y(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  lattice::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
  Dev<float> d_x(x), d_w(w), d_b(bias), d_y(y.size()), d_mean(mean.size()), d_rstd(rstd.size());
  lattice::cuda::layernorm_forward(d_y.p, d_mean.p, d_rstd.p, d_x.p, d_w.p, d_b.p, N, C);
  compare("layernorm out", "fwd", y, d_y.get());
  compare("layernorm mean", "fwd", mean, d_mean.get());
  compare("layernorm rstd", "fwd", rstd, d_rstd.get());

  const auto dy = randn(y.size());
  auto dx = randn(x.size(), 0.1f), dw = randn(size_t(C), 0.1f), db = randn(size_t(C), 0.1f);
  Dev<float> d_dy(dy), d_dx(dx), d_dw(dw), d_db(db);
  d_mean.upload(mean), d_rstd.upload(rstd);  // the CPU's statistics: the backward alone is compared
  Scratch ws(lattice::cuda::layernorm_backward_workspace_bytes(N, C));
  auto run = [&] {
    d_dx.upload(dx), d_dw.upload(dw), d_db.upload(db);
    lattice::cuda::layernorm_backward(d_dx.p, d_dw.p, d_db.p, d_dy.p, d_x.p, d_w.p, d_mean.p, d_rstd.p, N, C, ws.ws());
    return std::vector<std::vector<float>>{d_dx.get(), d_dw.get(), d_db.get()};
  };
  const auto g = run();
  compare_repeat("layernorm dweight", "bwd", g[1], run()[1]);
  lattice::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                              N, C);
  compare("layernorm dinp", "bwd", dx, g[0]);
  compare("layernorm dweight", "bwd", dw, g[1]);
  compare("layernorm dbias", "bwd", db, g[2]);
  // The other shapes, forward and backward: rows wider than the kernels that hold a row in registers
  // take (the forward's column loops, the backward's two passes), and a last 64-row chunk cut short
  // with a narrow row (lanes past its end in the register kernels).
  for (const auto& [n2, c2] : {std::pair<int64_t, int64_t>{130, 1536}, std::pair<int64_t, int64_t>{1000, 100}}) {
    const auto x2 = randn(size_t(n2 * c2), 2.0f), w2 = randn(size_t(c2)), b2 = randn(size_t(c2)), dy2 = randn(x2.size());
    std::vector<float> y2(x2.size()), m2(static_cast<size_t>(n2)), r2(static_cast<size_t>(n2));
    lattice::layernorm_forward(y2.data(), m2.data(), r2.data(), x2.data(), w2.data(), b2.data(), n2, c2);
    auto dx2 = randn(x2.size(), 0.1f), dw2 = randn(size_t(c2), 0.1f), db2 = randn(size_t(c2), 0.1f);
    Dev<float> e_x(x2), e_w(w2), e_dy(dy2), e_m(m2), e_r(r2), e_dx(dx2), e_dw(dw2), e_db(db2);
    const std::string shape = " " + std::to_string(n2) + "x" + std::to_string(c2);
    {
      Dev<float> e_b(b2), e_y(y2.size()), e_mean(m2.size()), e_rstd(r2.size());
      lattice::cuda::layernorm_forward(e_y.p, e_mean.p, e_rstd.p, e_x.p, e_w.p, e_b.p, n2, c2);
      compare("layernorm out" + shape, "fwd", y2, e_y.get());
      compare("layernorm mean" + shape, "fwd", m2, e_mean.get());
      compare("layernorm rstd" + shape, "fwd", r2, e_rstd.get());
    }
    Scratch ws2(lattice::cuda::layernorm_backward_workspace_bytes(n2, c2));
    lattice::cuda::layernorm_backward(e_dx.p, e_dw.p, e_db.p, e_dy.p, e_x.p, e_w.p, e_m.p, e_r.p, n2, c2, ws2.ws());
    lattice::layernorm_backward(dx2.data(), dw2.data(), db2.data(), dy2.data(), x2.data(), w2.data(), m2.data(),
                                r2.data(), n2, c2);
    compare("layernorm dinp" + shape, "bwd", dx2, e_dx.get());
    compare("layernorm dweight" + shape, "bwd", dw2, e_dw.get());
    compare("layernorm dbias" + shape, "bwd", db2, e_db.get());
  }
}

void check_gelu() {
  const int64_t n = 1 << 22;
  const auto x = randn(size_t(n), 3.0f), dy = randn(static_cast<size_t>(n));
  std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  lattice::gelu_forward(y.data(), x.data(), n);
  lattice::gelu_backward(dx.data(), x.data(), dy.data(), n);
  Dev<float> d_x(x), d_dy(dy), d_y(static_cast<size_t>(n)), d_dx(static_cast<size_t>(n));
  lattice::cuda::gelu_forward(d_y.p, d_x.p, n);
  lattice::cuda::gelu_backward(d_dx.p, d_x.p, d_dy.p, n);
  compare("gelu", "fwd", y, d_y.get());
  compare("gelu", "bwd", dx, d_dx.get());
}

void check_bias_residual() {
  const int64_t N = 2048, out = 3072;
  auto y = randn(static_cast<size_t>(N * out));
  const auto bias = randn(static_cast<size_t>(out));
  Dev<float> d_y(y), d_bias(bias);
  lattice::cuda::bias_add_rows(d_y.p, d_bias.p, N, out);
  for (int64_t r = 0; r < N; ++r)  // model/transformer_layer.cpp's residual_dropout_add, its bias loop
    for (int64_t i = 0; i < out; ++i) y[size_t(r * out + i)] += bias[size_t(i)];
  compare("bias_add_rows", "fwd", y, d_y.get());

  const auto dy = randn(static_cast<size_t>(N * out));
  auto db = randn(size_t(out), 0.1f);
  Dev<float> d_dy(dy), d_db(db);
  Scratch ws(lattice::cuda::bias_backward_workspace_bytes(N, out));
  lattice::cuda::bias_backward(d_db.p, d_dy.p, N, out, ws.ws());
  const auto g = d_db.get();
  d_db.upload(db);
  lattice::cuda::bias_backward(d_db.p, d_dy.p, N, out, ws.ws());
  compare_repeat("bias_backward", "bwd", g, d_db.get());
  lattice::bias_backward(db.data(), dy.data(), N, out);
  compare("bias_backward", "bwd", db, g);

  auto x = randn(static_cast<size_t>(N * out));
  Dev<float> d_x(x);
  lattice::cuda::residual_add(d_x.p, d_dy.p, N * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] += dy[i];  // residual_dropout_add's last loop
  compare("residual_add", "fwd", x, d_x.get());
  // One element a thread (pointers one element in): the same single rounding, bit for bit the CPU's.
  lattice::cuda::residual_add(d_x.p + 1, d_dy.p + 1, N * out - 1);
  for (size_t i = 1; i < x.size(); ++i) x[i] += dy[i];
  compare_bits(std::string("residual_add one a thread"), "fwd", x, d_x.get());
}

void check_dropout() {
  const int64_t n = (1 << 20) + 13;
  const float p = 0.1f;
  const lattice::DropoutStream st{0x5eedULL, 41, 7, lattice::DropoutSite::mlp_residual};
  for (uint64_t first : {uint64_t(0), uint64_t(3), (uint64_t(1) << 32) * 5 + 1}) {  // odd starts, a high counter word
    std::vector<uint8_t> mask(static_cast<size_t>(n));
    lattice::dropout_mask_fill(mask.data(), st, first, n, p);
    Dev<uint8_t> d_mask(static_cast<size_t>(n));
    lattice::cuda::dropout_mask_fill(d_mask.p, st, first, n, p);
    compare_mask("dropout first=" + std::to_string(first), "fwd", mask, d_mask.get());
  }
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  lattice::dropout_mask_fill(mask.data(), st, 0, n, p);
  const auto x = randn(static_cast<size_t>(n)), dy = randn(static_cast<size_t>(n));
  std::vector<float> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  lattice::dropout_forward(y.data(), x.data(), mask.data(), n, p);
  lattice::dropout_backward(dx.data(), dy.data(), mask.data(), n, p);
  Dev<uint8_t> d_mask(mask);
  Dev<float> d_x(x), d_dy(dy), d_y(static_cast<size_t>(n)), d_dx(static_cast<size_t>(n));
  lattice::cuda::dropout_forward(d_y.p, d_x.p, d_mask.p, n, p);
  lattice::cuda::dropout_backward(d_dx.p, d_dy.p, d_mask.p, n, p);
  compare("dropout", "fwd", y, d_y.get());
  compare("dropout", "bwd", dx, d_dx.get());
}

void check_softmax() {
  const int64_t local_heads = 6, batch = 4 * local_heads, s = 256, n = batch * s * s;
  auto scores = randn(size_t(n), 2.0f);
  std::vector<float> probs(static_cast<size_t>(n));
  lattice::softmax_causal_forward(probs.data(), scores.data(), batch, s);
  Dev<float> d_scores(scores), d_probs(static_cast<size_t>(n));
  lattice::cuda::softmax_causal_forward(d_probs.p, d_scores.p, batch, s);
  compare("softmax_causal", "fwd", probs, d_probs.get());

  lattice::AttentionDropout drop;
  drop.stream = {0xabcdef12345ULL, 9, 2, lattice::DropoutSite::attention};
  drop.p = 0.1f, drop.first_row = 3, drop.heads_total = 12, drop.head0 = 6;  // the second of two TP ranks
  for (DType dt : {DType::fp32, DType::bf16}) {
    const size_t elem = dt == DType::fp32 ? 4 : 2;
    std::vector<char> p_cpu(size_t(n) * elem), dr_cpu(size_t(n) * elem);
    std::vector<uint8_t> mask(static_cast<size_t>(n));
    lattice::softmax_dropout_forward(p_cpu.data(), mask.data(), dr_cpu.data(), dt, scores.data(), local_heads, batch, s,
                                     drop);
    Dev<char> d_p(p_cpu.size()), d_dr(dr_cpu.size());
    Dev<uint8_t> d_mask(mask.size());
    lattice::cuda::softmax_dropout_forward(d_p.p, d_mask.p, d_dr.p, dt, d_scores.p, local_heads, batch, s, drop);
    const auto g_p = d_p.get(), g_dr = d_dr.get();
    compare_mask("softmax_dropout", "fwd", mask, d_mask.get());
    if (dt == DType::fp32) {
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n)), d(static_cast<size_t>(n));
      std::memcpy(a.data(), p_cpu.data(), p_cpu.size()), std::memcpy(b.data(), g_p.data(), g_p.size());
      std::memcpy(c.data(), dr_cpu.data(), dr_cpu.size()), std::memcpy(d.data(), g_dr.data(), g_dr.size());
      compare("softmax_dropout probs", "fwd", a, b);
      compare("softmax_dropout dropped", "fwd", c, d);
    } else {
      std::vector<uint16_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n)), d(static_cast<size_t>(n));
      std::memcpy(a.data(), p_cpu.data(), p_cpu.size()), std::memcpy(b.data(), g_p.data(), g_p.size());
      std::memcpy(c.data(), dr_cpu.data(), dr_cpu.size()), std::memcpy(d.data(), g_dr.data(), g_dr.size());
      compare_bf16("softmax_dropout probs", "fwd", a, b);
      compare_bf16("softmax_dropout dropped", "fwd", c, d);
    }
  }

  {  // s = 77, not a multiple of 4: the kernel's one-column form (s = 256 above takes four at a time)
    const int64_t s7 = 77, n7 = batch * s7 * s7;
    const auto x7 = randn(size_t(n7), 2.0f);
    std::vector<float> p7(static_cast<size_t>(n7)), dr7(static_cast<size_t>(n7));
    std::vector<uint8_t> m7(static_cast<size_t>(n7));
    lattice::softmax_dropout_forward(p7.data(), m7.data(), dr7.data(), DType::fp32, x7.data(), local_heads, batch, s7,
                                     drop);
    Dev<float> d_x7(x7), d_p7(p7.size()), d_dr7(dr7.size());
    Dev<uint8_t> d_m7(m7.size());
    lattice::cuda::softmax_dropout_forward(d_p7.p, d_m7.p, d_dr7.p, DType::fp32, d_x7.p, local_heads, batch, s7, drop);
    compare_mask("softmax_dropout s77", "fwd", m7, d_m7.get());
    compare("softmax_dropout s77 probs", "fwd", p7, d_p7.get());
    compare("softmax_dropout s77 dropped", "fwd", dr7, d_dr7.get());
  }

  const auto dprobs = randn(static_cast<size_t>(n));
  std::vector<float> dscores(static_cast<size_t>(n));
  lattice::softmax_causal_backward(dscores.data(), dprobs.data(), probs.data(), batch, s);
  Dev<float> d_dprobs(dprobs), d_dscores(static_cast<size_t>(n));
  d_probs.upload(probs);
  lattice::cuda::softmax_causal_backward(d_dscores.p, d_dprobs.p, d_probs.p, batch, s);
  const auto g = d_dscores.get();
  compare("softmax_causal", "bwd", dscores, g);
  d_dscores.poison();
  lattice::cuda::softmax_causal_backward(d_dscores.p, d_dprobs.p, d_probs.p, batch, s);
  compare_repeat("softmax_causal", "bwd", g, d_dscores.get());
}

// The cross-entropy's probabilities exactly for the exponentials both kernels take (fast_exp of x minus
// the row's max, in float), normalized by their sum in double. The CPU kernel's own fp32 sum of 50,257
// of them (its vector lanes, then across) strays from this by up to 1.1e-5 of max|p| on some draws
// (this check's notes, 2026-11-29: 3.0e-6, 5.8e-6, 1.1e-5, 2.7e-6 at seeds 1234, 1, 5, 7), so a device
// within 1e-5 of the exact form can sit 2e-5 from the CPU's: the probabilities are held to 1e-5 of this
// form, and their distance from the CPU kernel is a note beside the CPU's own.
std::vector<float> ce_probs_exact(const std::vector<float>& logits, int64_t N, int64_t V, int64_t Vp) {
  std::vector<float> p(logits.size(), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits.data() + n * Vp;
    float mx = x[0];
    for (int64_t j = 1; j < V; ++j) mx = x[j] > mx ? x[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += double(lattice::fast_exp(x[j] - mx));
    for (int64_t j = 0; j < V; ++j) p[size_t(n * Vp + j)] = float(double(lattice::fast_exp(x[j] - mx)) / sum);
  }
  return p;
}
void compare_ce_probs(const std::string& name, const std::vector<float>& exact, const std::vector<float>& cpu,
                      const std::vector<float>& got) {
  compare(name + " (exact sum)", "fwd", exact, got);
  std::printf("  note %s: %.3e of max|p| from the CPU kernel's, whose own fp32 sum is %.3e from the exact\n",
              name.c_str(), diff_of(cpu, got).rel, diff_of(exact, cpu).rel);
}

void check_cross_entropy() {
  // On the host simulation fewer rows (an odd count: a last partial group where kernels take rows in
  // groups), at the same widths: at 512 rows these checks took 33 s of the simulation's 120.
  const int64_t N = kHostSim ? 67 : 512, V = 50257, Vp = 50304;
  const auto logits = randn(size_t(N * Vp), 3.0f);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (auto& t : targets) t = tok(rng);
  std::vector<float> probs = logits, losses(static_cast<size_t>(N));
  lattice::cross_entropy_forward(probs.data(), losses.data(), targets.data(), N, V, Vp);
  const auto exact = ce_probs_exact(logits, N, V, Vp);
  Dev<int32_t> d_t(targets);
  {
    Dev<float> d_x(logits), d_loss(static_cast<size_t>(N));
    Scratch ws(lattice::cuda::cross_entropy_workspace_bytes(N));
    lattice::cuda::cross_entropy_forward(d_x.p, d_loss.p, d_t.p, N, V, Vp, ws.ws());
    compare_ce_probs("cross_entropy probs", exact, probs, d_x.get());
    compare("cross_entropy losses", "fwd", losses, d_loss.get());
  }
  // The one-pass form (row in shared memory) against the three kernels it stands for, bit for bit: at
  // GPT-2's vocabulary (past the default 48 KiB of shared memory), at the sizes around that default
  // (the static reduction scratch counts too), under it with padding, with no real column, and with
  // rows of an odd width (a column a step where the others take four: past 48 KiB too, after the
  // four-column form raised its own limit) and of a width not a multiple of 8 (the bf16 logits' form
  // with the row in bf16 takes eight columns a step).
  struct CeCase {
    int64_t rows, real, pad;
  };
  const CeCase ce_cases[] = {{N, V, Vp},       {8, 12287, 12287}, {64, 12280, 12288}, {64, 12000, 12160},
                             {96, 1000, 1024}, {8, 0, 256},       {16, 1001, 1003},   {16, 1000, 1004}};
  for (const CeCase& c : ce_cases) {
    const int64_t rows_n = c.rows, v_real = c.real, v_pad = c.pad;
    const size_t rows = size_t(rows_n);
    const auto x = randn(rows * size_t(v_pad), 3.0f);
    std::vector<int32_t> tg(rows);
    for (size_t n = 0; n < rows; ++n)  // some targets in the padding or past it: no target logit
      tg[n] = int32_t(n % 7 == 3 ? v_real + int64_t(n % 2) * v_pad : int64_t(n * 7919) % std::max<int64_t>(1, v_real));
    Dev<int32_t> dt(tg);
    Dev<float> one(x), three(x), l1(rows), l3(rows), m1(rows), m3(rows), s1(rows), s3(rows), t1(rows), t3(rows);
    lattice::cuda::ce_shard_max_target(m3.p, t3.p, three.p, dt.p, 0, v_pad, v_real, rows_n);
    lattice::cuda::ce_shard_exp_sum(s3.p, three.p, m3.p, v_pad, v_real, rows_n);
    lattice::cuda::ce_shard_normalize(three.p, l3.p, m3.p, s3.p, t3.p, v_pad, v_real, rows_n);
    lattice::cuda::ce_whole_forward(one.p, l1.p, m1.p, s1.p, t1.p, dt.p, v_pad, v_real, rows_n);
    const std::string name = std::string(lattice::cuda::ce_whole_forward_fused(v_pad) ? "ce_whole_forward "
                                                                                       : "ce_whole_forward (3 kernels) ") +
                             std::to_string(v_real) + "/" + std::to_string(v_pad);
    // The statistics of the form under test (l1, m1, s1, t1) against the reference's (l3 …).
    const auto compare_stats = [&](const std::string& label) {
      compare_bits(label + " losses", "fwd", l3.get(), l1.get());
      compare_bits(label + " max", "fwd", m3.get(), m1.get());
      compare_bits(label + " sum", "fwd", s3.get(), s1.get());
      compare_bits(label + " target", "fwd", t3.get(), t1.get());
    };
    compare_bits(name + " probs", "fwd", three.get(), one.get());
    compare_stats(name);
    // The bf16 logits' forms (the head keeps the GEMM's bf16 output; kernels/bf16_fused.hpp) against
    // widening them and the fp32 form: the statistics and losses of the one-pass kernel and of the
    // vocabulary-parallel pieces, and the gradient made again from them against the fp32
    // probabilities' gradient narrowed, all bit for bit.
    const auto x16 = narrowed(x);
    const auto x16_values = widened(x16);
    Dev<uint16_t> d_x16(x16);
    Dev<float> wide(x16_values);
    lattice::cuda::ce_whole_forward(wide.p, l3.p, m3.p, s3.p, t3.p, dt.p, v_pad, v_real, rows_n);
    const auto poison_stats = [&] { l1.poison(), m1.poison(), s1.poison(), t1.poison(); };
    poison_stats();
    lattice::cuda::ce_whole_forward_bf16(d_x16.p, l1.p, m1.p, s1.p, t1.p, dt.p, v_pad, v_real, rows_n);
    compare_stats(name + " bf16 logits");
    poison_stats();
    lattice::cuda::ce_shard_max_target_bf16(m1.p, t1.p, d_x16.p, dt.p, 0, v_pad, v_real, rows_n);
    lattice::cuda::ce_shard_exp_sum_bf16(s1.p, d_x16.p, m1.p, v_pad, v_real, rows_n);
    lattice::cuda::ce_row_losses(l1.p, m1.p, s1.p, t1.p, rows_n);
    compare_stats("ce pieces bf16 logits " + std::to_string(v_real) + "/" + std::to_string(v_pad));
    {  // the first piece of a shard not at column 0 (v0 = 5: the targets taken with that offset)
      Dev<float> wide_again(x16_values);
      m1.poison(), t1.poison();
      lattice::cuda::ce_shard_max_target(m3.p, t3.p, wide_again.p, dt.p, 5, v_pad, v_real, rows_n);
      lattice::cuda::ce_shard_max_target_bf16(m1.p, t1.p, d_x16.p, dt.p, 5, v_pad, v_real, rows_n);
      compare_bits("ce pieces bf16 logits, v0 5, max", "fwd", m3.get(), m1.get());
      compare_bits("ce pieces bf16 logits, v0 5, target", "fwd", t3.get(), t1.get());
    }
    const float scale = 1.0f / float(rows_n);
    Dev<float> d32(x.size());
    Dev<uint16_t> staged(x.size()), again(x.size());
    lattice::cuda::ce_shard_backward(d32.p, wide.p, dt.p, 0, v_pad, rows_n, scale);
    lattice::cuda::to_bf16(d32.p, staged.p, int64_t(x.size()));
    lattice::cuda::ce_shard_backward_bf16(again.p, d_x16.p, m3.p, s3.p, dt.p, 0, v_pad, v_real, rows_n, scale);
    compare_bits("ce_shard_backward_bf16 from bf16 logits " + std::to_string(v_real) + "/" + std::to_string(v_pad),
                 "bwd", staged.get(), again.get());
  }
  // Vocabulary-parallel: two shards of Vp/2 columns, each rank's pieces on the device, the all-reduces
  // done here on the host (max, sums), against the one-rank CPU kernel.
  const int64_t vl = Vp / 2;
  std::vector<float> mx(size_t(N), -INFINITY), tl(size_t(N), 0.0f), sum(size_t(N), 0.0f), got_probs(static_cast<size_t>(N * Vp));
  std::vector<float> got_losses;
  std::vector<std::vector<float>> shard_max(2), shard_tl(2), shard_sum(2);
  std::vector<Dev<float>*> shards;
  for (int r = 0; r < 2; ++r) {
    std::vector<float> part(static_cast<size_t>(N * vl));
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(logits.begin() + n * Vp + r * vl, vl, part.begin() + n * vl);
    shards.push_back(new Dev<float>(part));
  }
  Dev<float> d_max(static_cast<size_t>(N)), d_tl(static_cast<size_t>(N)), d_sum(static_cast<size_t>(N)), d_loss(static_cast<size_t>(N));
  auto real_of = [&](int r) { return std::max<int64_t>(0, std::min(vl, V - r * vl)); };
  for (int r = 0; r < 2; ++r) {
    lattice::cuda::ce_shard_max_target(d_max.p, d_tl.p, shards[size_t(r)]->p, d_t.p, r * vl, vl, real_of(r), N);
    const auto m = d_max.get(), t = d_tl.get();
    for (int64_t n = 0; n < N; ++n) mx[size_t(n)] = std::max(mx[size_t(n)], m[size_t(n)]), tl[size_t(n)] += t[size_t(n)];
  }
  d_max.upload(mx), d_tl.upload(tl);
  for (int r = 0; r < 2; ++r) {
    lattice::cuda::ce_shard_exp_sum(d_sum.p, shards[size_t(r)]->p, d_max.p, vl, real_of(r), N);
    const auto s = d_sum.get();
    for (int64_t n = 0; n < N; ++n) sum[size_t(n)] += s[size_t(n)];
  }
  d_sum.upload(sum);
  for (int r = 0; r < 2; ++r) {
    lattice::cuda::ce_shard_normalize(shards[size_t(r)]->p, d_loss.p, d_max.p, d_sum.p, d_tl.p, vl, real_of(r), N);
    const auto part = shards[size_t(r)]->get();
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(part.begin() + n * vl, vl, got_probs.begin() + n * Vp + r * vl);
    if (r == 0) got_losses = d_loss.get();
  }
  compare_ce_probs("cross_entropy vocab_parallel probs", exact, probs, got_probs);
  compare("cross_entropy vocab_parallel losses", "fwd", losses, got_losses);

  const float scale = 1.0f / float(N);
  std::vector<float> dlogits(probs.size());
  lattice::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, Vp, scale);
  Dev<float> d_probs(probs), d_dl(probs.size());
  lattice::cuda::cross_entropy_backward(d_dl.p, d_probs.p, d_t.p, N, Vp, scale);
  compare("cross_entropy", "bwd", dlogits, d_dl.get());
  std::vector<float> got(static_cast<size_t>(N * Vp));
  for (int r = 0; r < 2; ++r) {  // the shards' backward, in place (dlogits aliasing probs)
    lattice::cuda::ce_shard_backward(shards[size_t(r)]->p, shards[size_t(r)]->p, d_t.p, r * vl, vl, N, scale);
    const auto part = shards[size_t(r)]->get();
    for (int64_t n = 0; n < N; ++n) std::copy_n(part.begin() + n * vl, vl, got.begin() + n * Vp + r * vl);
    delete shards[size_t(r)];
  }
  compare("cross_entropy vocab_parallel", "bwd", dlogits, got);
  // The gradient from kept bf16 logits against the fp32 kernel on the widened logits' probabilities
  // then to_bf16, on the device, bit for bit: the whole vocabulary, and the second of two shards (v0 =
  // vl: half the targets outside it) with the whole rows' maximum and sum (the all-reduced ones).
  {
    const auto l16 = narrowed(logits);
    const auto lw = widened(l16);
    const size_t rows = static_cast<size_t>(N);
    Dev<float> wp(lw), wl(rows), wm(rows), wsum(rows), wt(rows);
    lattice::cuda::ce_whole_forward(wp.p, wl.p, wm.p, wsum.p, wt.p, d_t.p, Vp, V, N);
    const auto wprobs = wp.get();
    for (const int64_t v0 : {int64_t(0), vl}) {
      const int64_t width = v0 ? vl : Vp, real = v0 ? real_of(1) : V;
      std::vector<float> part(size_t(N * width));
      std::vector<uint16_t> part16(part.size());
      for (int64_t n = 0; n < N; ++n) {
        std::copy_n(wprobs.begin() + n * Vp + v0, width, part.begin() + n * width);
        std::copy_n(l16.begin() + n * Vp + v0, width, part16.begin() + n * width);
      }
      Dev<float> p(part), d32(part.size());
      Dev<uint16_t> lg(part16), staged(part.size()), fused(part.size());
      lattice::cuda::ce_shard_backward(d32.p, p.p, d_t.p, v0, width, N, scale);
      lattice::cuda::to_bf16(d32.p, staged.p, int64_t(part.size()));
      lattice::cuda::ce_shard_backward_bf16(fused.p, lg.p, wm.p, wsum.p, d_t.p, v0, width, real, N, scale);
      compare_bits(v0 ? "ce_shard_backward_bf16 shard 1 of 2" : "ce_shard_backward_bf16", "bwd", staged.get(),
                   fused.get());
    }
  }
  {  // Rows of V = 50257 columns (not a multiple of 4): the one-column-a-thread form, against the CPU.
    std::vector<float> narrow(size_t(N * V)), ref(size_t(N * V));
    for (int64_t n = 0; n < N; ++n) std::copy_n(probs.begin() + n * Vp, V, narrow.begin() + n * V);
    lattice::cross_entropy_backward(ref.data(), narrow.data(), targets.data(), N, V, scale);
    Dev<float> p(narrow), d(narrow.size());
    lattice::cuda::ce_shard_backward(d.p, p.p, d_t.p, 0, V, N, scale);
    compare("cross_entropy odd width", "bwd", ref, d.get());
  }
}

void check_optimizer() {
  const int64_t n = (1 << 22) + 5;
  auto m = randn(size_t(n), 0.01f), v = randn(size_t(n), 0.01f), w = randn(size_t(n), 0.02f);
  for (float& x : v) x = x * x;
  const auto g = randn(size_t(n), 0.01f);
  const lattice::AdamWScalars a = lattice::adamw_scalars(0.9, 0.95, 1e-8, 6e-4, 17);
  const float decay = float(1.0 - 6e-4 * 0.1);
  Dev<float> d_m(m), d_v(v), d_w(w), d_g(g);
  {  // The four-wide kernel and the one-a-thread one are one element math: the same bits. Elements 1 …
     // of the arrays, at their own aligned copies (four-wide) and through pointers one element in
     // (every pointer misaligned: one a thread), with the bf16 copy and a clipping factor.
    Dev<float> m4(past_first(m)), v4(past_first(v)), w4(past_first(w)), g4(past_first(g)), m1(m), v1(v), w1(w);
    Dev<uint16_t> h4{size_t(n - 1)}, h1{size_t(n)};
    lattice::cuda::adamw_update_bf16(m4.p, v4.p, w4.p, h4.p, g4.p, n - 1, decay, a, 0.5f);
    lattice::cuda::adamw_update_bf16(m1.p + 1, v1.p + 1, w1.p + 1, h1.p + 1, d_g.p + 1, n - 1, decay, a, 0.5f);
    compare_bits(std::string("adamw four-wide = one a thread w"), "upd", w4.get(), past_first(w1.get()));
    compare_bits(std::string("adamw four-wide = one a thread m"), "upd", m4.get(), past_first(m1.get()));
    compare_bits(std::string("adamw four-wide = one a thread v"), "upd", v4.get(), past_first(v1.get()));
    compare_bits(std::string("adamw four-wide = one a thread w16"), "upd", h4.get(), past_first(h1.get()));
  }
  {  // Every tensor in one launch (the optimizer's call) against one call a segment: the same bits.
     // Segments of 0, 1, 3, 768 and 5003 elements and the rest, at offsets that leave some pointers
     // misaligned (one a thread) and some aligned (four-wide), with and without the bf16 copy, two
     // decays and two clipping factors.
    Dev<float> mb(m), vb(v), wb(w), ms(m), vs(v), ws1(w);
    Dev<uint16_t> hb{size_t(n)}, hs{size_t(n)};
    const int64_t lengths[] = {0, 1, 3, 768, 5003, n - 5776};
    std::vector<lattice::AdamWSegment> batch, single;
    int64_t at = 0;
    for (size_t i = 0; i < 6; ++i) {
      const int64_t len = lengths[i];
      const bool copy16 = i % 2 == 0;
      const float dec = i % 3 == 0 ? 1.0f : decay, scale = i == 4 ? 0.25f : 1.0f;
      batch.push_back({mb.p + at, vb.p + at, wb.p + at, copy16 ? hb.p + at : nullptr, d_g.p + at, len, dec, scale});
      single.push_back({ms.p + at, vs.p + at, ws1.p + at, copy16 ? hs.p + at : nullptr, d_g.p + at, len, dec, scale});
      at += len;
    }
    Scratch sws(lattice::cuda::adamw_segments_workspace_bytes(batch.size()));
    lattice::cuda::adamw_update_segments(batch.data(), batch.size(), a, sws.ws());
    for (const lattice::AdamWSegment& s : single)
      lattice::cuda::adamw_update_bf16(s.m, s.v, s.w, s.w16, s.grad, s.n, s.decay, a, s.grad_scale);
    compare_bits(std::string("adamw_update_segments = one call a segment w"), "upd", ws1.get(), wb.get());
    compare_bits(std::string("adamw_update_segments = one call a segment m"), "upd", ms.get(), mb.get());
    compare_bits(std::string("adamw_update_segments = one call a segment v"), "upd", vs.get(), vb.get());
    compare_bits(std::string("adamw_update_segments = one call a segment w16"), "upd", hs.get(), hb.get());
  }
  lattice::cuda::adamw_update(d_m.p, d_v.p, d_w.p, d_g.p, n, decay, a);
  lattice::adamw_update(m.data(), v.data(), w.data(), g.data(), n, decay, a);
  compare("adamw m", "upd", m, d_m.get());
  compare("adamw v", "upd", v, d_v.get());
  compare("adamw w", "upd", w, d_w.get());

  const double ref = lattice::grad_sum_squares(g.data(), n);
  Dev<double> d_out(1);
  Scratch ws(lattice::cuda::grad_sum_squares_workspace_bytes());
  lattice::cuda::grad_sum_squares(d_out.p, d_g.p, n, ws.ws());
  const double got = d_out.get()[0];
  line("grad_sum_squares", "fwd", std::fabs(got - ref), std::fabs(got - ref) / ref, 1e-5);
  lattice::cuda::grad_sum_squares(d_out.p, d_g.p, n, ws.ws());
  const double again = d_out.get()[0];
  line("grad_sum_squares [repeat]", "fwd", std::fabs(again - got), std::memcmp(&again, &got, 8) ? 1.0 : 0.0, 0.0);

  {  // All pieces at once (the global norm's call): an empty piece, one element, a bias, a piece off the
     // block size, and the whole gradient, each against the CPU's sum, then the same bits again.
    const int64_t lengths[] = {0, 1, 768, 5003, n};
    std::vector<lattice::GradPiece> pieces;
    int64_t at = 0;
    for (int64_t len : lengths) {
      pieces.push_back({len == n ? d_g.p : d_g.p + at, len});
      if (len != n) at += len;
    }
    Scratch pws(lattice::cuda::grad_sums_squares_workspace_bytes(pieces.size(), pieces.data()));
    Dev<double> d_sums(pieces.size());
    lattice::cuda::grad_sums_squares(d_sums.p, pieces.data(), pieces.size(), pws.ws());
    const auto sums = d_sums.get();
    double worst = 0.0;
    at = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const int64_t len = lengths[i];
      const double want = lattice::grad_sum_squares(g.data() + (len == n ? 0 : at), len);
      if (len != n) at += len;
      worst = std::max(worst, want == 0.0 ? std::fabs(sums[i]) : std::fabs(sums[i] - want) / want);
    }
    line("grad_sums_squares (5 pieces)", "fwd", worst, worst, 1e-5);
    d_sums.poison();
    lattice::cuda::grad_sums_squares(d_sums.p, pieces.data(), pieces.size(), pws.ws());
    compare_bits(std::string("grad_sums_squares (5 pieces) [repeat]"), "fwd", sums, d_sums.get());
  }

  std::vector<float> scaled = g;
  for (float& x : scaled) x *= 0.25f;  // optim's scale_grads
  lattice::cuda::scale_grads(d_g.p, n, 0.25f);
  compare("scale_grads", "fwd", scaled, d_g.get());
}

// bits_fingerprint (the GEMM tuner's test of equal bits) against the same sums made here, at lengths
// with each tail (0 to 3 bytes past the last whole word) and past one pass of its grid (65,536 words), on
// bytes with zero words among them; and one bit flipped (in the first word, a middle one, the tail) must
// change it. Its arithmetic is integer: the device's value is the host's exactly.
lattice::cuda::BitsFingerprint fingerprint_host(const std::vector<unsigned char>& b,
                                                const std::vector<unsigned char>* against = nullptr) {
  lattice::cuda::BitsFingerprint f;
  for (size_t i = 0; 4 * i < b.size(); ++i) {
    uint32_t w = 0, a = 0;
    std::memcpy(&w, &b[4 * i], std::min<size_t>(4, b.size() - 4 * i));
    if (against) std::memcpy(&a, &(*against)[4 * i], std::min<size_t>(4, b.size() - 4 * i));
    f.hash += lattice::cuda::bits_fingerprint_term(uint64_t(i), w);
    f.moved_words += w != a;
  }
  return f;
}
void check_bits_fingerprint() {
  Scratch ws(lattice::cuda::bits_fingerprint_workspace_bytes());
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t bytes : {size_t(0), size_t(1), size_t(3), size_t(4), size_t(6), size_t(1029), size_t(786434)}) {
    std::vector<unsigned char> h(bytes);
    for (size_t i = 0; i < bytes; ++i) h[i] = (i / 4) % 5 == 2 ? 0 : static_cast<unsigned char>(byte(rng));
    Dev<unsigned char> d(h);
    const auto got = lattice::cuda::bits_fingerprint(d.p, bytes, ws.ws());
    const bool same = got == fingerprint_host(h);
    const std::string name = "bits_fingerprint " + std::to_string(bytes) + " B";
    line(name + " [bits]", "fwd", same ? 0.0 : 1.0, same ? 0.0 : 1.0, 0.0);
    if (bytes == 0) continue;  // no bit to flip
    bool moved = true;
    for (size_t at : {size_t(0), bytes / 2, bytes - 1}) {
      auto flipped = h;
      flipped[at] ^= 0x10;
      d.upload(flipped);
      moved = moved && !(lattice::cuda::bits_fingerprint(d.p, bytes, ws.ws()) == got);
    }
    line(name + ", one bit flipped [moves]", "fwd", moved ? 0.0 : 1.0, moved ? 0.0 : 1.0, 0.0);
    // The words moved from another buffer's: h against h with every third word changed.
    auto other = h;
    for (size_t i = 0; i < bytes; ++i)
      if ((i / 4) % 3 == 1) other[i] = static_cast<unsigned char>(other[i] + 1 + (i % 4));
    Dev<unsigned char> d_other(other);
    d.upload(h);
    const bool same_moved =
        lattice::cuda::bits_fingerprint(d.p, bytes, ws.ws(), nullptr, d_other.p) == fingerprint_host(h, &other);
    line(name + ", words moved from another's [bits]", "fwd", same_moved ? 0.0 : 1.0, same_moved ? 0.0 : 1.0, 0.0);
  }
}

void check_bf16() {
  const int64_t n = (1 << 20) + 3;
  auto x = randn(size_t(n), 10.0f);
  x[0] = 1e-40f, x[1] = -1e-40f, x[2] = NAN, x[3] = INFINITY;  // subnormals, NaN, inf: the CPU's rules
  // The largest subnormal (flushed, not rounded up to the smallest normal), ties to even either way, and
  // the largest float (rounded up to inf), each with both signs.
  const uint32_t edges[] = {0x007fffffu, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00800000u};
  for (size_t i = 0; i < std::size(edges); ++i) {
    float f;
    std::memcpy(&f, &edges[i], 4);
    x[4 + 2 * i] = f, x[5 + 2 * i] = -f;
  }
  std::vector<uint16_t> h(static_cast<size_t>(n));
  lattice::to_bf16(x.data(), h.data(), n);
  Dev<float> d_x(x);
  Dev<uint16_t> d_h(static_cast<size_t>(n));
  lattice::cuda::to_bf16(d_x.p, d_h.p, n);
  const auto got = d_h.get();
  // Every value but the NaN to the CPU's bits; the NaN to a NaN (a GPU's cvt makes its payload
  // canonical, cuda/common.cuh's to_bf16_bits).
  size_t differ = 0;
  for (size_t i = 0; i < h.size(); ++i) differ += i != 2 && h[i] != got[i];
  const bool nan_kept = (got[2] & 0x7f80u) == 0x7f80u && (got[2] & 0x7fu) != 0;
  line("to_bf16 [bits]", "fwd", differ || !nan_kept ? 1.0 : 0.0, double(differ) / double(n), 0.0);
  {  // one element a thread (pointers one element in, misaligned for the four-wide kernel): the same bits
    Dev<uint16_t> d_h1(static_cast<size_t>(n));
    lattice::cuda::to_bf16(d_x.p + 1, d_h1.p + 1, n - 1);
    auto ref1 = past_first(h), got1 = past_first(d_h1.get());
    ref1[1] = got1[1] = 0;  // the NaN (x[2]), checked above
    compare_bits(std::string("to_bf16 one a thread"), "fwd", ref1, got1);
  }
  std::vector<uint16_t> hf(h.begin() + 14, h.end()), gf(got.begin() + 14, got.end());  // finite values
  compare_bf16("to_bf16", "fwd", hf, gf);
  std::vector<float> back(static_cast<size_t>(n));
  lattice::from_bf16(h.data(), back.data(), n);
  Dev<float> d_back(static_cast<size_t>(n));
  d_h.upload(h);
  lattice::cuda::from_bf16(d_h.p, d_back.p, n);
  const auto gb = d_back.get();
  line("from_bf16 [bits]", "fwd", 0.0, std::memcmp(back.data(), gb.data(), back.size() * 4) ? 1.0 : 0.0, 0.0);
}

// ---- GEMMs (cuda/gemm.hpp) against a double-precision loop ----
// ref = alpha·Σ_k op(A)[i,k]·op(B)[k,j] (+ bias[j]) (+ C's old value), in double over the very inputs
// the device reads (bf16 operands widened exactly). Tolerances (rel = max|Δ| / max|ref|):
//  - fp32, TF32 off: 1e-5. Each output is one fp32 dot product of K ≤ 320 unit-normal products; its
//    roundings, of random sign, add to about 2^-24·K/√2 ≈ 1.4e-5 absolute (partial sums of size √k),
//    ≈ 2e-7 of max|ref| ≈ 4√K ≈ 70 (blocked or split sums do better). The worst case, every rounding
//    one way (K·2^-24·Σ|a·b|, 6e-5 of max|ref|), is not what random inputs give.
//  - bf16 inputs, fp32 accumulation: 2^-7, the bf16 outputs' bound elsewhere in this program; the
//    inputs are the same bf16 values on both sides, so only the fp32 accumulation differs (the fp32
//    bound above), far inside it.
//  - TF32 (by explicit choice): 2^-7: TF32 keeps 10 mantissa bits of each input (bf16: 7), so the
//    product's relative error per term is below bf16's.
struct GemmCase {
  int64_t batch, M, N, K;
  bool ta, tb, acc, bias;
  float alpha;
};

std::vector<double> gemm_reference(const GemmCase& g, const std::vector<float>& A, const std::vector<float>& B,
                                   const std::vector<float>& C0, const std::vector<float>& bias) {
  std::vector<double> ref(size_t(g.batch * g.M * g.N));
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        double sum = 0.0;
        for (int64_t k = 0; k < g.K; ++k) {
          const double a = A[size_t(b * g.M * g.K + (g.ta ? k * g.M + i : i * g.K + k))];
          const double bb = B[size_t(b * g.K * g.N + (g.tb ? j * g.K + k : k * g.N + j))];
          sum += a * bb;
        }
        double v = double(g.alpha) * sum;
        if (g.bias) v += bias[size_t(j)];
        const size_t at = size_t((b * g.M + i) * g.N + j);
        if (g.acc) v += C0[at];
        ref[at] = v;
      }
  return ref;
}

std::string gemm_name(const char* kind, const GemmCase& g) {
  char buf[96];  // snprintf: g++ 12's -Wrestrict misfires on chains of std::string operator+
  std::snprintf(buf, sizeof buf, "gemm %s %c%c %lldx%lldx%lldx%lld%s%s%s", kind, g.ta ? 'T' : 'N', g.tb ? 'T' : 'N',
                (long long)g.batch, (long long)g.M, (long long)g.N, (long long)g.K, g.acc ? " +=" : "",
                g.bias ? " bias" : "", g.alpha != 1.0f ? " alpha" : "");
  return buf;
}

// A, B, C and the bias 16 bytes past a 256-byte boundary, as views into a larger buffer may lie,
// after the same call on aligned buffers: cuBLASLt must be told the lesser alignment (a plan chosen
// for 256 bytes may fail or misread; the host simulation's cuBLASLt stops at such a call).
template <class T>
std::vector<T> padded(const std::vector<T>& v, size_t pad) {
  std::vector<T> out(pad, T{});
  out.insert(out.end(), v.begin(), v.end());
  return out;
}
void check_gemm_offsets(lattice::cuda::GemmContext& ctx) {
  const GemmCase g{1, 256, 192, 128, false, false, true, true, 1.0f};  // accumulate with a bias
  const auto A = bf16_valued(randn(size_t(g.M * g.K))), B = bf16_valued(randn(size_t(g.K * g.N)));
  const auto C0 = randn(size_t(g.M * g.N)), bias = randn(size_t(g.N));
  const auto refd = gemm_reference(g, A, B, C0, bias);
  const std::vector<float> ref(refd.begin(), refd.end());
  const lattice::GemmShape shape{g.batch, g.M, g.N, g.K, g.ta, g.tb, g.alpha, g.acc};
  for (DType dt : {DType::fp32, DType::bf16}) {
    std::vector<uint16_t> Ah(A.size()), Bh(B.size());
    lattice::to_bf16(A.data(), Ah.data(), int64_t(A.size()));
    lattice::to_bf16(B.data(), Bh.data(), int64_t(B.size()));
    for (size_t pad : {size_t(0), size_t(4)}) {  // in floats: 16 bytes (8 bf16 values)
      Dev<float> dA(padded(A, pad)), dB(padded(B, pad)), dC(padded(C0, pad)), dbias(padded(bias, pad));
      Dev<uint16_t> dAh(padded(Ah, 2 * pad)), dBh(padded(Bh, 2 * pad));
      const lattice::GemmOperand a = dt == DType::bf16 ? lattice::GemmOperand{dAh.p + 2 * pad, DType::bf16}
                                                       : lattice::GemmOperand{dA.p + pad, DType::fp32};
      const lattice::GemmOperand b = dt == DType::bf16 ? lattice::GemmOperand{dBh.p + 2 * pad, DType::bf16}
                                                       : lattice::GemmOperand{dB.p + pad, DType::fp32};
      ctx.gemm(shape, a, b, dC.p + pad, dbias.p + pad);
      const auto all = dC.get();
      const std::vector<float> got(all.begin() + std::ptrdiff_t(pad), all.end());
      std::string name = gemm_name(dt == DType::bf16 ? "bf16" : "f32", g);
      name += pad ? ", operands 16 bytes off 256" : ", operands 256-byte aligned";
      compare(name, "fwd", ref, got, dt == DType::bf16 ? 1.0 / 128.0 : 1e-5);
    }
  }
}

void check_gemm() {
  lattice::cuda::GemmContext ctx;  // 32 MiB workspace, TF32 off
  ctx.set_tuning(false);           // the heuristic's first algorithm: the tuner has its own lines
  std::printf("lattice_cuda_check: cuBLASLt GEMM context, workspace %zu bytes\n", ctx.workspace_bytes());
  const GemmCase cases[] = {
      {1, 256, 384, 320, false, false, false, false, 1.0f},  // x·W
      {1, 200, 130, 96, true, false, false, false, 1.0f},    // sizes off any tile multiple
      {1, 128, 96, 200, false, true, false, false, 1.0f},    // dy·Wᵀ
      {3, 64, 80, 48, true, true, false, false, 1.0f},       // batched, both transposed
      {1, 256, 192, 128, false, false, true, true, 1.0f},    // accumulate with a bias
      {2, 96, 64, 32, false, false, false, true, 1.0f},      // batched, a bias on every matrix
      {6, 100, 100, 64, false, true, false, false, 0.125f},  // Q·Kᵀ/√dh
      {4, 100, 64, 100, false, false, true, false, 0.125f},  // dQ += alpha·dS·K
      {1, 320, 192, 256, true, false, true, false, 1.0f},    // dW += xᵀ·dy
  };
  for (const GemmCase& g : cases)
    for (DType dt : {DType::fp32, DType::bf16}) {
      auto A = randn(size_t(g.batch * g.M * g.K)), B = randn(size_t(g.batch * g.K * g.N));
      const auto C0 = randn(size_t(g.batch * g.M * g.N)), bias = randn(size_t(g.N));
      std::vector<uint16_t> Ah(A.size()), Bh(B.size());
      if (dt == DType::bf16) {  // the reference multiplies the bf16 values the device reads
        lattice::to_bf16(A.data(), Ah.data(), int64_t(A.size()));
        lattice::to_bf16(B.data(), Bh.data(), int64_t(B.size()));
        lattice::from_bf16(Ah.data(), A.data(), int64_t(A.size()));
        lattice::from_bf16(Bh.data(), B.data(), int64_t(B.size()));
      }
      const auto refd = gemm_reference(g, A, B, C0, bias);
      std::vector<float> ref(refd.begin(), refd.end());
      Dev<float> dA(A), dB(B), dbias(bias), dC(C0.size());
      Dev<uint16_t> dAh(Ah), dBh(Bh);
      if (g.acc) dC.upload(C0);  // else left NaN-poisoned: beta = 0 must not read it
      const lattice::GemmShape shape{g.batch, g.M, g.N, g.K, g.ta, g.tb, g.alpha, g.acc};
      const lattice::GemmOperand a = dt == DType::bf16 ? lattice::GemmOperand{dAh.p, DType::bf16}
                                                       : lattice::GemmOperand{dA.p, DType::fp32};
      const lattice::GemmOperand b = dt == DType::bf16 ? lattice::GemmOperand{dBh.p, DType::bf16}
                                                       : lattice::GemmOperand{dB.p, DType::fp32};
      ctx.gemm(shape, a, b, dC.p, g.bias ? dbias.p : nullptr);
      const auto got = dC.get();
      std::string name = gemm_name(dt == DType::bf16 ? "bf16" : "f32", g);
      if (g.bias) name += ctx.last_bias_in_epilogue() ? "(epi)" : "(add)";
      if (dt == DType::bf16)
        compare(name + " [bf16]", "fwd", ref, got, 1.0 / 128.0);
      else
        compare(name, "fwd", ref, got);
      if (!g.acc && g.alpha == 1.0f) {  // D as bf16 (linear_forward_bf16): within one bf16 rounding of
        // the product with the bias rounded to bf16 (the bias a bf16 D takes)
        std::vector<uint16_t> bias16(bias.size());
        lattice::to_bf16(bias.data(), bias16.data(), int64_t(bias.size()));
        const auto ref16d = gemm_reference(g, A, B, C0, bf16_valued(bias));
        const std::vector<float> ref16(ref16d.begin(), ref16d.end());
        Dev<uint16_t> d16(C0.size()), dbias16(bias16);
        if (ctx.gemm_bf16_out(shape, a, b, d16.p, g.bias ? dbias16.p : nullptr)) {
          std::vector<float> wide(C0.size());
          lattice::from_bf16(d16.get().data(), wide.data(), int64_t(wide.size()));
          compare(name + " bf16 D", "fwd", ref16, wide, 1.0 / 128.0);
        } else {
          std::printf("  note %s: cuBLASLt offers no bf16 D (linear_forward_bf16 narrows the fp32 product)\n",
                      name.c_str());
        }
      }
      if (&g == &cases[0] && dt == DType::fp32) {  // the same GEMM again: the same bits
        dC.poison();
        ctx.gemm(shape, a, b, dC.p, nullptr);
        compare_repeat(name, "fwd", got, dC.get());
        ctx.set_math(lattice::cuda::GemmMath::tf32);
        dC.poison();
        ctx.gemm(shape, a, b, dC.p, nullptr);
        compare(gemm_name("tf32", g), "fwd", ref, dC.get(), 1.0 / 128.0);
        ctx.set_math(lattice::cuda::GemmMath::fp32);
      }
    }
  check_gemm_offsets(ctx);
}

// The GeLU in cuBLASLt's epilogues (GemmContext::gemm_bf16_gelu, gemm_bf16_dgelu) against the double
// product of the same bf16 operands: each output is one bf16 rounding (2^-9 relative) of a function of the
// fp32 sum whose slope is at most 1.13 (the GeLU's; its gradient times a product), so 2^-7 of max|ref|
// holds with room. Which GeLU cuBLASLt computes, tanh or erf, is not told apart here: they differ by
// under 3e-4, far below a bf16 rounding at these magnitudes. An epilogue cuBLASLt does not offer is a
// note: linear_gelu_forward_bf16 and linear_backward_input_gelu_bf16 then make two calls.
void check_gemm_epilogues() {
  lattice::cuda::GemmContext ctx;
  ctx.set_tuning(false);  // the heuristic's first algorithm: the tuner has its own lines
  const int64_t M = 200, K = 96, N = 256;  // rows off any tile multiple; N a multiple of 8 (the aux's rule)
  const auto A = bf16_valued(randn(size_t(M * K))), B = bf16_valued(randn(size_t(K * N)));
  const auto bias = bf16_valued(randn(size_t(N))), pre = bf16_valued(randn(size_t(M * N), 3.0f));
  const std::vector<float> none;
  Dev<uint16_t> dA(narrowed(A)), dB(narrowed(B)), dbias(narrowed(bias)), dpre(narrowed(pre));
  Dev<uint16_t> out16{size_t(M * N)}, aux16{size_t(M * N)};
  const GemmCase fwd{1, M, N, K, false, false, false, true, 1.0f};
  const auto sum = gemm_reference(fwd, A, B, none, bias);
  std::vector<float> pre_ref(sum.begin(), sum.end()), act_ref(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) act_ref[i] = lattice::gelu_value(float(sum[i]));  // the tanh form
  const lattice::GemmShape fshape{1, M, N, K, false, false, 1.0f, false};
  const lattice::GemmOperand a{dA.p, DType::bf16}, b{dB.p, DType::bf16};
  if (ctx.gemm_bf16_gelu(fshape, a, b, out16.p, aux16.p, dbias.p)) {
    const auto act = out16.get(), kept = aux16.get();
    compare("gemm bf16 GELU_AUX_BIAS pre16", "fwd", pre_ref, widened(kept), 1.0 / 128.0);
    compare("gemm bf16 GELU_AUX_BIAS act16", "fwd", act_ref, widened(act), 1.0 / 128.0);
    out16.poison(), aux16.poison();
    ctx.gemm_bf16_gelu(fshape, a, b, out16.p, aux16.p, dbias.p);
    compare_repeat("gemm bf16 GELU_AUX_BIAS act16", "fwd", act, out16.get());
    compare_repeat("gemm bf16 GELU_AUX_BIAS pre16", "fwd", kept, aux16.get());
  } else {
    std::printf("  note gemm bf16 GELU_AUX_BIAS: cuBLASLt offers none (the GEMM, then gelu_forward16)\n");
  }
  // dx = dy·Wᵀ [M, N] with W stored [N, K] (linear_backward_input's shape), times gelu'(pre).
  const GemmCase bwd{1, M, N, K, false, true, false, false, 1.0f};
  const auto W = bf16_valued(randn(size_t(N * K)));
  const auto dx = gemm_reference(bwd, A, W, none, none);
  std::vector<float> g_ref(dx.size());
  for (size_t i = 0; i < dx.size(); ++i) g_ref[i] = float(dx[i] * double(lattice::gelu_grad(pre[i])));
  Dev<uint16_t> dW(narrowed(W));
  const lattice::GemmShape bshape{1, M, N, K, false, true, 1.0f, false};
  out16.poison();
  if (ctx.gemm_bf16_dgelu(bshape, a, {dW.p, DType::bf16}, out16.p, dpre.p)) {
    const auto g = out16.get();
    compare("gemm bf16 DGELU g16", "bwd", g_ref, widened(g), 1.0 / 128.0);
    out16.poison();
    ctx.gemm_bf16_dgelu(bshape, a, {dW.p, DType::bf16}, out16.p, dpre.p);
    compare_repeat("gemm bf16 DGELU g16", "bwd", g, out16.get());
  } else {
    std::printf("  note gemm bf16 DGELU: cuBLASLt offers none (the GEMM, then gelu_backward_narrow)\n");
  }
}

std::vector<unsigned char> noise_bytes(size_t n, size_t bytes, uint64_t seed);  // the timings' inputs (below)

// The GEMM tuner (GemmContext, cuda/gemm.hpp) against the heuristic's first algorithm, bit for bit, at
// the kinds of call a training step makes, GPT-2's FC1 shapes at 2048 tokens: the forward with the bias
// in the epilogue, a bf16 D with a bf16 bias, the GeLU's epilogue (D and its input matrix), the DGELU,
// the input gradient, and the accumulating calls (the weight gradient, the residual add), whose C the
// tuner must leave as it found it. Each twice: the first call (tuned on its own operands) and a second
// on other operands, where the kept algorithm must give the first one's bits too (the tuner's claim:
// the same bits on one call's data is the same order of sums). Then the choices, as notes.
struct TunerOperands {
  std::vector<unsigned char> x, w, dy, dy_in, pre, b32, b16, c_out, c_w;
};
void check_gemm_tuner() {
  using Ctx = lattice::cuda::GemmContext;
  Ctx tuned, first;
  tuned.set_tuning(true);
  first.set_tuning(false);
  // On the host simulation (its cuBLASLt: tests/host_sim/cublaslt_sim.cpp, a loop) fewer tokens and a
  // narrower input (32: half the suite's seconds of 64, and still the f32 case's operand bytes), with
  // a bf16 D still past the tuner's 2^21 values.
  const int64_t N = kHostSim ? 768 : 2048, in = kHostSim ? 32 : 768, out = 3072;
  const size_t n_in = size_t(N * in), n_out = size_t(N * out), n_w = size_t(in * out);
  TunerOperands ops[2];
  for (uint64_t pass = 0; pass < 2; ++pass) {
    const uint64_t k = 10 * pass + 11;
    ops[pass] = {noise_bytes(n_in, 2, k),          noise_bytes(n_w, 2, k + 1),
                 noise_bytes(n_out, 2, k + 2),     noise_bytes(n_in, 2, k + 3),
                 noise_bytes(n_out, 2, k + 4),     noise_bytes(size_t(out), 4, k + 5),
                 noise_bytes(size_t(out), 2, k + 6), noise_bytes(n_out, 4, k + 7),
                 noise_bytes(n_w, 4, k + 8)};
  }
  // The operands of a call on the device, and its outputs as `start` says (accumulating calls: C; else
  // NaN bytes).
  struct Call {
    Dev<unsigned char> x, w, dy, dy_in, pre, b32, b16;
    std::vector<std::unique_ptr<Dev<unsigned char>>> o;
    Call(const TunerOperands& t, const std::vector<std::vector<unsigned char>>& start)
        : x(t.x), w(t.w), dy(t.dy), dy_in(t.dy_in), pre(t.pre), b32(t.b32), b16(t.b16) {
      for (const auto& s0 : start) o.push_back(std::make_unique<Dev<unsigned char>>(s0));
    }
    lattice::GemmOperand X() const { return {x.p, DType::bf16}; }
    lattice::GemmOperand W() const { return {w.p, DType::bf16}; }
    lattice::GemmOperand DY() const { return {dy.p, DType::bf16}; }
    lattice::GemmOperand DY_IN() const { return {dy_in.p, DType::bf16}; }
    float* f(size_t i) const { return reinterpret_cast<float*>(o[i]->p); }
    uint16_t* h(size_t i) const { return reinterpret_cast<uint16_t*>(o[i]->p); }
  };
  using Bufs = std::vector<std::vector<unsigned char>>;
  auto poisoned = [](size_t bytes) { return std::vector<unsigned char>(bytes, 0xFF); };
  auto same_bits = [&](const std::string& name,
                       const std::function<Bufs(const TunerOperands&)>& start,
                       const std::function<void(Ctx&, const Call&)>& call) {
    for (int pass = 0; pass < 2; ++pass) {
      const Call mine(ops[pass], start(ops[pass])), theirs(ops[pass], start(ops[pass]));
      call(tuned, mine);
      call(first, theirs);
      std::vector<unsigned char> a, b;
      for (size_t i = 0; i < mine.o.size(); ++i) {
        const auto ai = mine.o[i]->get(), bi = theirs.o[i]->get();
        a.insert(a.end(), ai.begin(), ai.end());
        b.insert(b.end(), bi.begin(), bi.end());
      }
      compare_bits("gemm tuner " + name + (pass ? ", other operands" : "") + " vs first", "fwd", b, a);
    }
  };
  const lattice::GemmShape fwd{1, N, out, in, false, false, 1.0f, false}, acc{1, N, out, in, false, false, 1.0f, true};
  const lattice::GemmShape dgrad{1, N, in, out, false, true, 1.0f, false};
  const lattice::GemmShape wgrad{1, in, out, N, true, false, 1.0f, true};
  // FC2's input gradient with the GeLU's backward: dy [N, in] times W read as [out, in], transposed.
  const lattice::GemmShape dgelu{1, N, out, in, false, true, 1.0f, false};
  auto out32 = [&](const TunerOperands&) { return Bufs{poisoned(n_out * 4)}; };
  auto out16 = [&](const TunerOperands&) { return Bufs{poisoned(n_out * 2)}; };
  auto zero_if_refused = [](bool offered, const Call& c) {  // both contexts alike: nothing compared then
    if (!offered)
      for (const auto& o : c.o) cuda_ok(cudaMemset(o->p, 0, o->n), "not offered");
  };
  same_bits("fc1 fwd + bias(epi)", out32, [&](Ctx& ctx, const Call& c) {
    ctx.gemm(fwd, c.X(), c.W(), c.f(0), reinterpret_cast<const float*>(c.b32.p));
  });
  same_bits("fc1 fwd + bias, bf16 D", out16, [&](Ctx& ctx, const Call& c) {
    zero_if_refused(ctx.gemm_bf16_out(fwd, c.X(), c.W(), c.h(0), reinterpret_cast<const uint16_t*>(c.b16.p)), c);
  });
  same_bits(
      "fc1 fwd + bias + GeLU (D, aux)",
      [&](const TunerOperands&) { return Bufs{poisoned(n_out * 2), poisoned(n_out * 2)}; },
      [&](Ctx& ctx, const Call& c) {
        const auto* b16 = reinterpret_cast<const uint16_t*>(c.b16.p);
        zero_if_refused(ctx.gemm_bf16_gelu(fwd, c.X(), c.W(), c.h(0), c.h(1), b16), c);
      });
  same_bits("fc2 dx + GeLU backward, bf16 D", out16, [&](Ctx& ctx, const Call& c) {
    zero_if_refused(ctx.gemm_bf16_dgelu(dgelu, c.DY_IN(), c.W(), c.h(0), reinterpret_cast<const uint16_t*>(c.pre.p)), c);
  });
  same_bits(
      "fc1 dx", [&](const TunerOperands&) { return Bufs{poisoned(n_in * 4)}; },
      [&](Ctx& ctx, const Call& c) { ctx.gemm(dgrad, c.DY(), c.W(), c.f(0)); });
  same_bits(
      "fc1 dW +=", [&](const TunerOperands& t) { return Bufs{t.c_w}; },
      [&](Ctx& ctx, const Call& c) { ctx.gemm(wgrad, c.X(), c.DY(), c.f(0)); });
  same_bits(
      "fc1 fwd + bias(epi) +=", [&](const TunerOperands& t) { return Bufs{t.c_out}; },
      [&](Ctx& ctx, const Call& c) { ctx.gemm(acc, c.X(), c.W(), c.f(0), reinterpret_cast<const float*>(c.b32.p)); });
  // fp32 operands (TF32 off): x's and w's bytes read as floats would hold NaNs, so noise of their own
  // in place of the bf16 dy_in and pre (each at least fm·fk floats' bytes).
  const int64_t fm = kHostSim ? 128 : 512, fn = kHostSim ? 64 : 256, fk = kHostSim ? 96 : 384;
  const lattice::GemmShape f32{1, fm, fn, fk, false, false, 1.0f, false};
  for (uint64_t pass = 0; pass < 2; ++pass) {
    TunerOperands& t = ops[pass];
    const auto a = noise_bytes(size_t(fm * fk), 4, 31 + 2 * pass);
    const auto b = noise_bytes(size_t(fk * fn), 4, 32 + 2 * pass);
    if (a.size() > t.dy_in.size() || b.size() > t.pre.size()) throw std::logic_error("check_gemm_tuner: f32 operands");
    std::copy(a.begin(), a.end(), t.dy_in.begin());
    std::copy(b.begin(), b.end(), t.pre.begin());
  }
  same_bits(
      "f32 " + std::to_string(fm) + "x" + std::to_string(fn) + "x" + std::to_string(fk),
      [&](const TunerOperands&) { return Bufs{poisoned(size_t(fm * fn * 4))}; },
      [&](Ctx& ctx, const Call& c) {
        ctx.gemm(f32, {c.dy_in.p, DType::fp32}, {c.pre.p, DType::fp32}, c.f(0));
      });
  for (const auto& t : tuned.tunings())
    std::printf("  note gemm tuner %s: algorithm %d of %d offered, %d with the first's bits\n", t.gemm.c_str(),
                t.chosen + 1, t.offered, t.same_bits);
  if (tuned.tunings().empty()) std::printf("  note gemm tuner: no call had two algorithms offered\n");
  if (kHostSim) {
    // The simulation's four algorithms (tests/host_sim/cublaslt_sim.cpp) make each decision known: the
    // fourth splits K (not offered), the third sums in another order (other bits), the second gives
    // the first's bits in half its time: every kind of call tuned, each to the second of three.
    int wrong = 0;
    for (const auto& t : tuned.tunings()) wrong += !(t.offered == 3 && t.same_bits == 2 && t.chosen == 1);
    const int kinds = 8;
    std::printf("kernel gemm tuner decisions (simulated cuBLASLt: %zu keys tuned of %d kinds, each to the faster "
                "algorithm with the first's bits, the other order and the split of K left out) fwd "
                "max_abs_diff=%d rel=%d tol=0 %s\n",
                tuned.tunings().size(), kinds, wrong, wrong, wrong == 0 && int(tuned.tunings().size()) == kinds ? "ok" : "FAIL");
    if (!(wrong == 0 && int(tuned.tunings().size()) == kinds)) ++failures;
  }
}


// ---- fused attention (cuda/flash_attention.hpp) against the CPU's (kernels/flash_attention.cpp) ----
// Both in fp32 with the same formula, tile shape (64 × 64), fast_exp and order over the keys; they
// differ in summation order inside a row (the CPU's vector lanes against four threads' shuffle tree)
// and in FMA contraction: a few ulps of each sum. Outputs are sums of at most s = 200 terms of
// magnitude ≤ max|ref|, so rel ≤ 1e-5 (the fp32 bound) holds with room. The backward is fed the
// CPU's forward output and log-sum-exp, so it is compared alone.
// The dropout mask is checked exactly: with V = I (dh = s) the forward's output row i is the dropped
// probabilities of query i (zero exactly where dropped, since every kept probability is > 0), and
// with dO = I the backward's dV row j is (P∘Z)ᵀ's row: both against the CPU's draw of the same
// elements (AttentionMaskDraw at attention_mask_first + i·s + j).
lattice::AttentionDropout flash_dropout(float p) {
  lattice::AttentionDropout drop;
  drop.stream = {0x1234abcdULL, 77, 5, lattice::DropoutSite::attention};
  drop.p = p, drop.first_row = 3, drop.heads_total = 12, drop.head0 = 6;  // the second of two TP ranks
  return drop;
}

// x.bf16_operands: the tensor-core form (cuda/flash_attention.hpp) on bf16-valued Q, K, V, against
// the CPU's fp32 kernel on the same values, within the bf16 bound (2^-7 of the largest reference).
// The tensor-core form's own arithmetic on the host (cuda/flash_attention_tc.cu): the same products of
// bf16 values, rounded to bf16 where its mma operands are (the forward's probabilities P̃∘Z, relative to
// the running maximum of each 64-key tile; dO; dS; the backward's P∘Z), the same fast_exp arguments,
// sums in double where the kernel's are fp32 in an order of its own. Against it the tensor-core lines
// are held to the bf16 bound, 2^-7 of the largest reference: both round the same values to bf16, so
// they differ by fp32 ordering and by a rare intermediate rounded the other way from a tie-close
// value (one bf16 ulp, 2^-8 of one term). Against the CPU's fp32 kernel the form is not within that
// bound in general: rounding dS to bf16 errs by 2^-8 of each term of dQ = Σ dS·K, whose terms cancel
// (seed 1: dq 9.6e-3 at s 40, dh 16 with dropout), so that comparison is printed, not judged.
uint16_t bf16_rn(float x) {  // cvt.rn.bf16: to nearest even, subnormals kept
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float bf16_round(float x) { return lattice::from_bf16(bf16_rn(x)); }
struct TcModel {
  std::vector<float> out, lse, dq, dk, dv;
};
// Forward from q, k, v; backward from q, k, v, dout and the given out, lse (what the device's backward
// was handed).
TcModel tc_model(const lattice::FlashShape& x, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& dout, const std::vector<float>& out_in,
                 const std::vector<float>& lse_in, const lattice::AttentionDropout& drop) {
  const int64_t s = x.s, dh = x.dh, n = x.b * x.a * s * dh;
  const float scale = 1.0f / std::sqrt(float(dh));
  const float keep_scale = drop.p > 0.0f ? 1.0f / (1.0f - drop.p) : 1.0f;
  const lattice::AttentionMaskDraw draw(drop);
  TcModel m{std::vector<float>(size_t(n)), std::vector<float>(size_t(x.b * x.a * s)), std::vector<float>(size_t(n)),
            std::vector<float>(size_t(n)), std::vector<float>(size_t(n))};
  std::vector<float> do16(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) do16[size_t(e)] = bf16_round(dout[size_t(e)]);
  std::vector<uint8_t> keep(static_cast<size_t>(s));
  std::vector<float> score(static_cast<size_t>(s)), z(static_cast<size_t>(s));
  auto dot = [&](const float* a, const float* b) {
    double acc = 0.0;
    for (int64_t d = 0; d < dh; ++d) acc += double(a[d]) * double(b[d]);
    return float(acc);
  };
  std::vector<double> acc_k(static_cast<size_t>(s * dh)), acc_v(static_cast<size_t>(s * dh));
  for (int64_t bh = 0; bh < x.b * x.a; ++bh) {
    const float *Q = q.data() + bh * s * dh, *K = k.data() + bh * s * dh, *V = v.data() + bh * s * dh;
    const float* dO16 = do16.data() + bh * s * dh;
    std::fill(acc_k.begin(), acc_k.end(), 0.0), std::fill(acc_v.begin(), acc_v.end(), 0.0);
    for (int64_t i = 0; i < s; ++i) {
      std::fill(keep.begin(), keep.end(), uint8_t(1));
      if (drop.p > 0.0f) draw.row(keep.data(), lattice::attention_mask_first(drop, x.a, s, bh) + uint64_t(i * s), i + 1);
      for (int64_t j = 0; j <= i; ++j) score[size_t(j)] = dot(Q + i * dh, K + j * dh), z[size_t(j)] = keep[size_t(j)] ? keep_scale : 0.0f;
      // forward: the online softmax a 64-key tile at a time, P̃∘Z rounded for the product with V
      float mx_run = -INFINITY, l = 0.0f;
      std::vector<double> o(static_cast<size_t>(dh), 0.0);
      for (int64_t j0 = 0; j0 <= i; j0 += 64) {
        const int64_t j1 = std::min(i + 1, j0 + 64);
        float mx = mx_run;
        for (int64_t j = j0; j < j1; ++j) mx = std::max(mx, score[size_t(j)] * scale);
        const float corr = lattice::fast_exp(mx_run - mx);
        float sum = 0.0f;
        for (double& od : o) od *= corr;
        for (int64_t j = j0; j < j1; ++j) {
          const float e = lattice::fast_exp(score[size_t(j)] * scale - mx);
          sum += e;
          const double pz = bf16_round(e * z[size_t(j)]);
          for (int64_t d = 0; d < dh; ++d) o[size_t(d)] += pz * V[j * dh + d];
        }
        l = l * corr + sum, mx_run = mx;
      }
      const size_t row = size_t(bh * s + i);
      m.lse[row] = mx_run + std::log(l);
      for (int64_t d = 0; d < dh; ++d) m.out[row * size_t(dh) + size_t(d)] = float(o[size_t(d)]) * (1.0f / l);
      // backward, from the given out and lse
      double D = 0.0;
      for (int64_t d = 0; d < dh; ++d) D += double(dout[row * size_t(dh) + size_t(d)]) * out_in[row * size_t(dh) + size_t(d)];
      const float Di = float(D), Li = lse_in[row];
      std::vector<double> gq(static_cast<size_t>(dh), 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        const float pr = lattice::fast_exp(score[size_t(j)] * scale - Li);
        const float dp = dot(dO16 + i * dh, V + j * dh);
        const double ds = bf16_round(pr * (dp * z[size_t(j)] - Di) * scale), pz = bf16_round(pr * z[size_t(j)]);
        for (int64_t d = 0; d < dh; ++d) {
          gq[size_t(d)] += ds * K[j * dh + d];
          acc_k[size_t(j * dh + d)] += ds * Q[i * dh + d];
          acc_v[size_t(j * dh + d)] += pz * dO16[i * dh + d];
        }
      }
      for (int64_t d = 0; d < dh; ++d) m.dq[row * size_t(dh) + size_t(d)] = float(gq[size_t(d)]);
    }
    for (int64_t e = 0; e < s * dh; ++e)
      m.dk[size_t(bh * s * dh + e)] = float(acc_k[size_t(e)]), m.dv[size_t(bh * s * dh + e)] = float(acc_v[size_t(e)]);
  }
  return m;
}
// The tensor-core form's distance from the CPU's fp32 kernel, printed (not judged: tc_model's comment).
void tc_accuracy(const std::string& name, const char* what, const std::vector<float>& ref, const std::vector<float>& got) {
  double maxabs = 0.0, maxref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i)
    maxabs = std::max(maxabs, std::fabs(double(got[i]) - ref[i])), maxref = std::max(maxref, std::fabs(double(ref[i])));
  std::printf("  accuracy %s %s against the fp32 kernel: max_abs_diff=%.3e rel=%.3e (bf16 products)\n", name.c_str(), what,
              maxabs, maxref > 0 ? maxabs / maxref : maxabs);
}

void check_flash_case(const lattice::FlashShape& x, float p) {
  const size_t n = size_t(x.b * x.a * x.s * x.dh), rows = size_t(x.b * x.a * x.s);
  const bool tc = x.bf16_operands;
  const double tol = tc ? 1.0 / 128.0 : 1e-5;
  auto operand = [&] { return tc ? bf16_valued(randn(n)) : randn(n); };
  const auto q = operand(), k = operand(), v = operand(), dout = randn(n);
  const lattice::AttentionDropout drop = flash_dropout(p);
  std::vector<float> out(n), lse(rows), dq(n), dk(n), dv(n);
  lattice::flash_attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), x, drop);
  lattice::flash_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                    out.data(), lse.data(), x, drop);
  Dev<float> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(n), d_lse(rows), d_dq(n), d_dk(n), d_dv(n);
  lattice::cuda::flash_attention_forward(d_out.p, d_lse.p, d_q.p, d_k.p, d_v.p, x, drop);
  const std::string name = "flash_attention b" + std::to_string(x.b) + " a" + std::to_string(x.a) + " s" +
                           std::to_string(x.s) + " dh" + std::to_string(x.dh) + (p > 0 ? " drop" : "") +
                           (tc ? " tc" : "");
  // The tensor-core form against its own arithmetic (tc_model), the fp32 form against the CPU's kernel.
  const TcModel model = tc ? tc_model(x, q, k, v, dout, out, lse, drop) : TcModel{};
  const auto g_out = d_out.get();
  compare(name + " out", "fwd", tc ? model.out : out, g_out, tol);
  compare(name + " lse", "fwd", tc ? model.lse : lse, d_lse.get(), tol);
  if (tc) tc_accuracy(name, "out", out, g_out);
  if (tc) {  // the forward's order is fixed too
    const auto g_lse = d_lse.get();
    d_out.poison(), d_lse.poison();
    lattice::cuda::flash_attention_forward(d_out.p, d_lse.p, d_q.p, d_k.p, d_v.p, x, drop);
    compare_repeat(name + " out", "fwd", g_out, d_out.get());
    compare_repeat(name + " lse", "fwd", g_lse, d_lse.get());
  }
  d_out.upload(out), d_lse.upload(lse);  // the backward alone
  Scratch ws(lattice::cuda::flash_attention_backward_workspace_bytes(x));
  lattice::cuda::flash_attention_backward(d_dq.p, d_dk.p, d_dv.p, d_dout.p, d_q.p, d_k.p, d_v.p, d_out.p, d_lse.p, x,
                                          drop, ws.ws());
  const auto g_dq = d_dq.get(), g_dk = d_dk.get(), g_dv = d_dv.get();
  compare(name + " dq", "bwd", tc ? model.dq : dq, g_dq, tol);
  compare(name + " dk", "bwd", tc ? model.dk : dk, g_dk, tol);
  compare(name + " dv", "bwd", tc ? model.dv : dv, g_dv, tol);
  if (tc)
    tc_accuracy(name, "dq", dq, g_dq), tc_accuracy(name, "dk", dk, g_dk), tc_accuracy(name, "dv", dv, g_dv);
  if (p > 0 || tc) {  // the backward's order is fixed: the same bits again
    d_dq.poison(), d_dk.poison(), d_dv.poison();
    lattice::cuda::flash_attention_backward(d_dq.p, d_dk.p, d_dv.p, d_dout.p, d_q.p, d_k.p, d_v.p, d_out.p, d_lse.p,
                                            x, drop, ws.ws());
    compare_repeat(name + " dq", "bwd", g_dq, d_dq.get());
    compare_repeat(name + " dk", "bwd", g_dk, d_dk.get());
    compare_repeat(name + " dv", "bwd", g_dv, d_dv.get());
  }
  if (tc && lattice::cuda::flash_tc_supported(x)) {  // Q, K, V as kept bf16 bits: the same tiles, the same bits
    std::vector<uint16_t> q16(n), k16(n), v16(n);
    lattice::to_bf16(q.data(), q16.data(), int64_t(n));
    lattice::to_bf16(k.data(), k16.data(), int64_t(n));
    lattice::to_bf16(v.data(), v16.data(), int64_t(n));
    Dev<uint16_t> d_q16(q16), d_k16(k16), d_v16(v16);
    // The same bits as the QKV GEMM's rows [b·s, 3·a·dh], as the model keeps them under the fused
    // attention: the rows calls below read them there, against the head-layout calls' results.
    std::vector<uint16_t> qkv16(3 * n);
    for (int64_t bh = 0; bh < x.b * x.a; ++bh)
      for (int64_t i = 0; i < x.s; ++i)
        for (int part = 0; part < 3; ++part)
          std::copy_n((part == 0 ? q16 : part == 1 ? k16 : v16).begin() + (bh * x.s + i) * x.dh, x.dh,
                      qkv16.begin() + ((bh / x.a * x.s + i) * 3 + part) * x.a * x.dh + bh % x.a * x.dh);
    Dev<uint16_t> d_qkv16(qkv16);
    const auto rows_in = lattice::cuda::QkvBits::of_rows(d_qkv16.p, x);
    d_out.poison(), d_lse.poison();
    lattice::cuda::flash_attention_forward(d_out.p, d_lse.p, d_q.p, d_k.p, d_v.p, x, drop);  // fp32 in, again
    const auto g_lse = d_lse.get();
    d_out.poison(), d_lse.poison();
    lattice::cuda::flash_attention_forward_bf16(d_out.p, d_lse.p, d_q16.p, d_k16.p, d_v16.p, x, drop);
    compare_bits(name + " out (bf16 in)", "fwd", g_out, d_out.get());
    compare_bits(name + " lse (bf16 in)", "fwd", g_lse, d_lse.get());
    d_out.upload(out), d_lse.upload(lse);
    d_dq.poison(), d_dk.poison(), d_dv.poison();
    lattice::cuda::flash_attention_backward_bf16(d_dq.p, d_dk.p, d_dv.p, d_dout.p, d_q16.p, d_k16.p, d_v16.p, d_out.p,
                                                 d_lse.p, x, drop, ws.ws());
    compare_bits(name + " dq (bf16 in)", "bwd", g_dq, d_dq.get());
    compare_bits(name + " dk (bf16 in)", "bwd", g_dk, d_dk.get());
    compare_bits(name + " dv (bf16 in)", "bwd", g_dv, d_dv.get());
    // The context in the token rows (the model's calls): the head-layout results rearranged and
    // narrowed on the host, bit for bit.
    auto rows_of = [&](const std::vector<float>& heads) {  // [b, a, s, dh] → [b, s, a·dh]
      std::vector<float> r(n);
      for (int64_t bh = 0; bh < x.b * x.a; ++bh)
        for (int64_t i = 0; i < x.s; ++i)
          std::copy_n(heads.begin() + (bh * x.s + i) * x.dh, x.dh,
                      r.begin() + ((bh / x.a * x.s + i) * x.a + bh % x.a) * x.dh);
      return r;
    };
    std::vector<uint16_t> want16(n);
    lattice::to_bf16(rows_of(g_out).data(), want16.data(), int64_t(n));
    Dev<uint16_t> d_rows16(n);
    d_lse.poison();
    lattice::cuda::flash_attention_forward_rows_bf16(d_rows16.p, d_lse.p, rows_in, x, drop);
    compare_bits(name + " out rows (QKV rows in, bf16 out)", "fwd", want16, d_rows16.get());
    compare_bits(name + " lse rows (QKV rows in, bf16 out)", "fwd", g_lse, d_lse.get());
    if (x.dh <= 64) {  // each of the forward's forms against the tuned call's: the same bits
      using lattice::cuda::ForwardForm, lattice::cuda::DqForm;
      for (ForwardForm f : {ForwardForm::one_slab, ForwardForm::two_slabs, ForwardForm::one_slab_dense}) {
        lattice::cuda::flash_tc_force_forms(f, DqForm::tuned);
        Dev<uint16_t> f_rows16(n);
        Dev<float> f_lse(rows), f_lse32(rows), f_out(n);
        // Each call's lines where the form ran (the dense one has bf16 operands and no dropout only).
        lattice::cuda::flash_attention_forward_rows_bf16(f_rows16.p, f_lse.p, rows_in, x, drop);
        const bool rows_ran = lattice::cuda::flash_tc_last_forward_form() == f;
        bool fp32_ran = false;  // fp32 operands have no dense form
        if (f != ForwardForm::one_slab_dense) {
          lattice::cuda::flash_attention_forward(f_out.p, f_lse32.p, d_q.p, d_k.p, d_v.p, x, drop);
          fp32_ran = lattice::cuda::flash_tc_last_forward_form() == f;
        }
        lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, DqForm::tuned);
        const std::string form = std::string(", ") + flash_tc_form_name(f);
        const bool compiled = f != ForwardForm::one_slab_dense || p == 0.0f;  // bf16 operands, no dropout
        line(name + form + " taken where compiled (bf16 in) [flag]", "fwd", 0.0, rows_ran == compiled ? 0.0 : 1.0,
             0.0);
        if (f != ForwardForm::one_slab_dense)
          line(name + form + " taken (fp32 in) [flag]", "fwd", 0.0, fp32_ran ? 0.0 : 1.0, 0.0);
        if (rows_ran) {
          compare_bits(name + " out rows" + form, "fwd", d_rows16.get(), f_rows16.get());
          compare_bits(name + " lse" + form, "fwd", g_lse, f_lse.get());
        }
        if (fp32_ran) {
          compare_bits(name + " out (fp32 in)" + form, "fwd", g_out, f_out.get());
          compare_bits(name + " lse (fp32 in)" + form, "fwd", g_lse, f_lse32.get());
        }
      }
    }
    // Backward from the rows: O as bf16 bits there, so the reference takes the same O widened.
    std::vector<uint16_t> out16(n);
    lattice::to_bf16(out.data(), out16.data(), int64_t(n));
    std::vector<float> out_w(n);
    lattice::from_bf16(out16.data(), out_w.data(), int64_t(n));
    std::vector<uint16_t> out_rows16(n);
    lattice::to_bf16(rows_of(out_w).data(), out_rows16.data(), int64_t(n));
    Dev<float> d_out_w(out_w), d_dout_rows(rows_of(dout));
    Dev<uint16_t> d_out_rows16(out_rows16);
    d_lse.upload(lse);
    lattice::cuda::flash_attention_backward_bf16(d_dq.p, d_dk.p, d_dv.p, d_dout.p, d_q16.p, d_k16.p, d_v16.p,
                                                 d_out_w.p, d_lse.p, x, drop, ws.ws());
    const auto w_dq = d_dq.get(), w_dk = d_dk.get(), w_dv = d_dv.get();
    d_dq.poison(), d_dk.poison(), d_dv.poison();
    lattice::cuda::flash_attention_backward_rows_bf16(d_dq.p, d_dk.p, d_dv.p, d_dout_rows.p, rows_in, d_out_rows16.p,
                                                      d_lse.p, x, drop, ws.ws());
    compare_bits(name + " dq rows (QKV rows in)", "bwd", w_dq, d_dq.get());
    compare_bits(name + " dk rows (QKV rows in)", "bwd", w_dk, d_dk.get());
    compare_bits(name + " dv rows (QKV rows in)", "bwd", w_dv, d_dv.get());
    if (p == 0.0f && x.dh <= 64) {  // dQ's forms writing fp32 dq (the split backward's call), where both are compiled
      using lattice::cuda::ForwardForm, lattice::cuda::DqForm;
      for (DqForm f : {DqForm::plain, DqForm::dense}) {
        lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, f);
        Dev<float> f_dq(n), f_dk(n), f_dv(n);
        lattice::cuda::flash_attention_backward_rows_bf16(f_dq.p, f_dk.p, f_dv.p, d_dout_rows.p, rows_in,
                                                          d_out_rows16.p, d_lse.p, x, drop, ws.ws());
        const bool ran = lattice::cuda::flash_tc_last_dq_form() == f;
        lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, DqForm::tuned);
        const std::string form = std::string(", ") + flash_tc_form_name(f);
        line(name + form + " taken (fp32 dq) [flag]", "bwd", 0.0, ran ? 0.0 : 1.0, 0.0);
        compare_bits(name + " dq rows" + form, "bwd", w_dq, f_dq.get());
        compare_bits(name + " dk rows" + form, "bwd", w_dk, f_dk.get());
        compare_bits(name + " dv rows" + form, "bwd", w_dv, f_dv.get());
      }
    }
    if (lattice::cuda::flash_qkv_rows_supported(x)) {
      // The QKV gradient in the rows too: the rows call's dq, dk, dv merged and narrowed with their bias
      // sums (merge_qkv_grads_narrow, into a bias gradient that holds values already), bit for bit.
      const int64_t N = x.b * x.s, cols = 3 * x.a * x.dh;
      const auto db0 = randn(size_t(cols));
      Dev<uint16_t> want_rows(size_t(N * cols)), got_rows(size_t(N * cols));
      Dev<float> want_db(db0), got_db(db0);
      Scratch mws(lattice::cuda::bias_backward_workspace_bytes(N, cols));
      lattice::cuda::merge_qkv_grads_narrow(want_rows.p, want_db.p, d_dq.p, d_dk.p, d_dv.p, x.b, x.s, x.a, x.dh,
                                            mws.ws());
      Scratch qws(lattice::cuda::flash_attention_backward_qkv_rows_workspace_bytes(x));
      lattice::cuda::flash_attention_backward_qkv_rows_bf16(got_rows.p, got_db.p, d_dout_rows.p, rows_in,
                                                            d_out_rows16.p, d_lse.p, x, drop, qws.ws());
      compare_bits(name + " dqkv rows (QKV rows in, bf16 out)", "bwd", want_rows.get(), got_rows.get());
      compare_bits(name + " dqkv rows' bias sums", "bwd", want_db.get(), got_db.get());
      // Each of dQ's forms against the tuned call's: the same bits (the dense one where compiled).
      using lattice::cuda::ForwardForm, lattice::cuda::DqForm;
      for (DqForm f : {DqForm::plain, DqForm::dense}) {
        lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, f);
        Dev<uint16_t> f_rows(size_t(N * cols));
        Dev<float> f_db(db0);
        lattice::cuda::flash_attention_backward_qkv_rows_bf16(f_rows.p, f_db.p, d_dout_rows.p, rows_in, d_out_rows16.p,
                                                              d_lse.p, x, drop, qws.ws());
        const bool ran = lattice::cuda::flash_tc_last_dq_form() == f;
        lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, DqForm::tuned);
        const std::string form = std::string(", ") + flash_tc_form_name(f);
        const bool compiled = f != DqForm::dense || (p == 0.0f && x.dh <= 64);  // the dense form's shapes
        line(name + form + " taken where compiled [flag]", "bwd", 0.0, ran == compiled ? 0.0 : 1.0, 0.0);
        if (!ran) continue;
        compare_bits(name + " dqkv rows" + form, "bwd", got_rows.get(), f_rows.get());
        compare_bits(name + " dqkv rows' bias sums" + form, "bwd", got_db.get(), f_db.get());
      }
    }
  }
}

// The fused attention's tensor-core building blocks (cuda/mma.cuh) against the host, one warp, on
// small integers (every product and sum exact in bf16 and fp32, so the bits must agree): A·B[:, 0:16]
// by load_a and load_b2 (ldmatrix .x4 on Bᵀ's rows), the same by load_b2_trans (.x4 .trans on B's
// rows), and the first product's accumulators handed on as an A operand (a_from_c) times B[:, 16:32].
// A wrong fragment layout in mma.cuh shows here before it shows as an attention error.
__global__ void mma_fragments_kernel(float* d1, float* d2, float* d3, const uint16_t* a, const uint16_t* b) {
  using namespace lattice::cuda::mma;
  constexpr int ld = 40;  // A [16][16] and B [16][32] row-major, Bᵀ [32][16]; rows 80 bytes apart
  __shared__ __align__(16) uint16_t sa[16 * ld], sb[16 * ld], sbt[32 * ld];
  const int lane = int(threadIdx.x);
  for (int i = lane; i < 16 * 16; i += 32) sa[(i / 16) * ld + i % 16] = a[i];
  for (int i = lane; i < 16 * 32; i += 32) sb[(i / 32) * ld + i % 32] = b[i], sbt[(i % 32) * ld + i / 32] = b[i];
  __syncwarp();
  uint32_t fa[4], fb[4];
  load_a(fa, sa, ld, 0, 0);
  float c[2][4] = {}, e[2][4] = {}, f[2][4] = {};
  load_b2(fb, sbt, ld, 0, 0);
  mma_bf16(c[0], fa, fb[0], fb[1]), mma_bf16(c[1], fa, fb[2], fb[3]);
  load_b2_trans(fb, sb, ld, 0, 0);
  mma_bf16(e[0], fa, fb[0], fb[1]), mma_bf16(e[1], fa, fb[2], fb[3]);
  uint32_t a2[4];
  a_from_c(a2, c[0], c[1]);
  load_b2_trans(fb, sb, ld, 0, 16);
  mma_bf16(f[0], a2, fb[0], fb[1]), mma_bf16(f[1], a2, fb[2], fb[3]);
  const int g = lane >> 2, t = lane & 3;
  for (int h = 0; h < 4; ++h) {
    const int row = g + (h >= 2 ? 8 : 0), col = 2 * t + (h & 1);
    for (int nt = 0; nt < 2; ++nt) {
      d1[row * 16 + 8 * nt + col] = c[nt][h], d2[row * 16 + 8 * nt + col] = e[nt][h];
      d3[row * 16 + 8 * nt + col] = f[nt][h];
    }
  }
}
void check_mma_fragments() {
  int device = 0, major = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  if (major < 8) {
    std::printf("  (mma fragments not checked: no bf16 tensor cores before sm_80)\n");
    return;
  }
  std::uniform_int_distribution<int> small(-2, 2);
  std::vector<uint16_t> a(16 * 16), b(16 * 32);
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = float(small(rng)), a[i] = lattice::to_bf16(af[i]);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = float(small(rng)), b[i] = lattice::to_bf16(bf[i]);
  std::vector<float> e1(16 * 16, 0.0f), e3(16 * 16, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n) e1[r * 16 + n] += af[r * 16 + k] * bf[k * 32 + n];
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 16; ++n) e3[r * 16 + n] += e1[r * 16 + k] * bf[k * 32 + 16 + n];
  Dev<uint16_t> d_a(a), d_b(b);
  Dev<float> d1(e1.size()), d2(e1.size()), d3(e3.size());
  mma_fragments_kernel<<<1, 32>>>(d1.p, d2.p, d3.p, d_a.p, d_b.p);
  cuda_ok(cudaGetLastError(), "mma_fragments_kernel");
  compare_bits(std::string("mma fragments A·B (load_a, load_b2)"), "fwd", e1, d1.get());
  compare_bits(std::string("mma fragments A·B (load_b2_trans)"), "fwd", e1, d2.get());
  compare_bits(std::string("mma fragments (A·B)·B' (a_from_c)"), "fwd", e3, d3.get());
}

// tc: the tensor-core form (bf16-valued Q, K; I is exact in bf16).
void check_flash_mask(bool tc) {
  lattice::FlashShape x{2, 3, 128, 128};  // dh = s: V = I reads out the dropped probabilities
  x.bf16_operands = tc;
  const size_t n = size_t(x.b * x.a * x.s * x.dh), rows = size_t(x.b * x.a * x.s);
  const lattice::AttentionDropout drop = flash_dropout(0.1f);
  std::vector<float> eye(n, 0.0f);
  for (int64_t bh = 0; bh < x.b * x.a; ++bh)
    for (int64_t i = 0; i < x.s; ++i) eye[size_t((bh * x.s + i) * x.dh + i)] = 1.0f;
  std::vector<uint8_t> expect(n, 0);  // (bh, i, j): kept and visible
  const lattice::AttentionMaskDraw draw(drop);
  for (int64_t bh = 0; bh < x.b * x.a; ++bh)
    for (int64_t i = 0; i < x.s; ++i)
      draw.row(expect.data() + (bh * x.s + i) * x.s,
               lattice::attention_mask_first(drop, x.a, x.s, bh) + uint64_t(i * x.s), i + 1);
  const auto q = tc ? bf16_valued(randn(n)) : randn(n), k = tc ? bf16_valued(randn(n)) : randn(n);
  Dev<float> d_q(q), d_k(k), d_eye(eye), d_out(n), d_lse(rows);
  lattice::cuda::flash_attention_forward(d_out.p, d_lse.p, d_q.p, d_k.p, d_eye.p, x, drop);
  const auto out = d_out.get();
  std::vector<uint8_t> got(n);
  for (size_t e = 0; e < n; ++e) got[e] = out[e] != 0.0f;
  compare_mask(std::string("flash_attention dropout (V = I)") + (tc ? " tc" : ""), "fwd", expect, got);
  // The backward with dO = I: dV[j, i] = (P∘Z)[i, j].
  std::vector<float> o(n), lse(rows);
  lattice::flash_attention_forward(o.data(), lse.data(), q.data(), k.data(), eye.data(), x, drop);
  Dev<float> d_o(o), d_l(lse), d_dq(n), d_dk(n), d_dv(n);
  Scratch ws(lattice::cuda::flash_attention_backward_workspace_bytes(x));
  lattice::cuda::flash_attention_backward(d_dq.p, d_dk.p, d_dv.p, d_eye.p, d_q.p, d_k.p, d_eye.p, d_o.p, d_l.p, x,
                                          drop, ws.ws());
  const auto dv = d_dv.get();
  for (int64_t bh = 0; bh < x.b * x.a; ++bh)
    for (int64_t i = 0; i < x.s; ++i)
      for (int64_t j = 0; j < x.s; ++j)
        got[size_t((bh * x.s + i) * x.s + j)] = dv[size_t((bh * x.s + j) * x.dh + i)] != 0.0f;
  compare_mask(std::string("flash_attention dropout (dO = I, dV)") + (tc ? " tc" : ""), "bwd", expect, got);
}

// The ring's blocks (cuda/flash_block.cu) against the CPU's on the same block: a block at row offsets
// inside a rank's local tensors (their strides the whole tensors'; the rows outside it must stay as they
// were), the causal mask and the dropout's flags by global position on rows of the sequence's length,
// and, with merge, combined into an output, log-sum-exp and gradients already there. fp32: 1e-5.
void check_flash_block_case(lattice::FlashBlock x, int64_t rows_q, int64_t rows_k, int64_t qrow, int64_t krow,
                            float p) {
  const int64_t bh = x.b * x.a, dh = x.dh;
  x.q_stride = rows_q * dh, x.k_stride = rows_k * dh, x.lse_stride = rows_q;
  const size_t nq = size_t(bh * rows_q * dh), nk = size_t(bh * rows_k * dh), nl = size_t(bh * rows_q);
  const auto q = randn(nq), k = randn(nk), v = randn(nk), dout = randn(nq);
  auto out = randn(nq), lse = randn(nl), dq = randn(nq), dk = randn(nk), dv = randn(nk);
  const lattice::AttentionDropout drop = flash_dropout(p);
  Dev<float> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(out), d_lse(lse), d_dq(dq), d_dk(dk), d_dv(dv);
  const int64_t qo = qrow * dh, ko = krow * dh;
  const std::string name = "flash_block b" + std::to_string(x.b) + " a" + std::to_string(x.a) + " dh" +
                           std::to_string(dh) + " q" + std::to_string(x.q0) + "+" + std::to_string(x.nq) + " k" +
                           std::to_string(x.k0) + "+" + std::to_string(x.nk) + " S" + std::to_string(x.S) +
                           (x.merge ? " merge" : "") + (p > 0 ? " drop" : "");
  lattice::flash_block_forward(out.data() + qo, lse.data() + qrow, q.data() + qo, k.data() + ko, v.data() + ko, x,
                               drop);
  lattice::cuda::flash_block_forward(d_out.p + qo, d_lse.p + qrow, d_q.p + qo, d_k.p + ko, d_v.p + ko, x, drop);
  compare(name + " out", "fwd", out, d_out.get(), 1e-5);
  compare(name + " lse", "fwd", lse, d_lse.get(), 1e-5);
  d_out.upload(out), d_lse.upload(lse);  // the backward alone, from the same output
  lattice::flash_block_backward(dq.data() + qo, dk.data() + ko, dv.data() + ko, dout.data() + qo, q.data() + qo,
                                k.data() + ko, v.data() + ko, out.data() + qo, lse.data() + qrow, x, drop);
  Scratch ws(lattice::cuda::flash_block_backward_workspace_bytes(x));
  const auto backward = [&] {
    lattice::cuda::flash_block_backward(d_dq.p + qo, d_dk.p + ko, d_dv.p + ko, d_dout.p + qo, d_q.p + qo, d_k.p + ko,
                                        d_v.p + ko, d_out.p + qo, d_lse.p + qrow, x, drop, ws.ws());
  };
  backward();
  const auto g_dq = d_dq.get(), g_dk = d_dk.get(), g_dv = d_dv.get();
  compare(name + " dq", "bwd", dq, g_dq, 1e-5);
  compare(name + " dk", "bwd", dk, g_dk, 1e-5);
  compare(name + " dv", "bwd", dv, g_dv, 1e-5);
  if (!x.merge) {  // overwriting: a second call gives the same bits
    backward();
    compare_repeat(name + " dq", "bwd", g_dq, d_dq.get());
    compare_repeat(name + " dk", "bwd", g_dk, d_dk.get());
    compare_repeat(name + " dv", "bwd", g_dv, d_dv.get());
  }
}
void check_flash_blocks() {
  for (const bool merge : {false, true})
    for (const float p : {0.0f, 0.1f}) {
      lattice::FlashBlock x;
      x.b = 2, x.a = 2, x.dh = 32, x.merge = merge;
      // CP 2 over S 128 (chunks of 32): rank 0's second chunk (global 96) against rank 1's first (32),
      // at local rows 32 and 0 of 64; then the diagonal, the queries' own chunk.
      x.nq = 32, x.nk = 32, x.q0 = 96, x.k0 = 32, x.S = 128;
      check_flash_block_case(x, 64, 64, 32, 0, p);
      x.k0 = 96;
      check_flash_block_case(x, 64, 64, 32, 32, p);
      // Odd sizes: dh 40 (lanes past it idle), 200 (seven elements a lane), blocks of 20 and 45 rows.
      x.b = 1, x.a = 3, x.dh = 40, x.nq = 20, x.nk = 45, x.q0 = 50, x.k0 = 10, x.S = 100;
      check_flash_block_case(x, 30, 50, 7, 3, p);
      x.dh = 200;
      check_flash_block_case(x, 30, 50, 7, 3, p);
    }
  constexpr int64_t kWideDh = lattice::cuda::kFlashBlockMaxHeadDim + 8;  // past the limit by a lane group
  bool refused = false;
  try {
    lattice::FlashBlock wide;
    wide.b = wide.a = wide.nq = wide.nk = 1, wide.dh = kWideDh, wide.S = 1;
    lattice::cuda::flash_block_forward(nullptr, nullptr, nullptr, nullptr, nullptr, wide, lattice::AttentionDropout{});
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  line("flash_block dh " + std::to_string(kWideDh) + " refused [flag]", "fwd", refused ? 0.0 : 1.0, refused ? 0.0 : 1.0,
       0.0);
}

void check_flash() {
  check_mma_fragments();
  check_flash_blocks();
  // s off the 64-row tile: a last tile of 8 rows (on the host simulation a shorter sequence and fewer
  // heads, off the 128-row tile by 8 too: at b 2, a 3, s 200 this shape's checks took 22 of its 120 s).
  const lattice::FlashShape off_tile =
      kHostSim ? lattice::FlashShape{2, 2, 136, 64} : lattice::FlashShape{2, 3, 200, 64};
  check_flash_case(off_tile, 0.0f);
  check_flash_case(off_tile, 0.1f);
  check_flash_case({1, 2, 130, 128}, 0.1f);  // the largest head dimension
  check_flash_case({1, 4, 77, 40}, 0.0f);   // dh not a multiple of 4
  // The tensor-core form: bf16 operands, dh a multiple of 16 (40 is not: it takes the fp32 form).
  // dh 16 and 48 leave warps without an output tile and give three column tiles; s 40 is one partial tile.
  // The kernels run 4, 6 or 8 column chunks (dh up to 64, 96, 128): dh 16, 32, 48, 80 and 112 take zero
  // columns past dh, 64, 96 (the paper's 22B model) and 128 none.
  for (lattice::FlashShape x : {off_tile, lattice::FlashShape{1, 2, 130, 128},
                                lattice::FlashShape{2, 2, 96, 32}, lattice::FlashShape{1, 2, 40, 16},
                                lattice::FlashShape{1, 1, 100, 48}, lattice::FlashShape{1, 2, 70, 96},
                                lattice::FlashShape{1, 1, 90, 80}, lattice::FlashShape{1, 2, 100, 112},
                                lattice::FlashShape{2, 2, 128, 64},
                                lattice::FlashShape{1, 3, 64, 32}}) {  // the last two: s a multiple of 64
    x.bf16_operands = true;
    check_flash_case(x, 0.0f);
    check_flash_case(x, 0.1f);
  }
  check_flash_mask(false);
  check_flash_mask(true);
  bool refused = false;
  try {
    lattice::cuda::flash_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, {1, 1, 64, 160},
                                           lattice::AttentionDropout{});
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  line("flash_attention dh 160 refused [flag]", "fwd", refused ? 0.0 : 1.0, refused ? 0.0 : 1.0, 0.0);
  // bf16 bits in where the tensor-core form does not serve the shape (dh 40): refused, not misread.
  lattice::FlashShape odd{1, 1, 64, 40};
  odd.bf16_operands = true;
  refused = false;
  try {
    lattice::cuda::flash_attention_forward_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, odd,
                                                lattice::AttentionDropout{});
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  line("flash_attention bf16 in, dh 40 refused [flag]", "fwd", refused ? 0.0 : 1.0, refused ? 0.0 : 1.0, 0.0);
}

// ---- head layouts: model/attention.cpp's loops (LayerContext's b, s, a, dh as plain sizes) ----
void check_heads() {
  const int64_t b = 2, s = 100, a = 6, dh = 64, h = a * dh, N = b * s;
  const auto qkv = randn(size_t(N * 3 * h)), rows = randn(size_t(N * h));
  const size_t n = size_t(b * a * s * dh);
  std::vector<float> q(n), k(n), v(n), merged(size_t(N * h)), heads(n), dqkv(size_t(N * 3 * h));
  for (int64_t bi = 0; bi < b; ++bi)  // split_heads
    for (int64_t si = 0; si < s; ++si) {
      const float* row = qkv.data() + (bi * s + si) * 3 * h;
      for (int64_t hd = 0; hd < a; ++hd) {
        const int64_t dst = ((bi * a + hd) * s + si) * dh;
        for (int64_t e = 0; e < dh; ++e) {
          q[size_t(dst + e)] = row[hd * dh + e];
          k[size_t(dst + e)] = row[h + hd * dh + e];
          v[size_t(dst + e)] = row[2 * h + hd * dh + e];
        }
      }
    }
  for (int64_t bi = 0; bi < b; ++bi)  // merge_heads (of q) and unmerge_heads (of rows)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t hd = 0; hd < a; ++hd)
        for (int64_t e = 0; e < dh; ++e) {
          merged[size_t((bi * s + si) * h + hd * dh + e)] = q[size_t(((bi * a + hd) * s + si) * dh + e)];
          heads[size_t(((bi * a + hd) * s + si) * dh + e)] = rows[size_t((bi * s + si) * h + hd * dh + e)];
        }
  for (int64_t bi = 0; bi < b; ++bi)  // merge_qkv_grads (of q, k, v)
    for (int64_t si = 0; si < s; ++si) {
      float* row = dqkv.data() + (bi * s + si) * 3 * h;
      for (int64_t hd = 0; hd < a; ++hd) {
        const int64_t src = ((bi * a + hd) * s + si) * dh;
        for (int64_t e = 0; e < dh; ++e) {
          row[hd * dh + e] = q[size_t(src + e)];
          row[h + hd * dh + e] = k[size_t(src + e)];
          row[2 * h + hd * dh + e] = v[size_t(src + e)];
        }
      }
    }
  Dev<float> d_qkv(qkv), d_rows(rows), d_q(n), d_k(n), d_v(n), d_merged(merged.size()), d_heads(n),
      d_dqkv(dqkv.size());
  lattice::cuda::split_heads(d_q.p, d_k.p, d_v.p, d_qkv.p, b, s, a, dh);
  compare("split_heads q", "fwd", q, d_q.get(), 0.0);
  compare("split_heads k", "fwd", k, d_k.get(), 0.0);
  compare("split_heads v", "fwd", v, d_v.get(), 0.0);
  d_q.upload(q), d_k.upload(k), d_v.upload(v);
  lattice::cuda::merge_heads(d_merged.p, d_q.p, b, s, a, dh);
  compare("merge_heads", "fwd", merged, d_merged.get(), 0.0);
  lattice::cuda::unmerge_heads(d_heads.p, d_rows.p, b, s, a, dh);
  compare("unmerge_heads", "bwd", heads, d_heads.get(), 0.0);
  lattice::cuda::merge_qkv_grads(d_dqkv.p, d_q.p, d_k.p, d_v.p, b, s, a, dh);
  compare("merge_qkv_grads", "bwd", dqkv, d_dqkv.get(), 0.0);
}

// ---- the bf16 passes (cuda/bf16_fused.hpp): bit for bit the staged sequence of the kernels above they
// replace, and the CPU's passes (kernels/bf16_fused.hpp) within the bf16 bound (column sums 1e-5) ----
// The staged sequence a narrowing pass with its bias sums replaces — `values` (fp32, [N, out]) narrowed,
// and bias_backward's column sums of them added to ref_db — against the pass's results, bit for bit.
void compare_narrow_bias(const std::string& name, const std::string& narrowed_name, const float* values, int64_t N,
                         int64_t out, Dev<uint16_t>& ref16, Dev<float>& ref_db, const Dev<uint16_t>& got16,
                         const Dev<float>& got_db, const Scratch& ws) {
  lattice::cuda::to_bf16(values, ref16.p, N * out);
  lattice::cuda::bias_backward(ref_db.p, values, N, out, ws.ws());
  compare_bits(name + " " + narrowed_name, "bwd", ref16.get(), got16.get());
  compare_bits(name + " db", "bwd", ref_db.get(), got_db.get());
}
void check_bf16_fused() {
  namespace cu = lattice::cuda;
  // 200 rows: three column chunks, the last one short.
  const int64_t b = 2, s = 100, a = 4, dh = 64, hl = a * dh, N = b * s, C = 3 * hl;
  const lattice::HeadShape hs{b, s, a, dh};
  {  // linear_forward_bf16's fallback: bf16(y + bf16(bias)), against the host's composition. The bias at
     // scale 3 has bits below bf16's, so a pass adding it unrounded fails (tried).
    const auto y = randn(size_t(N * C), 3.0f), bias = randn(size_t(C), 3.0f), bias_rounded = bf16_valued(bias);
    std::vector<uint16_t> want(y.size());
    std::vector<float> sum(y.size());
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) sum[size_t(r * C + c)] = y[size_t(r * C + c)] + bias_rounded[size_t(c)];
    lattice::to_bf16(sum.data(), want.data(), N * C);
    Dev<float> d_y(y), d_b(bias);
    Dev<uint16_t> got(y.size());
    cu::narrow_rows_bias(got.p, d_y.p, d_b.p, N, C);
    compare_bits("narrow_rows_bias y16", "fwd", want, got.get());
  }
  {  // GeLU forward from the kept bf16 input (the fc1 GEMM's bf16 output)
    const size_t n = size_t(N * 4 * hl);
    std::vector<uint16_t> pre16(n);
    lattice::to_bf16(randn(n, 3.0f).data(), pre16.data(), int64_t(n));
    Dev<uint16_t> p16(pre16), a16(n), a16s(n);
    Dev<float> wide(n), t(n);
    cu::gelu_forward16(a16.p, p16.p, int64_t(n));
    cu::from_bf16(p16.p, wide.p, int64_t(n));
    cu::gelu_forward(t.p, wide.p, int64_t(n));
    cu::to_bf16(t.p, a16s.p, int64_t(n));
    compare_bits("gelu_forward16 act16", "fwd", a16s.get(), a16.get());
    std::vector<uint16_t> ca(n);
    lattice::gelu_forward16(ca.data(), pre16.data(), int64_t(n));
    compare_bf16("gelu_forward16 act16 vs cpu", "fwd", ca, a16.get());
    // The four-wide kernel's other forms: a count not a multiple of 4 (its last elements scalar), both
    // pointers one element off their alignment, and only the output off (all scalar). Dev poisons
    // its memory (0xFFFF halves): an element left unwritten fails, and so does one written outside the
    // call's range (the elements before and after it must still hold the poison).
    struct Form {
      int64_t in_off, out_off;
      const char* name;
    };
    for (const Form form : {Form{0, 0, " (n % 4 = 1)"}, Form{1, 1, " (unaligned)"}, Form{0, 1, " (output unaligned)"}}) {
      const int64_t m = int64_t(n) - 7;  // n is a multiple of 4
      Dev<uint16_t> b16(n);
      cu::gelu_forward16(b16.p + form.out_off, p16.p + form.in_off, m);
      const auto bb = b16.get(), as = a16s.get();
      std::vector<uint16_t> got_a(bb.begin() + form.out_off, bb.begin() + form.out_off + m),
          want_a(as.begin() + form.in_off, as.begin() + form.in_off + m);
      for (int64_t i = 0; i < int64_t(n); ++i) {  // outside the range: compared as part of the output
        if (i >= form.out_off && i < form.out_off + m) continue;
        got_a.push_back(bb[size_t(i)]);
        want_a.push_back(0xffff);
      }
      compare_bits(std::string("gelu_forward16 act16") + form.name, "fwd", want_a, got_a);
    }
  }
  {  // LayerNorm forward and backward
    const int64_t R = 256, H = 768;
    const auto x = randn(size_t(R * H), 2.0f), w = randn(size_t(H)), bias = randn(size_t(H));
    Dev<float> d_x(x), d_w(w), d_b(bias), y{size_t(R * H)}, m{size_t(R)}, r{size_t(R)}, ms{size_t(R)}, rs{size_t(R)};
    Dev<uint16_t> x16{size_t(R * H)}, y16{size_t(R * H)}, x16s{size_t(R * H)}, y16s{size_t(R * H)};
    cu::layernorm_forward_bf16(x16.p, y16.p, m.p, r.p, d_x.p, d_w.p, d_b.p, R, H);
    cu::layernorm_forward(y.p, ms.p, rs.p, d_x.p, d_w.p, d_b.p, R, H);
    cu::to_bf16(y.p, y16s.p, R * H), cu::to_bf16(d_x.p, x16s.p, R * H);
    compare_bits("layernorm_forward_bf16 y16", "fwd", y16s.get(), y16.get());
    compare_bits("layernorm_forward_bf16 x16", "fwd", x16s.get(), x16.get());
    compare_bits("layernorm_forward_bf16 mean", "fwd", ms.get(), m.get());
    compare_bits("layernorm_forward_bf16 rstd", "fwd", rs.get(), r.get());
    std::vector<uint16_t> cx(static_cast<size_t>(R * H)), cy(static_cast<size_t>(R * H));
    std::vector<float> cm(static_cast<size_t>(R)), cr(static_cast<size_t>(R));
    lattice::layernorm_forward_bf16(cx.data(), cy.data(), cm.data(), cr.data(), x.data(), w.data(), bias.data(), R, H);
    compare_bf16("layernorm_forward_bf16 y16 vs cpu", "fwd", cy, y16.get());

    const auto dy = randn(size_t(R * H));
    const auto dx0 = randn(size_t(R * H), 0.1f), dw0 = randn(size_t(H), 0.1f), db0 = randn(size_t(H), 0.1f);
    Dev<float> d_dy(dy), dx(dx0), dw(dw0), db(db0), dxs(dx0), dws(dw0), dbs(db0), wide{size_t(R * H)};
    Scratch ws(cu::layernorm_backward_workspace_bytes(R, H));
    cu::layernorm_backward_bf16(dx.p, dw.p, db.p, d_dy.p, x16.p, d_w.p, m.p, r.p, R, H, ws.ws());
    cu::from_bf16(x16.p, wide.p, R * H);
    cu::layernorm_backward(dxs.p, dws.p, dbs.p, d_dy.p, wide.p, d_w.p, m.p, r.p, R, H, ws.ws());
    compare_bits("layernorm_backward_bf16 dinp", "bwd", dxs.get(), dx.get());
    compare_bits("layernorm_backward_bf16 dweight", "bwd", dws.get(), dw.get());
    compare_bits("layernorm_backward_bf16 dbias", "bwd", dbs.get(), db.get());
    auto cdx = dx0, cdw = dw0, cdb = db0;
    lattice::layernorm_backward_bf16(cdx.data(), cdw.data(), cdb.data(), dy.data(), x16.get().data(), w.data(),
                                     m.get().data(), r.get().data(), R, H);
    compare("layernorm_backward_bf16 dinp vs cpu", "bwd", cdx, dx.get());
    compare("layernorm_backward_bf16 dweight vs cpu", "bwd", cdw, dw.get());
  }
  {  // head layouts
    const size_t n = size_t(b * a * s * dh);
    const auto qkv = randn(size_t(N * C)), heads = randn(n);
    Dev<float> d_qkv(qkv), d_heads(heads), q(n), k(n), v(n), rows{size_t(N * hl)};
    Dev<uint16_t> q16(n), k16(n), v16(n), q16s(n), k16s(n), v16s(n), o16{size_t(N * hl)}, o16s{size_t(N * hl)};
    Dev<uint16_t> qkv16{size_t(N * C)};
    // The bf16 rows split (split_heads16: the QKV GEMM's bf16 output) against split then narrowed.
    cu::to_bf16(d_qkv.p, qkv16.p, N * C);
    cu::split_heads16(q16.p, k16.p, v16.p, qkv16.p, b, s, a, dh);
    cu::split_heads(q.p, k.p, v.p, d_qkv.p, b, s, a, dh);
    cu::to_bf16(q.p, q16s.p, int64_t(n)), cu::to_bf16(k.p, k16s.p, int64_t(n)), cu::to_bf16(v.p, v16s.p, int64_t(n));
    compare_bits("split_heads16 q", "fwd", q16s.get(), q16.get());
    compare_bits("split_heads16 k", "fwd", k16s.get(), k16.get());
    compare_bits("split_heads16 v", "fwd", v16s.get(), v16.get());
    std::vector<uint16_t> cq(n), ck(n), cv(n), co(static_cast<size_t>(N * hl));
    lattice::split_heads16(cq.data(), ck.data(), cv.data(), qkv16.get().data(), hs);
    compare_bits("split_heads16 v vs cpu", "fwd", cv, v16.get());
    {  // split and widened (the fp32 attention's operands from the kept QKV rows), against the CPU's
      cu::split_heads_widened(q.p, k.p, v.p, qkv16.p, b, s, a, dh);
      std::vector<float> wq(n), wk(n), wv(n);
      lattice::split_heads_widened(wq.data(), wk.data(), wv.data(), qkv16.get().data(), hs);
      compare_bits("split_heads_widened q vs cpu", "fwd", wq, q.get());
      compare_bits("split_heads_widened k vs cpu", "fwd", wk, k.get());
      compare_bits("split_heads_widened v vs cpu", "fwd", wv, v.get());
    }
    {  // heads at addresses 2 bytes past 16-byte alignment: the two-byte form, the same bits
      Dev<uint16_t> q16u{n + 1}, k16u{n + 1}, v16u{n + 1};
      cu::split_heads16(q16u.p + 1, k16u.p + 1, v16u.p + 1, qkv16.p, b, s, a, dh);
      compare_bits("split_heads16 q, unaligned", "fwd", q16.get(), past_first(q16u.get()));
      compare_bits("split_heads16 k, unaligned", "fwd", k16.get(), past_first(k16u.get()));
      compare_bits("split_heads16 v, unaligned", "fwd", v16.get(), past_first(v16u.get()));
    }
    cu::merge_heads_bf16(o16.p, d_heads.p, b, s, a, dh);
    cu::merge_heads(rows.p, d_heads.p, b, s, a, dh);
    cu::to_bf16(rows.p, o16s.p, N * hl);
    compare_bits("merge_heads_bf16", "fwd", o16s.get(), o16.get());
    lattice::merge_heads_bf16(co.data(), heads.data(), hs);
    compare_bits("merge_heads_bf16 vs cpu", "fwd", co, o16.get());
    // And back: the bf16 rows widened and unmerged in one pass, against the two passes and the CPU.
    Dev<float> back(n), back2(n);
    cu::unmerge_heads_bf16(back.p, o16.p, b, s, a, dh);
    cu::from_bf16(o16.p, rows.p, N * hl);
    cu::unmerge_heads(back2.p, rows.p, b, s, a, dh);
    compare_bits("unmerge_heads_bf16", "bwd", back2.get(), back.get());
    std::vector<float> cback(n);
    lattice::unmerge_heads_bf16(cback.data(), co.data(), hs);
    compare_bits("unmerge_heads_bf16 vs cpu", "bwd", cback, back.get());
  }
  {  // the narrowing backwards with their bias column sums
    const int64_t out = 4 * hl;
    const auto dy = randn(size_t(N * out)), pre = randn(size_t(N * out), 3.0f), db0 = randn(size_t(out), 0.1f);
    const auto pre16 = narrowed(pre);
    Dev<float> d_dy(dy), g{size_t(N * out)}, wide{size_t(N * out)}, db(db0), dbs(db0);
    Dev<uint16_t> d_pre16(pre16), o16{size_t(N * out)}, o16s{size_t(N * out)};
    Scratch ws(cu::bias_backward_workspace_bytes(N, C > out ? C : out));
    cu::narrow_bias_backward(o16.p, db.p, d_dy.p, N, out, ws.ws());
    compare_narrow_bias("narrow_bias_backward", "dy16", d_dy.p, N, out, o16s, dbs, o16, db, ws);
    auto cdb = db0;
    std::vector<uint16_t> c16(static_cast<size_t>(N * out));
    lattice::narrow_bias_backward(c16.data(), cdb.data(), dy.data(), N, out);
    compare("narrow_bias_backward db vs cpu", "bwd", cdb, db.get());
    {  // the output 2 bytes past 4-byte alignment: the one-column form, the same bits as the pairs'
      Dev<uint16_t> o16u{size_t(N * out) + 1};
      Dev<float> dbu(db0);
      cu::narrow_bias_backward(o16u.p + 1, dbu.p, d_dy.p, N, out, ws.ws());
      compare_bits("narrow_bias_backward dy16, unaligned", "bwd", o16.get(), past_first(o16u.get()));
      compare_bits("narrow_bias_backward db, unaligned", "bwd", db.get(), dbu.get());
    }

    // The GeLU's backward from its output gradient in bf16 (the FC2 input gradient's GEMM writes it so).
    db.upload(db0), dbs.upload(db0), o16.poison(), o16s.poison();
    std::vector<uint16_t> dy16(static_cast<size_t>(N * out));
    lattice::to_bf16(dy.data(), dy16.data(), N * out);
    Dev<uint16_t> d_dy16(dy16);
    Dev<float> dy_w{size_t(N * out)};
    cu::gelu_backward_narrow(o16.p, db.p, d_pre16.p, d_dy16.p, N, out, ws.ws());
    cu::from_bf16(d_pre16.p, wide.p, N * out);
    cu::from_bf16(d_dy16.p, dy_w.p, N * out);
    cu::gelu_backward(g.p, wide.p, dy_w.p, N * out);
    compare_narrow_bias("gelu_backward_narrow", "g16", g.p, N, out, o16s, dbs, o16, db, ws);
    cdb = db0;
    lattice::gelu_backward_narrow(c16.data(), cdb.data(), pre16.data(), dy16.data(), N, out);
    compare_bf16("gelu_backward_narrow g16 vs cpu", "bwd", c16, o16.get());
    compare("gelu_backward_narrow db vs cpu", "bwd", cdb, db.get());
    {  // the output 2 bytes past 4-byte alignment: the one-column form, the same bits as the pairs'
      Dev<uint16_t> o16u{size_t(N * out) + 1};
      Dev<float> dbu(db0);
      cu::gelu_backward_narrow(o16u.p + 1, dbu.p, d_pre16.p, d_dy16.p, N, out, ws.ws());
      compare_bits("gelu_backward_narrow g16, unaligned", "bwd", o16.get(), past_first(o16u.get()));
      compare_bits("gelu_backward_narrow db, unaligned", "bwd", db.get(), dbu.get());
    }
    {  // in place (linear_backward_input_gelu_bf16's fallback: the GEMM's bf16 D is the GeLU's gradient's room)
      Dev<uint16_t> inplace(dy16);
      Dev<float> dbi(db0);
      cu::gelu_backward_narrow(inplace.p, dbi.p, d_pre16.p, inplace.p, N, out, ws.ws());
      compare_bits("gelu_backward_narrow g16, in place", "bwd", o16.get(), inplace.get());
      compare_bits("gelu_backward_narrow db, in place", "bwd", db.get(), dbi.get());
    }
    {  // bias_backward_bf16 (the DGELU epilogue's bias sums): bias_backward of the widened values, the bits
      Dev<float> dbb(db0), dbr(db0);
      cu::bias_backward_bf16(dbb.p, d_dy16.p, N, out, ws.ws());
      cu::bias_backward(dbr.p, dy_w.p, N, out, ws.ws());
      compare_bits("bias_backward_bf16 db", "bwd", dbr.get(), dbb.get());
      Dev<uint16_t> unaligned{size_t(N * out) + 1};
      cuda_ok(cudaMemcpy(unaligned.p + 1, d_dy16.p, size_t(N * out) * 2, cudaMemcpyDeviceToDevice), "copy");
      dbb.upload(db0);
      cu::bias_backward_bf16(dbb.p, unaligned.p + 1, N, out, ws.ws());
      compare_bits("bias_backward_bf16 db, unaligned", "bwd", dbr.get(), dbb.get());
    }

    const size_t n = size_t(b * a * s * dh);
    const auto dq = randn(n), dk = randn(n), dv = randn(n), qb0 = randn(size_t(C), 0.1f);
    Dev<float> d_dq(dq), d_dk(dk), d_dv(dv), merged{size_t(N * C)}, qb(qb0), qbs(qb0);
    Dev<uint16_t> m16{size_t(N * C)}, m16s{size_t(N * C)};
    cu::merge_qkv_grads_narrow(m16.p, qb.p, d_dq.p, d_dk.p, d_dv.p, b, s, a, dh, ws.ws());
    cu::merge_qkv_grads(merged.p, d_dq.p, d_dk.p, d_dv.p, b, s, a, dh);
    compare_narrow_bias("merge_qkv_grads_narrow", "dqkv16", merged.p, N, C, m16s, qbs, m16, qb, ws);
    auto cqb = qb0;
    std::vector<uint16_t> cm16(static_cast<size_t>(N * C));
    lattice::merge_qkv_grads_narrow(cm16.data(), cqb.data(), dq.data(), dk.data(), dv.data(), hs);
    compare_bits("merge_qkv_grads_narrow dqkv16 vs cpu", "bwd", cm16, m16.get());
    compare("merge_qkv_grads_narrow db vs cpu", "bwd", cqb, qb.get());
  }
  {  // causal softmax backward, probs kept in bf16
    const int64_t batch = 6, sl = 200;
    const size_t n = size_t(batch * sl * sl);
    std::vector<float> scores = randn(n), probs(n);
    lattice::softmax_causal_forward(probs.data(), scores.data(), batch, sl);
    const auto p16 = narrowed(probs);
    const auto dp = randn(n);
    Dev<uint16_t> d_p16(p16), ds16(n), ds16s(n);
    Dev<float> d_dp(dp), wide(n), ds(n);
    cu::softmax_causal_backward_bf16(ds16.p, d_dp.p, d_p16.p, batch, sl);
    cu::from_bf16(d_p16.p, wide.p, int64_t(n));
    cu::softmax_causal_backward(ds.p, d_dp.p, wide.p, batch, sl);
    cu::to_bf16(ds.p, ds16s.p, int64_t(n));
    compare_bits("softmax_causal_backward_bf16", "bwd", ds16s.get(), ds16.get());
    std::vector<uint16_t> c16(n);
    lattice::softmax_causal_backward_bf16(c16.data(), dp.data(), p16.data(), batch, sl);
    compare_bf16("softmax_causal_backward_bf16 vs cpu", "bwd", c16, ds16.get());
  }
  {  // AdamW with the bf16 weight copy
    const int64_t n = (1 << 20) + 5;
    auto m = randn(size_t(n), 0.01f), v = randn(size_t(n), 0.01f), w = randn(size_t(n), 0.02f);
    for (float& x : v) x = x * x;
    const auto g = randn(size_t(n), 0.01f);
    const lattice::AdamWScalars sc = lattice::adamw_scalars(0.9, 0.95, 1e-8, 6e-4, 17);
    const float decay = float(1.0 - 6e-4 * 0.1);
    Dev<float> d_m(m), d_v(v), d_w(w), d_g(g), ms(m), vs(v), wsv(w);
    Dev<uint16_t> w16{size_t(n)}, w16s{size_t(n)};
    cu::adamw_update_bf16(d_m.p, d_v.p, d_w.p, w16.p, d_g.p, n, decay, sc);
    cu::adamw_update(ms.p, vs.p, wsv.p, d_g.p, n, decay, sc);
    cu::to_bf16(wsv.p, w16s.p, n);
    compare_bits("adamw_update_bf16 w", "upd", wsv.get(), d_w.get());
    compare_bits("adamw_update_bf16 w16", "upd", w16s.get(), w16.get());
    compare_bits("adamw_update_bf16 m", "upd", ms.get(), d_m.get());
    compare_bits("adamw_update_bf16 v", "upd", vs.get(), d_v.get());
    // Clipping's factor in the pass: bit for bit the scaled copy it replaces (scale_grads, then the
    // update of the copy), with and without the bf16 copy; and the CPU's fused update within 1e-5.
    const float clip = 0.37f;
    for (const bool narrow : {true, false}) {
      Dev<float> fm(m), fv(v), fw(w), sm(m), sv(v), sw(w), scaled(g);
      Dev<uint16_t> f16{size_t(n)}, s16{size_t(n)};
      cu::adamw_update_bf16(fm.p, fv.p, fw.p, narrow ? f16.p : nullptr, d_g.p, n, decay, sc, clip);
      cu::scale_grads(scaled.p, n, clip);
      cu::adamw_update_bf16(sm.p, sv.p, sw.p, narrow ? s16.p : nullptr, scaled.p, n, decay, sc);
      const std::string name = std::string("adamw_update_bf16 x clip") + (narrow ? "" : " (no copy)");
      compare_bits(name + " w", "upd", sw.get(), fw.get());
      compare_bits(name + " m", "upd", sm.get(), fm.get());
      compare_bits(name + " v", "upd", sv.get(), fv.get());
      if (narrow) compare_bits(name + " w16", "upd", s16.get(), f16.get());
      if (!narrow) {
        auto cm = m, cv = v, cw = w;
        lattice::adamw_update_fused(cm.data(), cv.data(), cw.data(), nullptr, g.data(), n, decay, sc, clip);
        compare(name + " w vs cpu", "upd", cw, fw.get());
      }
    }
  }
}

// ---- fp16 casts (tensor/half.hpp) and the loss-scaling pieces, exactly ----
void check_fp16() {
  const lattice::HalfFormat fp16{true};
  // Random bit patterns (every exponent: subnormals, overflow, NaN payloads) and the edge values.
  const int64_t n = (1 << 22) + 16;
  std::vector<float> x(static_cast<size_t>(n));
  std::uniform_int_distribution<uint32_t> bits;
  for (auto& f : x) {
    const uint32_t u = bits(rng);
    std::memcpy(&f, &u, 4);
  }
  const float edges[16] = {65504.0f, 65519.996f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.8p-24f, 0x1p-14f,
                           0x1.ffcp-15f, 1e-40f, -0.0f, INFINITY, -INFINITY, NAN, 1.0009765625f, 1.00048828125f};
  std::copy(std::begin(edges), std::end(edges), x.begin());
  std::vector<uint16_t> h(static_cast<size_t>(n));
  fp16.narrow(x.data(), h.data(), n);
  Dev<float> d_x(x);
  Dev<uint16_t> d_h(static_cast<size_t>(n));
  lattice::cuda::to_fp16(d_x.p, d_h.p, n);
  const auto got = d_h.get();
  size_t differ = 0;
  for (size_t i = 0; i < h.size(); ++i) differ += h[i] != got[i];
  line("to_fp16 [bits]", "fwd", differ ? 1.0 : 0.0, double(differ) / double(n), 0.0);

  std::vector<uint16_t> all(65536);  // every fp16
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  std::vector<float> wide(all.size());
  fp16.widen(all.data(), wide.data(), int64_t(all.size()));
  Dev<uint16_t> d_all(all);
  Dev<float> d_wide(all.size());
  lattice::cuda::from_fp16(d_all.p, d_wide.p, int64_t(all.size()));
  const auto gw = d_wide.get();
  differ = 0;
  for (size_t i = 0; i < wide.size(); ++i) differ += std::memcmp(&wide[i], &gw[i], 4) != 0;
  line("from_fp16 (all 65536) [bits]", "fwd", differ ? 1.0 : 0.0, double(differ) / double(wide.size()), 0.0);

  const int64_t m = (1 << 20) + 7;
  const auto w = randn(size_t(m)), g = randn(size_t(m), 0.01f);
  std::vector<uint16_t> acc(static_cast<size_t>(m));
  fp16.narrow(w.data(), acc.data(), m);
  Dev<uint16_t> d_acc(acc);
  Dev<float> d_g(g);
  fp16.accumulate(g.data(), acc.data(), m);
  lattice::cuda::fp16_accumulate(d_g.p, d_acc.p, m);
  const auto ga = d_acc.get();
  differ = 0;
  for (size_t i = 0; i < acc.size(); ++i) differ += acc[i] != ga[i];
  line("fp16_accumulate [bits]", "fwd", differ ? 1.0 : 0.0, double(differ) / double(m), 0.0);

  // Loss scaling: the overflow flag (engine/owned_grads.cpp's all_finite, negated) over two pieces
  // into one flag, and the unscale by float(1.0 / scale) (train/trainer.cpp).
  Dev<int32_t> d_flag(1);
  const int64_t pieces[2] = {m, 1000};
  for (int bad_at : {-1, 0, 1, 2}) {  // none; an inf last in piece 0; a NaN in piece 1; a -inf first
    std::vector<float> p0 = g, p1(static_cast<size_t>(pieces[1]), 0.5f);
    if (bad_at == 0) p0.back() = INFINITY;
    if (bad_at == 1) p1[500] = NAN;
    if (bad_at == 2) p0.front() = -INFINITY;
    bool finite = true;
    for (float f : p0) finite = finite && std::isfinite(f);
    for (float f : p1) finite = finite && std::isfinite(f);
    Dev<float> d_p0(p0), d_p1(p1);
    d_flag.upload({0});
    lattice::cuda::grads_nonfinite(d_flag.p, d_p0.p, pieces[0]);
    lattice::cuda::grads_nonfinite(d_flag.p, d_p1.p, pieces[1]);
    const int32_t flag = d_flag.get()[0];
    const bool ok = (flag != 0) == !finite && (flag == 0 || flag == 1);
    line("grads_nonfinite case " + std::to_string(bad_at + 1) + " [flag]", "fwd", ok ? 0.0 : 1.0, ok ? 0.0 : 1.0, 0.0);
  }
  const double scale = 32768.0 * 3;
  std::vector<float> un = g;
  for (float& f : un) f *= float(1.0 / scale);
  lattice::cuda::unscale_grads(d_g.p, m, scale);
  const auto gu = d_g.get();
  const bool same = std::memcmp(un.data(), gu.data(), un.size() * 4) == 0;
  line("unscale_grads [bits]", "fwd", same ? 0.0 : 1.0, same ? 0.0 : 1.0, 0.0);
}

// ---- timings (not pass/fail): cudaEvent time of one call, the median of 20 after 3 warm-ups ----
// The timed calls' inputs: bytes from a hash of their index (splitmix64), then for fp32 and bf16 buffers
// values uniform in [-2, 2). Neither zeros nor one constant, which can run faster than real data (a
// bf16 GEMM on zeros ran 13% faster than on random data on an H200 of this workplace); a hash, not the
// normal draws, so a gigabyte of inputs costs the host a second, not a minute.
std::vector<unsigned char> noise_bytes(size_t n, size_t bytes, uint64_t seed) {
  std::vector<unsigned char> host(n * bytes);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = lattice::cuda::splitmix64_final(seed * 0x100000001b3ull + i + 0x9e3779b97f4a7c15ull);
    const float u = float(r >> 40) * (4.0f / 16777216.0f) - 2.0f;  // 24 bits: exact in a float
    if (bytes == 4) std::memcpy(&host[4 * i], &u, 4);
    else if (bytes == 2) { const uint16_t h = lattice::to_bf16(u); std::memcpy(&host[2 * i], &h, 2); }
    else host[i] = static_cast<unsigned char>(r);
  }
  return host;
}
void* noise_on_device(size_t n, size_t bytes, uint64_t seed) {
  const std::vector<unsigned char> host = noise_bytes(n, bytes, seed);
  void* p = nullptr;
  cuda_ok(cudaMalloc(&p, std::max<size_t>(1, host.size())), "cudaMalloc");
  cuda_ok(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  return p;
}
// LATTICE_CHECK_PROFILE=all, or some of gemm,ce,passes,flash,tc (on a GPU): no checks, and each timed
// call made once, so that a profiler sees one launch of each kernel (scripts/device-check.sh profile).
const char* profile_groups() {
  static const char* groups = kHostSim ? nullptr : std::getenv("LATTICE_CHECK_PROFILE");
  return groups;
}
template <class F>
double median_ms(F f) {
  if (kHostSim || profile_groups()) {  // once, for its text (the host) or for a profiler; timed never
    f();
    return 0.0;
  }
  cudaEvent_t t0, t1;
  cuda_ok(cudaEventCreate(&t0), "event");
  cuda_ok(cudaEventCreate(&t1), "event");
  for (int i = 0; i < 3; ++i) f();
  cuda_ok(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cuda_ok(cudaEventRecord(t0), "record");
    f();
    cuda_ok(cudaEventRecord(t1), "record");
    cuda_ok(cudaEventSynchronize(t1), "sync");
    float e = 0.0f;
    cuda_ok(cudaEventElapsedTime(&e, t0, t1), "elapsed");
    ms.push_back(e);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  std::sort(ms.begin(), ms.end());
  return 0.5 * (ms[9] + ms[10]);
}

void timing_line(const std::string& name, double ms, double flops) {
  std::printf("timing %-44s median_ms=%.3f tflops=%.1f\n", name.c_str(), ms, flops / (ms * 1e-3) / 1e12);
  std::fflush(stdout);
}

// GPT-2 124M at b·s = 8192 tokens, bf16 operands (fp32 accumulation, fp32 C): the QKV, FC1, FC2 and LM
// head GEMMs, each as the forward (x·W, W stored [in, out]), the input gradient (dy·Wᵀ) and the
// weight gradient (dW += xᵀ·dy). No bias (cuda::gemm's epilogue is not what is timed).
//
// The context tunes as LATTICE_CUDA_GEMM_TUNE says (on by default); the forward, input-gradient and
// weight-gradient lines are timed again with the heuristic's first algorithm, and the tuner's choices
// follow as notes.
void timing_gemm() {
  lattice::cuda::GemmContext ctx, first;
  first.set_tuning(false);
  std::printf("timing gemm: the tuner is %s (LATTICE_CUDA_GEMM_TUNE)\n", ctx.tuning() ? "on" : "off");
  const int64_t N = 8192;
  const int64_t shapes[4][2] = {{768, 2304}, {768, 3072}, {3072, 768}, {768, 50304}};
  const char* names[4] = {"qkv", "fc1", "fc2", "lm_head"};
  for (int t = 0; t < 4; ++t) {
    const int64_t in = shapes[t][0], out = shapes[t][1];
    Dev<uint16_t> x(size_t(N * in)), w(size_t(in * out)), dy(size_t(N * out));
    Dev<float> y(size_t(N * out)), dx(size_t(N * in)), dw(size_t(in * out));
    // Hashed inputs (noise_on_device), enough for the largest of x, w, dy (fc2's x, [8192×3072], is
    // larger than its dy).
    const size_t most = size_t(std::max({N * in, N * out, in * out}));
    void* noise = noise_on_device(most, 2, uint64_t(t + 1));
    cuda_ok(cudaMemcpy(x.p, noise, x.n * 2, cudaMemcpyDeviceToDevice), "copy");
    cuda_ok(cudaMemcpy(w.p, noise, w.n * 2, cudaMemcpyDeviceToDevice), "copy");
    cuda_ok(cudaMemcpy(dy.p, noise, dy.n * 2, cudaMemcpyDeviceToDevice), "copy");
    cudaFree(noise);
    cuda_ok(cudaMemset(dw.p, 0, dw.n * 4), "zero");
    const double flops = 2.0 * double(N) * double(in) * double(out);
    const std::string base = "gemm bf16 " + std::string(names[t]) + " ";
    const lattice::GemmShape fwd{1, N, out, in, false, false, 1.0f, false};
    timing_line(base + "fwd, heuristic's first",
                median_ms([&] { first.gemm(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y.p); }), flops);
    timing_line(base + "fwd [" + std::to_string(N) + "x" + std::to_string(in) + "]·[" + std::to_string(in) + "x" +
                    std::to_string(out) + "]",
                median_ms([&] { ctx.gemm(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y.p); }), flops);
    if (t < 2) {  // the outputs read in bf16 (qkv's, fc1's): linear_forward_bf16's two ways with the bias
      Dev<float> bias(static_cast<size_t>(out));
      Dev<uint16_t> y16(static_cast<size_t>(N * out)), bias16(static_cast<size_t>(out));
      void* b32 = noise_on_device(bias.n, 4, 7);
      cuda_ok(cudaMemcpy(bias.p, b32, bias.n * 4, cudaMemcpyDeviceToDevice), "copy");
      cudaFree(b32);
      lattice::cuda::to_bf16(bias.p, bias16.p, out);
      timing_line(base + "fwd + bias, fp32 C then narrow_rows_bias", median_ms([&] {
                    ctx.gemm(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y.p);
                    lattice::cuda::narrow_rows_bias(y16.p, y.p, bias.p, N, out);
                  }),
                  flops);
      if (ctx.gemm_bf16_out(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y16.p, bias16.p))
        timing_line(base + "fwd + bias, bf16 D", median_ms([&] {
                      ctx.gemm_bf16_out(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y16.p, bias16.p);
                    }),
                    flops);
      else
        std::printf("timing %s: cuBLASLt offers no bf16 D with a bf16 bias\n", (base + "fwd + bias").c_str());
      if (t == 1) {  // FC1 with its GeLU (linear_gelu_forward_bf16's two ways)
        Dev<uint16_t> pre16(static_cast<size_t>(N * out));
        if (ctx.gemm_bf16_gelu(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y16.p, pre16.p, bias16.p)) {
          timing_line(base + "fwd + bias + GeLU, bf16 D then gelu_forward16", median_ms([&] {
                        ctx.gemm_bf16_out(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, pre16.p, bias16.p);
                        lattice::cuda::gelu_forward16(y16.p, pre16.p, N * out);
                      }),
                      flops);
          timing_line(base + "fwd + bias + GeLU in the epilogue", median_ms([&] {
                        ctx.gemm_bf16_gelu(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y16.p, pre16.p, bias16.p);
                      }),
                      flops);
        } else {
          std::printf("timing %s: cuBLASLt offers no GELU_AUX_BIAS epilogue\n", (base + "fwd + bias + GeLU").c_str());
        }
      }
    }
    if (t == 2) {  // FC2: its output added into the residual stream, and its input gradient with the GeLU's
      Dev<float> bias(static_cast<size_t>(out)), resid(static_cast<size_t>(N * out)), db(static_cast<size_t>(in));
      Dev<uint16_t> dx16(static_cast<size_t>(N * in));
      cuda_ok(cudaMemset(bias.p, 0, bias.n * 4), "zero");
      cuda_ok(cudaMemset(resid.p, 0, resid.n * 4), "zero");
      cuda_ok(cudaMemset(db.p, 0, db.n * 4), "zero");
      Scratch ws(lattice::cuda::bias_backward_workspace_bytes(N, in));
      const lattice::GemmShape acc{1, N, out, in, false, false, 1.0f, true};
      timing_line(base + "fwd + bias, then residual_add", median_ms([&] {
                    ctx.gemm(fwd, {x.p, DType::bf16}, {w.p, DType::bf16}, y.p, bias.p);
                    lattice::cuda::residual_add(resid.p, y.p, N * out);
                  }),
                  flops);
      timing_line(base + "fwd + bias added into the residual (+=)", median_ms([&] {
                    ctx.gemm(acc, {x.p, DType::bf16}, {w.p, DType::bf16}, resid.p, bias.p);
                  }),
                  flops);
      // x ([N, in] bf16 noise) stands for the GeLU's kept input.
      const lattice::GemmShape dgrad{1, N, in, out, false, true, 1.0f, false};
      if (ctx.gemm_bf16_out(dgrad, {dy.p, DType::bf16}, {w.p, DType::bf16}, dx16.p))
        timing_line(base + "dx + GeLU backward, bf16 D then gelu_backward_narrow", median_ms([&] {
                      ctx.gemm_bf16_out(dgrad, {dy.p, DType::bf16}, {w.p, DType::bf16}, dx16.p);
                      lattice::cuda::gelu_backward_narrow(dx16.p, db.p, x.p, dx16.p, N, in, ws.ws());
                    }),
                    flops);
      if (ctx.gemm_bf16_dgelu(dgrad, {dy.p, DType::bf16}, {w.p, DType::bf16}, dx16.p, x.p))
        timing_line(base + "dx + GeLU backward in the epilogue, bias_backward_bf16", median_ms([&] {
                      ctx.gemm_bf16_dgelu(dgrad, {dy.p, DType::bf16}, {w.p, DType::bf16}, dx16.p, x.p);
                      lattice::cuda::bias_backward_bf16(db.p, dx16.p, N, in, ws.ws());
                    }),
                    flops);
      else
        std::printf("timing %s: cuBLASLt offers no DGELU epilogue\n", (base + "dx + GeLU backward").c_str());
    }
    const lattice::GemmShape dgrad{1, N, in, out, false, true, 1.0f, false};
    timing_line(base + "dx, heuristic's first",
                median_ms([&] { first.gemm(dgrad, {dy.p, DType::bf16}, {w.p, DType::bf16}, dx.p); }), flops);
    timing_line(base + "dx = dy·Wᵀ",
                median_ms([&] { ctx.gemm(dgrad, {dy.p, DType::bf16}, {w.p, DType::bf16}, dx.p); }), flops);
    const lattice::GemmShape wgrad{1, in, out, N, true, false, 1.0f, true};
    timing_line(base + "dW, heuristic's first",
                median_ms([&] { first.gemm(wgrad, {x.p, DType::bf16}, {dy.p, DType::bf16}, dw.p); }), flops);
    timing_line(base + "dW += xᵀ·dy",
                median_ms([&] { ctx.gemm(wgrad, {x.p, DType::bf16}, {dy.p, DType::bf16}, dw.p); }), flops);
  }
  for (const auto& t : ctx.tunings())
    std::printf("timing gemm tuner %s: algorithm %d of %d offered (%d with the first's bits), %.3f -> %.3f ms\n",
                t.gemm.c_str(), t.chosen + 1, t.offered, t.same_bits, double(t.first_ms), double(t.chosen_ms));
}

// The cross-entropy's forward at GPT-2 124M's vocabulary (50257 of 50304 columns) and b·s = 8192 rows:
// the one-pass kernel against the three it stands for. GB/s counts the row read once and written once
// (what any forward must move), so the three kernels' figure is what that traffic achieves through them.
void timing_cross_entropy() {
  const int64_t N = 8192, V = 50257, Vp = 50304;
  const size_t rows = size_t(N);
  std::vector<int32_t> targets(rows);
  for (size_t n = 0; n < rows; ++n) targets[n] = int32_t((n * 7919) % size_t(V));
  // 64 random rows tiled over the 8192: the host's normal draws for 412 M values would hold the device
  // for seconds, and the kernels' speed does not depend on which rows repeat.
  const auto tile = randn(size_t(64 * Vp), 3.0f);
  std::vector<float> host(size_t(N * Vp));
  for (int64_t r = 0; r < N; r += 64) std::copy(tile.begin(), tile.end(), host.begin() + r * Vp);
  Dev<float> x(host), loss(rows), mx(rows), sum(rows), tl(rows);
  Dev<int32_t> t(targets);
  const double bytes = 2.0 * double(N) * double(Vp) * sizeof(float);
  const auto show = [&](const std::string& name, double ms, double moved) {
    std::printf("timing %-44s median_ms=%.3f gbps=%.0f\n", name.c_str(), ms, moved / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  };
  // In place: after the first call the rows are probabilities, which serve the timing as well.
  show("cross_entropy fwd 8192x50304, three kernels", median_ms([&] {
         lattice::cuda::ce_shard_max_target(mx.p, tl.p, x.p, t.p, 0, Vp, V, N);
         lattice::cuda::ce_shard_exp_sum(sum.p, x.p, mx.p, Vp, V, N);
         lattice::cuda::ce_shard_normalize(x.p, loss.p, mx.p, sum.p, tl.p, Vp, V, N);
       }),
       bytes);
  show(std::string("cross_entropy fwd 8192x50304, ") +
           (lattice::cuda::ce_whole_forward_fused(Vp) ? "one pass" : "one pass refused (3 kernels)"),
       median_ms([&] { lattice::cuda::ce_whole_forward(x.p, loss.p, mx.p, sum.p, tl.p, t.p, Vp, V, N); }), bytes);
  // The training step's forms under bf16 activations: the kept bf16 logits read (2 bytes a column) for
  // the statistics and losses, nothing written a column; the backward reading them again and writing
  // the bf16 gradient (2 + 2), where the fp32 probabilities' backward it replaced read 4 a column (run
  // 7's profile: 2.37 ms a step, about 0.59 ms for 8192 rows).
  std::vector<uint16_t> host16(host.size());
  lattice::to_bf16(host.data(), host16.data(), int64_t(host.size()));
  Dev<uint16_t> x16(host16), d16(host16.size());
  show("cross_entropy fwd 8192x50304, bf16 logits (statistics)",
       median_ms([&] { lattice::cuda::ce_whole_forward_bf16(x16.p, loss.p, mx.p, sum.p, tl.p, t.p, Vp, V, N); }),
       double(N) * double(Vp) * sizeof(uint16_t));
  const float scale = 1.0f / float(N);
  show("cross_entropy bwd 8192x50304, from bf16 logits",
       median_ms([&] { lattice::cuda::ce_shard_backward_bf16(d16.p, x16.p, mx.p, sum.p, t.p, 0, Vp, V, N, scale); }),
       double(N) * double(Vp) * 2 * sizeof(uint16_t));
}

// The memory-bound passes of a bf16 GPT-2 124M layer at b·s = 8192 rows (h 768, 12 heads, dh 64, 4h
// 3072), each as one call. GB/s counts what the pass must read and write at least (fp32 4 bytes, bf16
// 2; the column sums' partials and the LayerNorm's weights and statistics left out), so it reads
// directly against the card's memory bandwidth. Inputs are hashed values (noise_on_device), not zeros.
void timing_passes() {
  namespace cu = lattice::cuda;
  const int64_t N = 8192, h = 768, a = 12, dh = 64, b = 8, s = 1024, f = 4 * h;
  uint64_t seed = 100;
  const auto noise = [&](size_t n, size_t bytes) { return noise_on_device(n, bytes, ++seed); };
  std::vector<void*> held;
  const auto f32 = [&](int64_t n) { return static_cast<float*>(held.emplace_back(noise(size_t(n), 4))); };
  const auto b16 = [&](int64_t n) { return static_cast<uint16_t*>(held.emplace_back(noise(size_t(n), 2))); };
  float *x = f32(N * h), *y = f32(N * h);
  float *q = f32(N * h), *k = f32(N * h), *v = f32(N * h), *w = f32(h), *bias = f32(f), *mean = f32(N), *rstd = f32(N);
  float *dw = f32(h), *db = f32(h);
  uint16_t *x16 = b16(N * h), *y16 = b16(N * h), *wide16 = b16(N * f), *wide16b = b16(N * f), *qkv16 = b16(N * 3 * h);
  uint16_t *q16 = b16(N * h), *k16 = b16(N * h), *v16 = b16(N * h);
  Scratch ws(std::max(cu::bias_backward_workspace_bytes(N, f), cu::layernorm_backward_workspace_bytes(N, h)));
  const auto show = [](const std::string& name, double bytes, double ms) {
    std::printf("timing pass %-39s median_ms=%.3f gbps=%.0f\n", name.c_str(), ms, bytes / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  };
  const double nh = double(N * h), nf = double(N * f);
  show("layernorm_forward_bf16 8192x768", nh * (4 + 2 + 2),
       median_ms([&] { cu::layernorm_forward_bf16(x16, y16, mean, rstd, x, w, w, N, h); }));
  show("layernorm_backward_bf16 8192x768", nh * (4 + 2 + 4 + 4),
       median_ms([&] { cu::layernorm_backward_bf16(y, dw, db, x, x16, w, mean, rstd, N, h, ws.ws()); }));
  show("split_heads16 8192x2304", 3 * nh * (2 + 2),
       median_ms([&] { cu::split_heads16(q16, k16, v16, qkv16, b, s, a, dh); }));
  show("merge_heads_bf16 8192x768", nh * (4 + 2), median_ms([&] { cu::merge_heads_bf16(y16, q, b, s, a, dh); }));
  show("unmerge_heads 8192x768", nh * (4 + 4), median_ms([&] { cu::unmerge_heads(q, y, b, s, a, dh); }));
  show("unmerge_heads_bf16 8192x768", nh * (2 + 4), median_ms([&] { cu::unmerge_heads_bf16(q, y16, b, s, a, dh); }));
  show("to_bf16 8192x768", nh * (4 + 2), median_ms([&] { cu::to_bf16(x, y16, N * h); }));
  show("merge_qkv_grads_narrow 8192x2304", 3 * nh * (4 + 2),
       median_ms([&] { cu::merge_qkv_grads_narrow(qkv16, bias, q, k, v, b, s, a, dh, ws.ws()); }));
  show("gelu_forward16 8192x3072", nf * (2 + 2), median_ms([&] { cu::gelu_forward16(wide16b, wide16, N * f); }));
  show("gelu_backward_narrow 8192x3072", nf * (2 + 2 + 2),
       median_ms([&] { cu::gelu_backward_narrow(wide16b, bias, wide16, wide16, N, f, ws.ws()); }));
  show("narrow_bias_backward 8192x768", nh * (4 + 2),
       median_ms([&] { cu::narrow_bias_backward(y16, bias, y, N, h, ws.ws()); }));
  show("residual_add 8192x768", nh * (4 + 4 + 4), median_ms([&] { cu::residual_add(x, y, N * h); }));
  // The unfused attention's softmax over b·a = 96 rows of s² scores: the causal half read (fp32, and
  // the bf16 probabilities backward), whole rows written (bf16; with dropout also the mask and the
  // dropped probabilities).
  {
    const int64_t batch = b * a, n = batch * s * s;
    float* scores = f32(n);
    uint16_t *probs = b16(n), *dropped = b16(n);
    auto* mask = static_cast<uint8_t*>(held.emplace_back(noise(size_t(n), 1)));
    const double nn = double(n);
    show("softmax_dropout_forward bf16 96x1024x1024", nn * (2 + 2), median_ms([&] {
           cu::softmax_dropout_forward(probs, nullptr, nullptr, DType::bf16, scores, a, batch, s, {});
         }));
    show("softmax_dropout_forward bf16 drop 96x1024x1024", nn * (2 + 2 + 1 + 2), median_ms([&] {
           cu::softmax_dropout_forward(probs, mask, dropped, DType::bf16, scores, a, batch, s, flash_dropout(0.1f));
         }));
    show("softmax_causal_backward_bf16 96x1024x1024", nn * (2 + 1 + 2), median_ms([&] {
           cu::softmax_causal_backward_bf16(dropped, scores, probs, batch, s);
         }));
  }
  for (void* p : held) cudaFree(p);
}

// The fused attention at GPT-2 124M's b 8, a 12, s 1024, dh 64, dropout off and on. FLOPs counted
// as FlashAttention does for a causal mask: forward 2·b·a·s²·dh (two s×s×dh products, half
// masked), backward 2.5× that (five products; this backward computes seven, recomputing S and dP
// for its dQ pass).
void timing_flash(bool tensor_cores) {
  lattice::FlashShape x{8, 12, 1024, 64};
  x.bf16_operands = tensor_cores;
  const size_t n = size_t(x.b * x.a * x.s * x.dh), rows = size_t(x.b * x.a * x.s);
  const auto q = bf16_valued(randn(n)), k = bf16_valued(randn(n)), v = bf16_valued(randn(n)), dout = randn(n);
  Dev<float> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(n), d_lse(rows), d_dq(n), d_dk(n), d_dv(n);
  Scratch ws(lattice::cuda::flash_attention_backward_workspace_bytes(x));
  const double fwd_flops = 2.0 * double(x.b * x.a) * double(x.s) * double(x.s) * double(x.dh);
  for (float p : {0.0f, 0.1f}) {
    const lattice::AttentionDropout drop = flash_dropout(p);
    const std::string name =
        std::string("flash_attention b8 a12 s1024 dh64") + (p > 0 ? " drop" : "") + (tensor_cores ? " tc" : "");
    timing_line(name + " fwd", median_ms([&] {
                  lattice::cuda::flash_attention_forward(d_out.p, d_lse.p, d_q.p, d_k.p, d_v.p, x, drop);
                }),
                fwd_flops);
    timing_line(name + " bwd", median_ms([&] {
                  lattice::cuda::flash_attention_backward(d_dq.p, d_dk.p, d_dv.p, d_dout.p, d_q.p, d_k.p, d_v.p,
                                                          d_out.p, d_lse.p, x, drop, ws.ws());
                }),
                2.5 * fwd_flops);
    if (!tensor_cores || !lattice::cuda::flash_tc_supported(x)) continue;
    // Q, K, V as the kept bf16 bits, the training step's call (its tiles copied ahead by cp.async).
    std::vector<uint16_t> q16(n), k16(n), v16(n);
    lattice::to_bf16(q.data(), q16.data(), int64_t(n));
    lattice::to_bf16(k.data(), k16.data(), int64_t(n));
    lattice::to_bf16(v.data(), v16.data(), int64_t(n));
    Dev<uint16_t> d_q16(q16), d_k16(k16), d_v16(v16);
    // Q, K, V in the QKV rows, where the model keeps them under the fused attention (values immaterial
    // to a timing: the three tensors' bits one after another).
    std::vector<uint16_t> qkv16(q16);
    qkv16.insert(qkv16.end(), k16.begin(), k16.end());
    qkv16.insert(qkv16.end(), v16.begin(), v16.end());
    Dev<uint16_t> d_qkv16(qkv16);
    const auto rows_in = lattice::cuda::QkvBits::of_rows(d_qkv16.p, x);
    timing_line(name + " bf16-in fwd", median_ms([&] {
                  lattice::cuda::flash_attention_forward_bf16(d_out.p, d_lse.p, d_q16.p, d_k16.p, d_v16.p, x, drop);
                }),
                fwd_flops);
    timing_line(name + " bf16-in bwd", median_ms([&] {
                  lattice::cuda::flash_attention_backward_bf16(d_dq.p, d_dk.p, d_dv.p, d_dout.p, d_q16.p, d_k16.p,
                                                               d_v16.p, d_out.p, d_lse.p, x, drop, ws.ws());
                }),
                2.5 * fwd_flops);
    // The model's calls under bf16 activations: the context in the token rows (bf16 out, dO and O in).
    // The forward's two forms at dh <= 64 (128- and 64-row query tiles), then the tuned call, which the
    // trainer makes, with the form its first call timed faster.
    Dev<uint16_t> d_rows16(n);
    const auto rows_fwd = [&] {
      lattice::cuda::flash_attention_forward_rows_bf16(d_rows16.p, d_lse.p, rows_in, x, drop);
    };
    using lattice::cuda::ForwardForm, lattice::cuda::DqForm, lattice::cuda::flash_tc_form_name;
    if (x.dh <= 64) {
      for (ForwardForm f : {ForwardForm::two_slabs, ForwardForm::one_slab, ForwardForm::one_slab_dense}) {
        lattice::cuda::flash_tc_force_forms(f, DqForm::tuned);
        rows_fwd();  // which form ran (the dense one has no dropout)
        const ForwardForm ran = lattice::cuda::flash_tc_last_forward_form();
        if (ran == f) timing_line(name + " rows fwd, " + flash_tc_form_name(f), median_ms(rows_fwd), fwd_flops);
      }
      lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, DqForm::tuned);
    }
    const double tuned_ms = median_ms(rows_fwd);
    const std::string tuned =
        x.dh > 64 ? "" : std::string(" (tuned: ") + flash_tc_form_name(lattice::cuda::flash_tc_last_forward_form()) + ")";
    timing_line(name + " rows fwd" + tuned, tuned_ms, fwd_flops);
    timing_line(name + " rows bwd", median_ms([&] {
                  lattice::cuda::flash_attention_backward_rows_bf16(d_dq.p, d_dk.p, d_dv.p, d_dout.p, rows_in,
                                                                    d_rows16.p, d_lse.p, x, drop, ws.ws());
                }),
                2.5 * fwd_flops);
    // The QKV gradient in the rows too (the step's call when the bias is summed in the backward),
    // against the call it replaces: the rows backward, then merge_qkv_grads_narrow.
    const int64_t N = x.b * x.s, cols = 3 * x.a * x.dh;
    Dev<uint16_t> d_dqkv16(size_t(N * cols));
    Dev<float> d_db(static_cast<size_t>(cols));
    Scratch qws(lattice::cuda::flash_attention_backward_qkv_rows_workspace_bytes(x));
    Scratch mws(lattice::cuda::bias_backward_workspace_bytes(N, cols));
    const auto qkv_rows_bwd = [&] {
      lattice::cuda::flash_attention_backward_qkv_rows_bf16(d_dqkv16.p, d_db.p, d_dout.p, rows_in,
                                                            d_rows16.p, d_lse.p, x, drop, qws.ws());
    };
    for (DqForm f : {DqForm::plain, DqForm::dense}) {  // dQ's forms (the dense one has no dropout)
      lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, f);
      qkv_rows_bwd();
      if (lattice::cuda::flash_tc_last_dq_form() == f)
        timing_line(name + " qkv rows bwd, " + flash_tc_form_name(f), median_ms(qkv_rows_bwd), 2.5 * fwd_flops);
    }
    lattice::cuda::flash_tc_force_forms(ForwardForm::tuned, DqForm::tuned);
    const double tuned_bwd_ms = median_ms(qkv_rows_bwd);
    timing_line(name + " qkv rows bwd (tuned: " + flash_tc_form_name(lattice::cuda::flash_tc_last_dq_form()) + ")",
                tuned_bwd_ms, 2.5 * fwd_flops);
    timing_line(name + " rows bwd + merge", median_ms([&] {
                  lattice::cuda::flash_attention_backward_rows_bf16(d_dq.p, d_dk.p, d_dv.p, d_dout.p, rows_in,
                                                                    d_rows16.p, d_lse.p, x, drop, ws.ws());
                  lattice::cuda::merge_qkv_grads_narrow(d_dqkv16.p, d_db.p, d_dq.p, d_dk.p, d_dv.p, x.b, x.s, x.a,
                                                        x.dh, mws.ws());
                }),
                2.5 * fwd_flops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The seed as decimal digits (strtoull alone read "abc" as seed 0 and "-1" as 2^64 - 1).
  const char* seed_text = argc > 1 ? argv[1] : "1234";
  char* end = nullptr;
  errno = 0;
  const unsigned long long seed = std::strtoull(seed_text, &end, 10);
  if (argc > 2 || !std::isdigit(static_cast<unsigned char>(seed_text[0])) || *end != '\0' || errno == ERANGE) {
    std::fprintf(stderr, "usage: lattice_cuda_check [SEED]   (SEED: a whole number below 2^64; got %s)\n",
                 argc > 2 ? "more than one argument" : seed_text);
    return 2;
  }
  rng.seed(seed);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("lattice_cuda_check: no CUDA device usable here: nothing checked\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("lattice_cuda_check: device %s (sm_%d%d, %d SMs), seed %llu\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, seed);
  const char* profile = profile_groups();
  if (profile) std::printf("lattice_cuda_check: profile mode (%s): no checks, each timed call made once\n", profile);
  // Each group of checks opens with a "section" line, so that a run that stops (a fault, a hang cut by
  // a timeout, an exception) says where: device-check.sh's fallbacks read the last one.
  const auto section = [](const char* name, void (*check)()) {
    std::printf("lattice_cuda_check: section %s\n", name);
    std::fflush(stdout);
    check();
  };
  if (!profile) try {
    section("embedding", check_embedding);
    section("layernorm", check_layernorm);
    section("gelu", check_gelu);
    section("bias_residual", check_bias_residual);
    section("dropout", check_dropout);
    section("softmax", check_softmax);
    section("cross_entropy", check_cross_entropy);
    section("optimizer", check_optimizer);
    section("bf16", check_bf16);
    section("bits_fingerprint", check_bits_fingerprint);
    section("fp16", check_fp16);
    section("heads", check_heads);
    section("bf16_fused", check_bf16_fused);
    // On the host simulation, against its cuBLASLt (tests/host_sim/cublaslt_sim.cpp): gemm.cu's own
    // plans, descriptors, epilogues and tuner, not NVIDIA's library.
    section("gemm", check_gemm);
    section("gemm_epilogues", check_gemm_epilogues);
    section("gemm_tuner", check_gemm_tuner);
    section("flash", check_flash);
  } catch (const std::exception& e) {  // a kernel that threw (a refused shape, no cuBLASLt algorithm)
    std::printf("lattice_cuda_check: error: %s\n", e.what());
    ++failures;
  }
  if (!profile) std::printf("lattice_cuda_check: %d FAIL\n", failures);
  std::fflush(stdout);
  // On the host simulation the timings' calls run once each where LATTICE_HOST_SIM_TIMINGS is set (a
  // smoke test of their buffers and arguments, minutes at their sizes), not by default; set to "tc",
  // only the tensor-core attention's.
  const char* sim_timings = std::getenv("LATTICE_HOST_SIM_TIMINGS");
  if (kHostSim && !sim_timings) return failures ? 1 : 0;
  const char* chosen = profile ? profile : (kHostSim && std::string(sim_timings) == "tc" ? "tc" : "all");
  const std::string groups = "," + std::string(chosen) + ",";
  const auto want = [&](const char* group) {
    return groups == ",all," || groups.find("," + std::string(group) + ",") != std::string::npos;
  };
  std::printf("lattice_cuda_check: timings follow (not pass/fail; %s)\n", prop.name);
  try {
    if (!kHostSim && want("gemm")) section("timing_gemm", timing_gemm);
    if (want("ce")) section("timing_ce", timing_cross_entropy);
    if (want("passes")) section("timing_passes", timing_passes);
    if (want("flash")) section("timing_flash", [] { timing_flash(false); });
    if (want("tc")) section("timing_tc", [] { timing_flash(true); });
  } catch (const std::exception& e) {
    std::printf("lattice_cuda_check: timing error: %s\n", e.what());
    return failures ? 1 : 3;
  }
  return failures ? 1 : 0;
}
