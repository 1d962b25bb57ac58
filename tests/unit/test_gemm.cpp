// gemm() against a double-precision reference on every transpose, accumulate, alpha and bias case, on
// shapes that run whole and shapes split into row parts or batch parts (one single-threaded oneDNN
// primitive per thread, boundaries not multiples of the part height), for 1, 2 and 3 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/gemm_widened.hpp"
#include "tensor/bf16.hpp"

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

// Element by element within fp32's worst-case summation bound (K + 3)·ε·(Σ|alpha·a·b| + |bias| + |c0|):
// a part written at the wrong offset, a lost bias or accumulate is off by O(1).
// rounded_to_bf16: c is that result rounded to bf16 as well (half an ulp: 2⁻⁸ of its magnitude more).
void expect_matches_reference(const Problem& p, const std::vector<float>& c, bool rounded_to_bf16 = false) {
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
      double bound = double(s.K + 3) * eps * mag + 1e-30;
      if (rounded_to_bf16) bound += std::ldexp(std::fabs(want) + bound, -8);
      ASSERT_LE(std::fabs(double(c[size_t(i * s.N + j)]) - want), bound)
          << "at (" << i << ", " << j << ") of " << s.M << "x" << s.N << "x" << s.K << " ta " << s.trans_a << " tb "
          << s.trans_b << " acc " << s.accumulate << " threads " << omp_get_max_threads();
    }
}

TEST(Gemm, MatchesReferenceWholeAndInRowParts) {
  const int saved = omp_get_max_threads();
  uint32_t seed = 1;
  struct Dims {
    int64_t M, N, K;
  };
  // M = 100 runs whole; M = 600 splits into 2 parts (boundary 288) and M = 1000 into 3 (boundaries 320, 656).
  for (const Dims d : {Dims{100, 7, 33}, Dims{600, 9, 70}, Dims{1000, 5, 19}})
    for (const int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (int acc = 0; acc < 2; ++acc)
            for (int with_bias = 0; with_bias < 2; ++with_bias) {
              const float alpha = with_bias ? 1.0f : 0.375f;
              const Problem p = make_problem(d.M, d.N, d.K, ta, tb, acc, alpha, with_bias, seed++);
              std::vector<float> c = p.c0;
              gemm(p.s, f32_operand(p.a.data()), f32_operand(p.b.data()), c.data(),
                   p.bias.empty() ? nullptr : p.bias.data());
              expect_matches_reference(p, c);
            }
    }
  omp_set_num_threads(saved);
}

// Each bf16 test runs both forms on any machine: natively and widened to fp32 (gemm_bf16_widened),
// then goes back to this machine's rule.
struct Bf16Form {
  explicit Bf16Form(bool widened) { gemm_set_bf16_widened(widened); }
  ~Bf16Form() { gemm_set_bf16_widened(std::nullopt); }
};

TEST(Gemm, Bf16OperandsWholeAndInRowParts) {
  // bf16 operands: against the reference of the bf16-rounded operands. Accumulating products run in
  // row parts; on AMX the others run as one oneDNN-threaded primitive (gemm.hpp): both ways checked.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  for (const bool widened : {false, true})
  for (const bool acc : {true, false})
    for (const bool tb : {false, true}) {
      Problem p = make_problem(640, 6, 48, false, tb, acc, 1.0f, true, (tb ? 21u : 22u) + (acc ? 0u : 10u));
      std::vector<uint16_t> a16(p.a.size()), b16(p.b.size());
      for (size_t i = 0; i < a16.size(); ++i) a16[i] = to_bf16(p.a[i]), p.a[i] = from_bf16(a16[i]);
      for (size_t i = 0; i < b16.size(); ++i) b16[i] = to_bf16(p.b[i]), p.b[i] = from_bf16(b16[i]);
      std::vector<float> c = p.c0;
      const Bf16Form form(widened);
      gemm(p.s, {a16.data(), DType::bf16}, {b16.data(), DType::bf16}, c.data(), p.bias.data());
      expect_matches_reference(p, c);
    }
  omp_set_num_threads(saved);
}

