// lattice_cuda_check: every CUDA kernel of cuda/kernels.hpp against its CPU kernel on random inputs,
// forward and backward, one line each:
//   kernel NAME fwd|bwd max_abs_diff=D rel=R tol=T ok|FAIL
// fp32: rel = max|gpu − cpu| / max|cpu| ≤ 1e-5; bf16 outputs: rel ≤ 2^-7; dropout masks: bit-identical
// (rel = the fraction of flags that differ, tol 0). Outputs are poisoned (NaN bytes) before each
// launch, so an element a kernel never writes fails. The kernels whose reductions the device orders
// itself also run twice and must repeat bit for bit ("repeat" lines). Exit status 1 on any FAIL, 2 when
// no GPU is usable. Issue 33; docs/gpu.md. Usage: lattice_cuda_check [seed]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels.hpp"
#include "kernels/bias.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/dropout.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/optimizer_kernels.hpp"
#include "kernels/softmax.hpp"
#include "tensor/bf16.hpp"

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

std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void line(const std::string& name, const char* dir, double maxabs, double rel, double tol) {
  const bool ok = rel <= tol;  // NaN fails
  if (!ok) ++failures;
  std::printf("kernel %-34s %s max_abs_diff=%.3e rel=%.3e tol=%.1e %s\n", name.c_str(), dir, maxabs, rel, tol,
              ok ? "ok" : "FAIL");
  std::fflush(stdout);
}

void compare(const std::string& name, const char* dir, const std::vector<float>& ref, const std::vector<float>& got,
             double tol = 1e-5) {
  double maxabs = 0.0, maxref = 0.0;
  bool nan = ref.size() != got.size();
  for (size_t i = 0; i < ref.size() && !nan; ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    if (std::isnan(d)) nan = true;
    maxabs = std::max(maxabs, d);
    maxref = std::max(maxref, std::fabs(double(ref[i])));
  }
  const double rel = nan ? NAN : (maxref > 0 ? maxabs / maxref : maxabs);
  line(name, dir, nan ? NAN : maxabs, rel, tol);
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

void check_cross_entropy() {
  const int64_t N = 512, V = 50257, Vp = 50304;
  const auto logits = randn(size_t(N * Vp), 3.0f);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (auto& t : targets) t = tok(rng);
  std::vector<float> probs = logits, losses(static_cast<size_t>(N));
  lattice::cross_entropy_forward(probs.data(), losses.data(), targets.data(), N, V, Vp);
  Dev<int32_t> d_t(targets);
  {
    Dev<float> d_x(logits), d_loss(static_cast<size_t>(N));
    Scratch ws(lattice::cuda::cross_entropy_workspace_bytes(N));
    lattice::cuda::cross_entropy_forward(d_x.p, d_loss.p, d_t.p, N, V, Vp, ws.ws());
    compare("cross_entropy probs", "fwd", probs, d_x.get());
    compare("cross_entropy losses", "fwd", losses, d_loss.get());
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
  compare("cross_entropy vocab_parallel probs", "fwd", probs, got_probs);
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
}

void check_optimizer() {
  const int64_t n = (1 << 22) + 5;
  auto m = randn(size_t(n), 0.01f), v = randn(size_t(n), 0.01f), w = randn(size_t(n), 0.02f);
  for (float& x : v) x = x * x;
  const auto g = randn(size_t(n), 0.01f);
  const lattice::AdamWScalars a = lattice::adamw_scalars(0.9, 0.95, 1e-8, 6e-4, 17);
  const float decay = float(1.0 - 6e-4 * 0.1);
  Dev<float> d_m(m), d_v(v), d_w(w), d_g(g);
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

  std::vector<float> scaled = g;
  for (float& x : scaled) x *= 0.25f;  // optim's scale_grads
  lattice::cuda::scale_grads(d_g.p, n, 0.25f);
  compare("scale_grads", "fwd", scaled, d_g.get());
}

void check_bf16() {
  const int64_t n = (1 << 20) + 3;
  auto x = randn(size_t(n), 10.0f);
  x[0] = 1e-40f, x[1] = -1e-40f, x[2] = NAN, x[3] = INFINITY;  // subnormals, NaN, inf: the CPU's rules
  std::vector<uint16_t> h(static_cast<size_t>(n));
  lattice::to_bf16(x.data(), h.data(), n);
  Dev<float> d_x(x);
  Dev<uint16_t> d_h(static_cast<size_t>(n));
  lattice::cuda::to_bf16(d_x.p, d_h.p, n);
  const auto got = d_h.get();
  size_t differ = 0;
  for (size_t i = 0; i < h.size(); ++i) differ += h[i] != got[i];
  line("to_bf16 [bits]", "fwd", differ ? 1.0 : 0.0, double(differ) / double(n), 0.0);
  std::vector<uint16_t> hf(h.begin() + 4, h.end()), gf(got.begin() + 4, got.end());  // finite values
  compare_bf16("to_bf16", "fwd", hf, gf);
  std::vector<float> back(static_cast<size_t>(n));
  lattice::from_bf16(h.data(), back.data(), n);
  Dev<float> d_back(static_cast<size_t>(n));
  d_h.upload(h);
  lattice::cuda::from_bf16(d_h.p, d_back.p, n);
  const auto gb = d_back.get();
  line("from_bf16 [bits]", "fwd", 0.0, std::memcmp(back.data(), gb.data(), back.size() * 4) ? 1.0 : 0.0, 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned long long seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1234;
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
  check_embedding();
  check_layernorm();
  check_gelu();
  check_bias_residual();
  check_dropout();
  check_softmax();
  check_cross_entropy();
  check_optimizer();
  check_bf16();
  std::printf("lattice_cuda_check: %d FAIL\n", failures);
  return failures ? 1 : 0;
}
