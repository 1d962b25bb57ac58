// gemm(): the packed AVX-512 kernel against a double-precision reference on every transpose, accumulate,
// alpha and bias case and on edge shapes (rows not a multiple of 8, columns not of 32, depth past one
// 384-deep block, columns past one 1536-wide block), thread-count independence, and the dispatch rule.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/packed_gemm.hpp"

namespace lattice {
namespace {

struct Problem {
  GemmShape s;
  std::vector<float> a, b, c0, bias;
};

Problem make_problem(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool acc, float alpha, bool with_bias,
                     uint32_t seed) {
  Problem p;
  p.s.M = M, p.s.N = N, p.s.K = K, p.s.trans_a = ta, p.s.trans_b = tb, p.s.accumulate = acc, p.s.alpha = alpha;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  p.a.resize(size_t(M * K));
  p.b.resize(size_t(K * N));
  p.c0.resize(size_t(M * N));
  for (auto& x : p.a) x = d(rng);
  for (auto& x : p.b) x = d(rng);
  for (auto& x : p.c0) x = d(rng);
  if (with_bias) {
    p.bias.resize(size_t(N));
    for (auto& x : p.bias) x = d(rng);
  }
  return p;
}

// Checks c against the exact result, element by element, within fp32's worst-case summation bound
// (K + 3)·ε·(Σ|alpha·a·b| + |bias| + |c0|) — a wrong index or a lost block is off by O(1).
void expect_matches_reference(const Problem& p, const std::vector<float>& c) {
  const GemmShape& s = p.s;
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < s.K; ++k) {
        const double x = p.a[size_t(s.trans_a ? k * s.M + i : i * s.K + k)];
        const double y = p.b[size_t(s.trans_b ? j * s.K + k : k * s.N + j)];
        sum += x * y;
        mag += std::fabs(x * y);
      }
      double want = double(s.alpha) * sum;
      mag *= std::fabs(double(s.alpha));
      if (!p.bias.empty()) want += p.bias[size_t(j)], mag += std::fabs(p.bias[size_t(j)]);
      if (s.accumulate) want += p.c0[size_t(i * s.N + j)], mag += std::fabs(p.c0[size_t(i * s.N + j)]);
      const double got = c[size_t(i * s.N + j)];
      ASSERT_LE(std::fabs(got - want), double(s.K + 3) * eps * mag + 1e-30)
          << "at (" << i << ", " << j << ") of " << s.M << "x" << s.N << "x" << s.K << " ta " << s.trans_a << " tb "
          << s.trans_b << " acc " << s.accumulate;
    }
}

std::vector<float> run_packed(const Problem& p) {
  std::vector<float> c = p.c0;
  packed_gemm_f32(p.s, p.a.data(), p.b.data(), c.data(), p.bias.empty() ? nullptr : p.bias.data());
  return c;
}

TEST(PackedGemm, MatchesReferenceOnEveryCaseAndEdge) {
  if (!packed_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  uint32_t seed = 1;
  struct Dims {
    int64_t M, N, K;
  };
  // Edges: M % 8, N % 32, K past one depth block (384), a single row/column/depth.
  for (const Dims d : {Dims{1, 1, 1}, Dims{7, 31, 5}, Dims{8, 32, 384}, Dims{9, 33, 385}, Dims{17, 70, 800},
                       Dims{130, 96, 64}, Dims{64, 200, 3}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int acc = 0; acc < 2; ++acc)
          for (int with_bias = 0; with_bias < 2; ++with_bias) {
            const float alpha = with_bias ? 1.0f : 0.375f;
            const Problem p = make_problem(d.M, d.N, d.K, ta, tb, acc, alpha, with_bias, seed++);
            expect_matches_reference(p, run_packed(p));
          }
}

TEST(PackedGemm, WideOutputCrossesColumnBlocksOnOneThread) {
  if (!packed_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // one thread owns all 3201 columns: three 1536-wide blocks, the last partial
  const Problem p = make_problem(19, 3201, 40, false, false, true, 1.0f, true, 99);
  const auto c = run_packed(p);
  omp_set_num_threads(saved);
  expect_matches_reference(p, c);
}

TEST(PackedGemm, ResultDoesNotDependOnThreadCount) {
  if (!packed_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  // Each element's sum runs in the same order whichever thread owns its column: bitwise equal.
  const Problem p = make_problem(72, 1000, 900, true, false, true, 1.0f, false, 5);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run_packed(p);
  omp_set_num_threads(3);
  const auto three = run_packed(p);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], three[i]) << "element " << i;
}

TEST(PackedGemm, EmptyDepthGivesBiasPlusAccumulator) {
  if (!packed_gemm_available()) GTEST_SKIP() << "built without AVX-512";
  Problem p = make_problem(3, 5, 0, false, false, true, 1.0f, true, 8);
  expect_matches_reference(p, run_packed(p));
  p.s.accumulate = false;
  expect_matches_reference(p, run_packed(p));
}

TEST(Gemm, DispatchRule) {
  GemmShape nn;
  nn.M = 1024, nn.N = 3072, nn.K = 768;
  const GemmKernel packed = packed_gemm_available() ? GemmKernel::packed : GemmKernel::onednn;
  EXPECT_EQ(gemm_kernel_for(nn, DType::fp32, true), packed);
  GemmShape tn = nn;
  tn.trans_a = true, tn.accumulate = true;
  EXPECT_EQ(gemm_kernel_for(tn, DType::fp32, false), packed);
  GemmShape nt = nn;
  nt.trans_b = true;
  EXPECT_EQ(gemm_kernel_for(nt, DType::fp32, false), GemmKernel::onednn);
  EXPECT_EQ(gemm_kernel_for(nn, DType::bf16, false), GemmKernel::onednn);
  GemmShape batched = nn;
  batched.batch = 4;
  EXPECT_EQ(gemm_kernel_for(batched, DType::fp32, false), GemmKernel::onednn);
  GemmShape narrow = nn;  // N = K = 768: oneDNN measured faster
  narrow.N = 768;
  EXPECT_EQ(gemm_kernel_for(narrow, DType::fp32, false), GemmKernel::onednn);
  narrow.K = 3072;  // a deep one (FC2's forward): packed
  EXPECT_EQ(gemm_kernel_for(narrow, DType::fp32, false), packed);
  GemmShape scaled = nn;
  scaled.alpha = 0.5f;
  EXPECT_EQ(gemm_kernel_for(scaled, DType::fp32, true), GemmKernel::onednn);  // alpha with bias: oneDNN's order
}

TEST(Gemm, BothKernelsAgreeThroughGemm) {
  // gemm() on a shape of each kernel against the reference: the dispatch passes operands through intact.
  for (const bool tb : {false, true}) {
    const Problem p = make_problem(40, 2048, 200, false, tb, true, 1.0f, true, tb ? 11u : 12u);
    ASSERT_EQ(gemm_kernel_for(p.s, DType::fp32, true) == GemmKernel::packed, !tb && packed_gemm_available());
    std::vector<float> c = p.c0;
    gemm(p.s, f32_operand(p.a.data()), f32_operand(p.b.data()), c.data(), p.bias.data());
    expect_matches_reference(p, c);
  }
}

}  // namespace
}  // namespace lattice