// Widened, a bf16 product is the fp32 GEMM of the widened operands, bit for bit: the widening is
// exact and keeps every layout (transposes, batches, alpha, accumulation, bias), where a misplaced
// operand or a lost flag differs in most elements.
TEST(Gemm, WidenedBf16IsTheFp32ProductOfTheWidenedOperands) {
  const int saved = omp_get_max_threads();
  const Bf16Form form(true);
  uint32_t seed = 70;
  for (const int threads : {1, 2})
    for (const int64_t batch : {int64_t(1), int64_t(3)})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          omp_set_num_threads(threads);
          const bool acc = (seed % 2) == 0;
          Problem p = make_problem(batch * 520, 20, 36, false, false, false, 1.0f, false, seed++);
          GemmShape s = p.s;
          s.batch = batch, s.M = 520, s.trans_a = ta, s.trans_b = tb, s.accumulate = acc, s.alpha = acc ? 0.5f : 1.0f;
          std::vector<uint16_t> a16(p.a.size()), b16(size_t(batch) * p.b.size());
          std::vector<float> a32(a16.size()), b32(b16.size());
          for (size_t i = 0; i < a16.size(); ++i) a16[i] = to_bf16(p.a[i]), a32[i] = from_bf16(a16[i]);
          for (size_t i = 0; i < b16.size(); ++i) b16[i] = to_bf16(p.b[i % p.b.size()] * 0.75f), b32[i] = from_bf16(b16[i]);
          std::vector<float> want(size_t(s.batch * s.M * s.N)), got;
          for (size_t i = 0; i < want.size(); ++i) want[i] = p.c0[i];
          got = want;
          gemm(s, f32_operand(a32.data()), f32_operand(b32.data()), want.data());
          gemm(s, {a16.data(), DType::bf16}, {b16.data(), DType::bf16}, got.data());
          int64_t differing = 0;
          for (size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i];
          EXPECT_EQ(differing, 0) << "threads " << threads << " batch " << batch << " ta " << ta << " tb " << tb;
          // A bf16 destination of the same (held whole when A is transposed or batched): the product
          // above rounded, bit for bit.
          s.accumulate = false, s.alpha = 1.0f;
          std::vector<float> c32(size_t(s.batch * s.M * s.N));
          gemm(s, {a16.data(), DType::bf16}, {b16.data(), DType::bf16}, c32.data());
          std::vector<uint16_t> rounded(c32.size()), c16(c32.size(), 0xffff);
          to_bf16(c32.data(), rounded.data(), int64_t(c32.size()));
          gemm_bf16_out(s, {a16.data(), DType::bf16}, {b16.data(), DType::bf16}, c16.data());
          size_t first_diff = c16.size(), ndiff = 0;
          for (size_t i = 0; i < c16.size(); ++i)
            if (c16[i] != rounded[i]) ndiff++, first_diff = std::min(first_diff, i);
          EXPECT_EQ(ndiff, 0u) << "bf16 destination: threads " << threads << " batch " << batch << " ta " << ta
                               << " first at " << first_diff << " of " << c16.size();
        }
  omp_set_num_threads(saved);
}

