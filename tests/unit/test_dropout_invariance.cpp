// Dropout masks are a pure function of (seed, step, layer, site, global element index)
// (docs/design.md §10), and what data parallelism will rely on: splitting a global batch into
// micro-batches by first_row changes neither the loss sum nor the gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gradcheck_util.hpp"
#include "kernels/dropout.hpp"
#include "kernels/kept_mask.hpp"
#include "kernels/softmax.hpp"
#include "tensor/bf16.hpp"
#include "model/gpt.hpp"
#include "model_test_util.hpp"

using namespace lattice;

namespace {

std::vector<uint8_t> fill(const DropoutStream& st, uint64_t first, int64_t n, float p) {
  std::vector<uint8_t> m(static_cast<size_t>(n), 0xAB);
  dropout_mask_fill(m.data(), st, first, n, p);
  return m;
}

double agreement(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return double(same) / double(a.size());
}

const DropoutStream kStream{0x1234567890ABCDEFull, 17, 3, DropoutSite::attention};

}  // namespace

TEST(DropoutMask, SubRangesAtAnyOffsetMatchTheWhole) {
  const float p = 0.25f;
  for (uint64_t base : {uint64_t(0), uint64_t(5), uint64_t(1000003), (uint64_t(1) << 32) - 7,
                        (uint64_t(1) << 34) - 5, (uint64_t(1) << 40) + 2}) {
    const int64_t n = 1237;
    const auto whole = fill(kStream, base, n, p);
    for (uint8_t v : whole) ASSERT_TRUE(v == 0 || v == 1);
    // Pieces of awkward lengths at unaligned offsets, filled in reverse order.
    const int64_t cuts[] = {0, 1, 3, 4, 9, 130, 131, 600, 1001, 1236, n};
    for (int i = int(std::size(cuts)) - 2; i >= 0; --i) {
      const int64_t lo = cuts[i], len = cuts[i + 1] - lo;
      const auto piece = fill(kStream, base + uint64_t(lo), len, p);
      for (int64_t j = 0; j < len; ++j)
        ASSERT_EQ(piece[size_t(j)], whole[size_t(lo + j)]) << "base " << base << " element " << lo + j;
    }
    // Single elements, and the same range twice.
    for (int64_t j : {int64_t(0), int64_t(2), int64_t(777), n - 1})
      EXPECT_EQ(fill(kStream, base + uint64_t(j), 1, p)[0], whole[size_t(j)]);
    EXPECT_EQ(fill(kStream, base, n, p), whole);
  }
}

TEST(DropoutMask, EqualsTheScalarDefinition) {
  // The eight-lane drawer against philox_bits element by element (§10: keep when bits >= p · 2^32),
  // across the 32-element groups and the 2^32 block boundary, over more than one parallel chunk.
  const float p = 0.3f;
  const uint32_t threshold = dropout_keep_threshold(p);
  for (uint64_t base : {uint64_t(3), (uint64_t(1) << 34) - 101}) {
    const int64_t n = (1 << 14) + 77;
    const auto m = fill(kStream, base, n, p);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(m[size_t(i)], philox_bits(kStream, base + uint64_t(i)) >= threshold ? 1 : 0) << "element " << i;
  }
}

TEST(DropoutMask, KeepRateIsOneMinusP) {
  const int64_t n = 1 << 20;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    const auto m = fill(kStream, 12345, n, p);
    int64_t kept = 0;
    for (uint8_t v : m) kept += v;
    const double rate = double(kept) / double(n);
    const double sigma = std::sqrt(double(p) * (1 - p) / double(n));
    EXPECT_NEAR(rate, 1.0 - p, 6 * sigma) << "p = " << p;
    // No long-range structure: each quarter of the range has the same rate.
    for (int q = 0; q < 4; ++q) {
      int64_t k = 0;
      for (int64_t i = q * n / 4; i < (q + 1) * n / 4; ++i) k += m[size_t(i)];
      EXPECT_NEAR(double(k) / double(n / 4), 1.0 - p, 12 * sigma) << "p = " << p << " quarter " << q;
    }
  }
  // The edges: p = 0 keeps everything.
  const auto all = fill(kStream, 0, 4096, 0.0f);
  for (uint8_t v : all) ASSERT_EQ(v, 1);
}

