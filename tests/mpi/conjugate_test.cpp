// The conjugate operators f, f̄, g, ḡ and the vocabulary-parallel cross-entropy under mpirun,
// each against the dense result computed on every rank from the same seeded data.
// Run: mpirun -np T conjugate_test (T ranks form one tensor-parallel group).
#include <cmath>
#include <cstdio>
#include <vector>

#include "comm/distributed.hpp"
#include "kernels/cross_entropy.hpp"
#include "tensor_parallel/conjugate.hpp"
#include "tensor_parallel/vocab_parallel.hpp"
#include "random/philox.hpp"

using namespace lattice;

namespace {

int failures = 0;
void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what);
  }
}

// The same pseudo-random tensor on every rank: element i of stream `which`, scaled by `scale`.
std::vector<float> seeded(int64_t n, uint32_t which, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  const DropoutStream st{42, which, 0, DropoutSite::init};
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = (float(philox_bits(st, uint64_t(i))) / 4294967296.0f - 0.5f) * scale;
  return v;
}

float max_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

int main() {
  const int world = std::getenv("OMPI_COMM_WORLD_SIZE") ? std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")) : 1;
  comm::Distributed dist(world, 1, "conjugate_test");
  comm::Communicator& tp = dist.tp();
  const int t = tp.size(), r = tp.rank();
  const parallel::SequenceShape x{2, 4 * t, 6};
  const int64_t n = x.b * x.s * x.h, sl = x.s / t, local = x.b * sl * x.h;

  // Each rank's partial contribution and the dense sum over ranks.
  std::vector<std::vector<float>> partial;
  std::vector<float> dense(size_t(n), 0.0f);
  for (int q = 0; q < t; ++q) {
    partial.push_back(seeded(n, uint32_t(q + 1)));
    for (int64_t i = 0; i < n; ++i) dense[size_t(i)] += partial.back()[size_t(i)];
  }
  auto shard_of = [&](const std::vector<float>& full, int rank) {  // positions [rank·s/t, (rank+1)·s/t)
    std::vector<float> s(static_cast<size_t>(local));
    for (int64_t bi = 0; bi < x.b; ++bi)
      for (int64_t i = 0; i < sl; ++i)
        for (int64_t c = 0; c < x.h; ++c)
          s[size_t((bi * sl + i) * x.h + c)] = full[size_t((bi * x.s + rank * sl + i) * x.h + c)];
    return s;
  };

  // f̄ forward and f backward: all-reduce = the dense sum. No oneDNN here: lattice's own code and
  // MPI's reduction, the same bits on every CPU; a sum of t <= 4 seeded terms in another order
  // differs by <= 2·t·2^-24·Σ|terms| <= 2·4·6e-8·4 = 1.9e-6 (|terms| <= 1): 1e-5 holds with 5×.
  std::vector<float> y = partial[size_t(r)];
  parallel::fbar_forward(tp, y.data(), n);
  expect(max_diff(y.data(), dense.data(), n) < 1e-5f, "f̄ forward = sum over ranks", r);
  y = partial[size_t(r)];
  parallel::f_backward(tp, y.data(), n);
  expect(max_diff(y.data(), dense.data(), n) < 1e-5f, "f backward = sum over ranks", r);

  // g forward: shards of one tensor gathered = the tensor; ḡ backward the same.
  const std::vector<float> whole = seeded(n, 99);
  const std::vector<float> mine = shard_of(whole, r);
  std::vector<float> gathered(static_cast<size_t>(n));
  parallel::g_forward(tp, mine.data(), gathered.data(), x);
  expect(max_diff(gathered.data(), whole.data(), n) == 0.0f, "g forward = all-gather along the sequence", r);
  parallel::gbar_backward(tp, mine.data(), gathered.data(), x);
  expect(max_diff(gathered.data(), whole.data(), n) == 0.0f, "ḡ backward = all-gather along the sequence", r);

  // ḡ forward and g backward: reduce-scatter = this rank's shard of the dense sum.
  const std::vector<float> want = shard_of(dense, r);
  std::vector<float> got(static_cast<size_t>(local));
  parallel::gbar_forward(tp, partial[size_t(r)].data(), got.data(), x);
  expect(max_diff(got.data(), want.data(), local) < 1e-5f, "ḡ forward = reduce-scatter along the sequence", r);
  parallel::g_backward(tp, partial[size_t(r)].data(), got.data(), x);
  expect(max_diff(got.data(), want.data(), local) < 1e-5f, "g backward = reduce-scatter along the sequence", r);

  // Vocabulary-parallel cross-entropy = the dense one (padding columns never predicted).
  const int64_t N = 5, v_real = 13, v_pad = 8 * t * ((v_real + 8 * t - 1) / (8 * t)), vl = v_pad / t;
  const std::vector<float> logits = seeded(N * v_pad, 7, 8.0f);
  std::vector<int32_t> targets = {0, 3, 7, 12, 5};
  std::vector<float> dense_probs = logits, dense_loss(static_cast<size_t>(N));
  cross_entropy_forward(dense_probs.data(), dense_loss.data(), targets.data(), N, v_real, v_pad);
  std::vector<float> mine_logits(static_cast<size_t>(N * vl)), mine_loss(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < vl; ++j) mine_logits[size_t(i * vl + j)] = logits[size_t(i * v_pad + r * vl + j)];
  const parallel::VocabShard shard{r * vl, vl, v_real};
  parallel::cross_entropy_forward({&tp, false}, mine_logits.data(), mine_loss.data(), targets.data(), shard, N);
  // Loss = log Σ exp over v_real = 13 logits (|logit| <= 8) − the target's: the shards' sums are
  // combined in another order, <= 13·2^-24 relative in the sum, so absolute in the log (7.7e-7),
  // plus an ulp of the loss (~10: 9.5e-7): 1.7e-6 < 1e-5. Probabilities (<= 1) share that relative
  // error plus exp's: <= 13·2^-24 + 2^-23 ≈ 9e-7 < 1e-6, tight but a worst case on the same bits.
  expect(max_diff(mine_loss.data(), dense_loss.data(), N) < 1e-5f, "vocab-parallel loss = dense loss", r);
  float probs_err = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < vl; ++j)
      probs_err = std::max(probs_err, std::fabs(mine_logits[size_t(i * vl + j)] - dense_probs[size_t(i * v_pad + r * vl + j)]));
  expect(probs_err < 1e-6f, "vocab-parallel probabilities = this shard of the dense ones", r);

  float total = float(failures);
  dist.world().all_reduce({&total, 1});
  if (dist.rank() == 0) std::printf("conjugate_test: %d ranks, %s\n", t, total == 0 ? "all checks passed" : "FAILED");
  return total == 0 ? 0 : 1;
}