// Copies past 64 MiB are not made whole: such a GEMM (a vocabulary-wide head) runs in tiles whose
// copies stay within the bound; a batch that large runs natively. GPT-2's head at 4 × 1024 tokens: the
// logits (B 154 MB in fp32), the input gradient (A, the logit gradient, 824 MB) and the weight gradient.
TEST(Gemm, WideningPast64MiBRunsInTilesWithinTheBound) {
  constexpr int64_t kBound = int64_t(64) << 20;
  GemmShape big;
  big.M = 4096, big.N = 16, big.K = 4096;  // A alone 64 MiB in fp32, B 256 KiB: past the bound
  GemmShape small = big;
  small.M = 4000;  // 62.5 MiB + 256 KiB: within, whole
  GemmShape logits, input_grad, weight_grad, batch;
  logits.M = 4096, logits.N = 50304, logits.K = 768, logits.trans_b = true;
  input_grad.M = 4096, input_grad.N = 768, input_grad.K = 50304;
  weight_grad.M = 50304, weight_grad.N = 768, weight_grad.K = 4096, weight_grad.trans_a = true;
  weight_grad.accumulate = true;
  batch.batch = 48, batch.M = 1024, batch.N = 1024, batch.K = 512;  // 200 MiB of copies: not tiled
  EXPECT_EQ(gemm_widened_bytes(small, false, 2), 0);  // fp32 operands are never copied
  {
    const Bf16Form form(false);
    EXPECT_EQ(gemm_widened_bytes(big, true, 2), 0);
  }
  const Bf16Form form(true);
  EXPECT_EQ(gemm_widened_bytes(small, true, 2), 4 * (4000 * 4096 + 4096 * 16));
  EXPECT_EQ(gemm_widened_bytes(batch, true, 2), 0);
  for (const auto& [shape, out16] : {std::pair{big, false}, std::pair{logits, true}, std::pair{input_grad, false},
                                     std::pair{input_grad, true}, std::pair{weight_grad, false}}) {
    const int64_t bytes = gemm_widened_bytes(shape, true, 2, out16);
    EXPECT_GT(bytes, 0) << shape.M << "x" << shape.N << "x" << shape.K;
    EXPECT_LE(bytes, kBound) << shape.M << "x" << shape.N << "x" << shape.K;
    const auto tiles = widened::plan(shape, out16, 2);
    ASSERT_TRUE(tiles);
    EXPECT_EQ(bytes, 4 * tiles->elements());
    EXPECT_GE(tiles->mt, std::min<int64_t>(shape.M, 512));  // a row tile gives each thread a part
  }
}

// Tiled, a widened product is still the product: against the double reference for rows, columns and
// depth cut (each with a shorter last tile), both loop orders, 1 and 2 threads, each transpose, alpha
// and accumulation, bias and bf16 destination. A tile written at the wrong offset, a bias added twice,
// a depth tile that overwrites instead of adding, a staged tile added where it should be written, or an
// operand's tile kept where the loop moved on, is off by O(1).
TEST(Gemm, WidenedTilesMakeTheProduct) {
  const int saved = omp_get_max_threads();
  struct Variant {
    bool ta, tb, acc, bias, out16;  // out16: alpha 1, no accumulation (gemm_bf16_out)
  };
  const Variant variants[] = {{false, false, false, true, false}, {true, false, true, false, false},
                              {false, true, true, true, false},   {true, true, false, true, true},
                              {false, true, false, false, true},  {true, true, true, false, false}};
  struct Cut {
    int64_t mt, nt, kt;
  };
  constexpr int64_t M = 600, N = 300, K = 280;
  uint32_t seed = 300;
  size_t next = 0;
  for (const Cut cut : {Cut{M, N, K}, Cut{256, N, K}, Cut{M, 112, K}, Cut{M, N, 96}, Cut{208, 112, 96}})
    for (const bool n_outer : {false, true}) {
      // Every variant on the tiles cut every way; one each, in turn, on the others.
      const bool all = cut.mt < M && cut.nt < N && cut.kt < K;
      for (size_t i = 0; i < (all ? std::size(variants) : 1); ++i) {
        const Variant v = variants[all ? i : next++ % std::size(variants)];
        const int threads = 1 + int(seed % 2);
        omp_set_num_threads(threads);
        Problem p = make_problem(M, N, K, v.ta, v.tb, v.acc, v.acc && !v.bias ? 0.75f : 1.0f, v.bias, seed++);
        std::vector<uint16_t> a16(p.a.size()), b16(p.b.size());
        for (size_t j = 0; j < a16.size(); ++j) a16[j] = to_bf16(p.a[j]), p.a[j] = from_bf16(a16[j]);
        for (size_t j = 0; j < b16.size(); ++j) b16[j] = to_bf16(p.b[j]), p.b[j] = from_bf16(b16[j]);
        widened::Tiles t = widened::tiles(p.s, cut.mt, cut.nt, cut.kt, v.out16);
        t.n_outer = n_outer;
        std::set<std::tuple<int64_t, int64_t, int64_t, bool>> ran, listed;  // the planner's list is what runs
        const widened::Fp32Gemm fp32 = [&ran](const GemmShape& g, const float* a, const float* b, float* c,
                                              const float* bias) {
          ran.insert({g.M, g.N, g.K, g.accumulate});
          gemm(g, f32_operand(a), f32_operand(b), c, bias);
        };
        const float* bias = v.bias ? p.bias.data() : nullptr;
        std::vector<float> c = p.c0;
        std::vector<uint16_t> c16(c.size(), 0xffff);
        widened::run(t, p.s, a16.data(), b16.data(), v.out16 ? static_cast<void*>(c16.data()) : c.data(), bias,
                     v.out16, threads, fp32);
        SCOPED_TRACE(::testing::Message() << "tiles " << cut.mt << "x" << cut.nt << "x" << cut.kt << " n outer "
                                          << n_outer << " out16 " << v.out16);
        // A bf16 destination: the fp32 result within its bound, then rounded to nearest (half a bf16
        // ulp: at most 2⁻⁸ of the value).
        if (v.out16)
          for (size_t j = 0; j < c.size(); ++j) c[j] = from_bf16(c16[j]);
        expect_matches_reference(p, c, v.out16);
        for (const GemmShape& g : widened::tile_gemms(t, p.s)) listed.insert({g.M, g.N, g.K, g.accumulate});
        EXPECT_EQ(listed, ran);
      }
    }
  omp_set_num_threads(saved);
}