TEST(DropoutMask, EveryKeyFieldChangesTheMask) {
  const float p = 0.5f;
  const int64_t n = 1 << 14;
  const auto ref = fill(kStream, 64, n, p);
  auto other = [&](auto change) {
    DropoutStream st = kStream;
    change(st);
    return fill(st, 64, n, p);
  };
  // Independent masks agree on about p² + (1−p)² = 1/2 of the elements.
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> variants = {
      {"seed", other([](DropoutStream& s) { s.seed ^= 1; })},
      {"seed high bits", other([](DropoutStream& s) { s.seed ^= uint64_t(1) << 40; })},
      {"step", other([](DropoutStream& s) { s.step += 1; })},
      {"step high bits", other([](DropoutStream& s) { s.step += uint64_t(1) << 32; })},
      {"layer", other([](DropoutStream& s) { s.layer += 1; })},
      {"embedding layer", other([](DropoutStream& s) { s.layer = -1; })},
      {"site", other([](DropoutStream& s) { s.site = DropoutSite::mlp_residual; })},
      {"index", fill(kStream, 64 + n, n, p)},
      {"index + 2^32", fill(kStream, 64 + (uint64_t(1) << 32), n, p)},
      {"index + 2^34", fill(kStream, 64 + (uint64_t(1) << 34), n, p)},
  };
  const double sigma = 0.5 / std::sqrt(double(n));
  for (const auto& [what, mask] : variants) EXPECT_NEAR(agreement(mask, ref), 0.5, 6 * sigma) << what;
  // The four sites of one layer at one step are mutually independent too.
  std::vector<std::vector<uint8_t>> sites;
  for (DropoutSite site : {DropoutSite::embedding, DropoutSite::attention, DropoutSite::attention_residual,
                           DropoutSite::mlp_residual})
    sites.push_back(other([site](DropoutStream& s) { s.site = site; }));
  for (size_t i = 0; i < sites.size(); ++i)
    for (size_t j = i + 1; j < sites.size(); ++j)
      EXPECT_NEAR(agreement(sites[i], sites[j]), 0.5, 6 * sigma) << "sites " << i << ", " << j;
}

// Global batch composition: rows [0,4) in one micro-batch, or as [0,2) and [2,4) with
// first_row 0 and 2 at the same step, give the same loss sum and gradient up to fp32 summation
// order (1e-5 relative: a sum of the 4·16 = 64 token terms regrouped as two of 32 differs by at most
// 64·2^-24 ≈ 3.8e-6 relative in the worst case on any CPU; a wrong mask changes the loss by ~1e-2).
TEST(DropoutInvariance, MicroBatchSplitGivesSameLossAndGradient) {
  const ModelConfig m = modeltest::small_model(0.1, 2, 32, 4, 16, 64);
  const int64_t s = m.seq_len;
  const modeltest::Tokens tok(4, s, m.vocab, 77);
  const float scale = 1.0f / float(4 * s);
  const uint64_t step = 6;

  GPT whole(m, modeltest::layout(Recompute::none, DType::fp32), 21);
  modeltest::randomize_params(whole, 800);
  whole.zero_grads();
  const double loss_whole = whole.forward_backward(tok.rows(0, 4, s), step, scale);

  GPT split(m, modeltest::layout(Recompute::none, DType::fp32), 21);
  modeltest::randomize_params(split, 800);
  split.zero_grads();
  const double loss_a = split.forward_backward(tok.rows(0, 2, s), step, scale);
  const double loss_b = split.forward_backward(tok.rows(2, 2, s), step, scale);

  EXPECT_NEAR(loss_a + loss_b, loss_whole, 1e-5 * std::fabs(loss_whole));
  const int64_t total = whole.num_params();
  for (const ParamInfo& p : whole.table().params()) {
    const float* a = whole.grads() + p.offset;
    const float* b = split.grads() + p.offset;
    const double scale_g = gradcheck::norm(a, p.numel);
    ASSERT_GT(scale_g, 0.0) << p.name;
    std::vector<float> diff(static_cast<size_t>(p.numel));
    for (int64_t i = 0; i < p.numel; ++i) diff[size_t(i)] = a[i] - b[i];
    EXPECT_LE(gradcheck::norm(diff.data(), p.numel), 1e-5 * scale_g) << p.name;
  }
  ASSERT_EQ(split.num_params(), total);

  // The split is not trivially equal: rows keyed by a wrong first_row draw other masks.
  GPT wrong(m, modeltest::layout(Recompute::none, DType::fp32), 21);
  modeltest::randomize_params(wrong, 800);
  const MicroBatch rows_2_3_keyed_as_0{tok.inputs.data() + 2 * s, tok.targets.data() + 2 * s, 2, 0};
  const double loss_wrong_b = wrong.forward_backward(rows_2_3_keyed_as_0, step, scale);
  EXPECT_GT(std::fabs(loss_wrong_b - loss_b), 1e-4 * std::fabs(loss_b)) << "first_row does not key the masks";
}