// gemm() takes the tiles past its bound (here set small, to keep the test's reference quick), and
// they make the product.
TEST(Gemm, GemmRunsTiledPastTheBound) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const Bf16Form form(true);
  widened::set_max_bytes(int64_t(800) << 10);
  for (const bool out16 : {false, true}) {
    Problem p = make_problem(1100, 40, 300, false, true, !out16, 1.0f, true, out16 ? 401u : 400u);
    const auto tiles = widened::plan(p.s, out16, 2);
    ASSERT_TRUE(tiles);
    EXPECT_LT(tiles->mt, p.s.M);
    EXPECT_LE(4 * tiles->elements(), int64_t(800) << 10);
    EXPECT_EQ(gemm_widened_bytes(p.s, true, 2, out16), 4 * tiles->elements());
    std::vector<uint16_t> a16(p.a.size()), b16(p.b.size());
    for (size_t j = 0; j < a16.size(); ++j) a16[j] = to_bf16(p.a[j]), p.a[j] = from_bf16(a16[j]);
    for (size_t j = 0; j < b16.size(); ++j) b16[j] = to_bf16(p.b[j]), p.b[j] = from_bf16(b16[j]);
    std::vector<float> c = p.c0;
    if (out16) {
      std::vector<uint16_t> c16(c.size(), 0xffff);
      gemm_bf16_out(p.s, {a16.data(), DType::bf16}, {b16.data(), DType::bf16}, c16.data(), p.bias.data());
      for (size_t j = 0; j < c.size(); ++j) c[j] = from_bf16(c16[j]);
    } else {
      gemm(p.s, {a16.data(), DType::bf16}, {b16.data(), DType::bf16}, c.data(), p.bias.data());
    }
    expect_matches_reference(p, c, out16);
  }
  widened::set_max_bytes(std::nullopt);
  omp_set_num_threads(saved);
}

// A bf16 destination (the linears' bf16 outputs) holds exactly the fp32 product rounded by to_bf16:
// the same primitive's sums, the bias added in fp32, one rounding at the end. Whole and in row parts
// (1 and 2 threads), with and without a bias, B transposed or not (the input gradient's shape): bit
// for bit, where a second rounding or a lost bias differs in many elements. fp32 operands are refused.
TEST(Gemm, Bf16DestinationIsTheFp32ProductRounded) {
  const int saved = omp_get_max_threads();
  uint32_t seed = 40;
  {
    const Problem p = make_problem(16, 8, 8, false, false, false, 1.0f, false, seed++);
    std::vector<uint16_t> c16(p.c0.size());
    EXPECT_THROW(gemm_bf16_out(p.s, f32_operand(p.a.data()), f32_operand(p.b.data()), c16.data()), std::logic_error);
  }
  // Widened, a destination wider than 16 MiB of fp32 rows is made in pieces of rows (1024 rows of 4096
  // columns here: 1024 and 476), each rounded as the whole product would be.
  for (const bool widened : {false, true})
  for (const int threads : {1, 2})
    for (const bool tb : {false, true})
      for (const bool with_bias : {false, true}) {
        omp_set_num_threads(threads);
        const Bf16Form form(widened);
        const bool pieces = widened && with_bias;
        Problem p = make_problem(pieces ? 1500 : 600, pieces ? 4096 : 24, pieces ? 16 : 40, false, tb, false, 1.0f,
                                 with_bias, seed++);
        std::vector<uint16_t> a16(p.a.size()), b16(p.b.size());
        for (size_t i = 0; i < a16.size(); ++i) a16[i] = to_bf16(p.a[i]);
        for (size_t i = 0; i < b16.size(); ++i) b16[i] = to_bf16(p.b[i]);
        const GemmOperand a{a16.data(), DType::bf16}, b{b16.data(), DType::bf16};
        const float* bias = p.bias.empty() ? nullptr : p.bias.data();
        std::vector<float> c(p.c0.size());
        gemm(p.s, a, b, c.data(), bias);
        std::vector<uint16_t> want(c.size()), got(c.size(), 0xffff);
        to_bf16(c.data(), want.data(), int64_t(c.size()));
        gemm_bf16_out(p.s, a, b, got.data(), bias);
        int64_t differing = 0;
        for (size_t i = 0; i < got.size(); ++i) differing += got[i] != want[i];
        EXPECT_EQ(differing, 0) << "threads " << threads << " tb " << tb << " bias " << with_bias << " widened "
                                << widened;
      }
  omp_set_num_threads(saved);
}

TEST(Gemm, CallsFromInsideAParallelRegionRunWhole) {
  // gemm() inside an OpenMP region (as the MoE experts may call it) must not split again.
  Problem p = make_problem(800, 4, 16, false, false, false, 1.0f, false, 31);
  std::vector<float> c(p.c0.size());
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    gemm(p.s, f32_operand(p.a.data()), f32_operand(p.b.data()), c.data());
  }
  expect_matches_reference(p, c);
}

TEST(Gemm, BatchesSplitOverThreads) {
  // A batch runs as parts of whole matrices, one per thread (3 matrices over 2 threads: 1 and 2).
  const int saved = omp_get_max_threads();
  uint32_t seed = 50;
  for (const int threads : {2, 3})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        omp_set_num_threads(threads);
        const int64_t batch = 3, M = 5, N = 7, K = 9;
        std::vector<Problem> mats;
        std::vector<float> a, b, c;
        for (int64_t i = 0; i < batch; ++i) {
          mats.push_back(make_problem(M, N, K, ta, tb, true, 0.5f, false, seed++));
          a.insert(a.end(), mats.back().a.begin(), mats.back().a.end());
          b.insert(b.end(), mats.back().b.begin(), mats.back().b.end());
          c.insert(c.end(), mats.back().c0.begin(), mats.back().c0.end());
        }
        GemmShape s = mats[0].s;
        s.batch = batch;
        gemm(s, f32_operand(a.data()), f32_operand(b.data()), c.data());
        for (int64_t i = 0; i < batch; ++i)
          expect_matches_reference(mats[size_t(i)], std::vector<float>(c.begin() + i * M * N, c.begin() + (i + 1) * M * N));
      }
  omp_set_num_threads(saved);
}

TEST(Gemm, EmptyOutputAndEmptyDepthInRowParts) {
  // An expert that received no tokens: N = 0 (nothing to write) or K = 0 (an empty sum) on a shape tall
  // enough to split, as whole-matrix calls handled them.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  Problem none = make_problem(1024, 0, 8, false, false, true, 1.0f, false, 41);
  gemm(none.s, f32_operand(none.a.data()), f32_operand(none.b.data()), none.c0.data());
  Problem empty = make_problem(1024, 3, 0, false, false, true, 1.0f, false, 42);
  std::vector<float> c = empty.c0;
  gemm(empty.s, f32_operand(empty.a.data()), f32_operand(empty.b.data()), c.data());
  omp_set_num_threads(saved);
  expect_matches_reference(empty, c);
}

}  // namespace
}  // namespace lattice