TEST(DropoutMask, OnePassSoftmaxDropoutEqualsTheFourPasses) {
  // softmax_dropout_forward against softmax_causal_forward → dropout_mask_fill (per (row, head) block at
  // attention_mask_first) → dropout_forward → conversion, bitwise, fp32 and bf16, with TP-style head offsets.
  const int64_t b = 2, a = 3, s = 37, n = b * a * s * s;
  AttentionDropout d;
  d.stream = kStream;
  d.p = 0.2f, d.first_row = 5, d.heads_total = 6, d.head0 = 3;
  std::vector<float> scores(static_cast<size_t>(n));
  uint32_t x = 12345;
  for (auto& v : scores) x = x * 1664525u + 1013904223u, v = float(int(x >> 9) % 2000) / 250.0f - 4.0f;
  std::vector<float> probs(static_cast<size_t>(n)), dropped(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  softmax_causal_forward(probs.data(), scores.data(), b * a, s);
  for (int64_t bh = 0; bh < b * a; ++bh)
    dropout_mask_fill(mask.data() + bh * s * s, d.stream, attention_mask_first(d, a, s, bh), s * s, d.p);
  dropout_forward(dropped.data(), probs.data(), mask.data(), n, d.p);
  for (const DType dt : {DType::fp32, DType::bf16}) {
    const size_t elem = dt == DType::fp32 ? 4 : 2;
    std::vector<char> p1(size_t(n) * elem), d1(size_t(n) * elem);
    std::vector<uint8_t> m1(size_t(n), 0xAB);
    softmax_dropout_forward(p1.data(), m1.data(), d1.data(), dt, scores.data(), a, b * a, s, d);
    ASSERT_EQ(m1, mask);
    for (int64_t i = 0; i < n; ++i) {
      if (dt == DType::fp32) {
        ASSERT_EQ(reinterpret_cast<const float*>(p1.data())[i], probs[size_t(i)]) << i;
        ASSERT_EQ(reinterpret_cast<const float*>(d1.data())[i], dropped[size_t(i)]) << i;
      } else {
        ASSERT_EQ(reinterpret_cast<const uint16_t*>(p1.data())[i], to_bf16(probs[size_t(i)])) << i;
        ASSERT_EQ(reinterpret_cast<const uint16_t*>(d1.data())[i], to_bf16(dropped[size_t(i)])) << i;
      }
    }
    // Only the dropped probabilities (selective recompute's forward): the same values.
    std::vector<char> d2(size_t(n) * elem);
    softmax_dropout_forward(nullptr, nullptr, d2.data(), dt, scores.data(), a, b * a, s, d);
    ASSERT_EQ(d2, d1);
  }
}

// --pack-masks: a mask of 0/1 bytes packs to bits and unpacks to the same bytes, for every length
// (the last partial byte included), and KeptMask hands the backward what the forward wrote.
TEST(DropoutMask, PackedBitsRoundTrip) {
  for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 1000, 4099}) {
    std::vector<uint8_t> mask(static_cast<size_t>(n)), bits(static_cast<size_t>(packed_mask_bytes(n)), 0xff);
    std::vector<uint8_t> back(static_cast<size_t>(n), 7);
    const DropoutStream st{42, 3, 1, DropoutSite::mlp_residual};
    dropout_mask_fill(mask.data(), st, 1000, n, 0.3f);
    pack_mask_bits(bits.data(), mask.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ((bits[size_t(i / 8)] >> (i % 8)) & 1, mask[size_t(i)]) << n << " " << i;
    if (n % 8) {
      EXPECT_EQ(bits.back() >> (n % 8), 0) << "unused bits of the last byte are 0";
    }
    unpack_mask_bits(back.data(), bits.data(), n);
    EXPECT_EQ(back, mask) << n;

    std::vector<uint8_t> scratch(static_cast<size_t>(n));
    KeptMask kept;
    uint8_t* w = kept.begin(n, true, kNoLayer, "test", scratch.data());
    EXPECT_EQ(w, scratch.data());
    std::copy(mask.begin(), mask.end(), w);
    kept.finish();
    std::fill(scratch.begin(), scratch.end(), uint8_t(9));
    const uint8_t* r = kept.unpacked(scratch.data());
    EXPECT_TRUE(std::equal(mask.begin(), mask.end(), r)) << n;
  }
}
