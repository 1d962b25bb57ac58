#include "kernels/bf16_fused.hpp"

#include <omp.h>

#include <algorithm>

#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/softmax.hpp"
#include "kernels/vocab_shard.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

namespace {

using RowBuffer = tracked_vector<float, MemoryCategory::workspaces>;

inline void narrow(uint16_t* dst, const float* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}
inline void widen(float* dst, const uint16_t* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

// The columns a row's values are made in at a time (fill's v).
constexpr int64_t kMaxBlock = 128;

// dst16 [N, out] = bf16 of the fp32 values `fill` gives, and db += their column sums, each column's
// rows added in order (bias_backward's sums, whatever the cut). fill(n, c0, len, v) writes row n's
// columns [c0, c0 + len) into v, len at most kMaxBlock and [c0, c0 + len) inside one of the runs of
// `run` columns the row is made of. Each thread takes a contiguous stretch of columns (whole vectors
// of 16) and walks the rows in order over it: its reads of a row are one contiguous stretch (narrow
// column blocks down all rows touched a new page per row and ran several times slower), and its
// running sums (out/threads floats) stay in cache.
template <class Fill>
void narrow_columns(uint16_t* dst16, float* db, int64_t N, int64_t out, int64_t run, Fill fill) {
  constexpr int64_t unit = 16;
  const int64_t units = (out + unit - 1) / unit;
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t c_begin = std::min(out, units * t / nt * unit), c_end = std::min(out, units * (t + 1) / nt * unit);
    RowBuffer acc(static_cast<size_t>(c_end - c_begin), 0.0f);
    float v[kMaxBlock];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c0 = c_begin; c0 < c_end;) {
        const int64_t len = std::min({kMaxBlock, c_end - c0, run - c0 % run});
        fill(n, c0, len, v);
        float* a = acc.data() + (c0 - c_begin);
        uint16_t* d = dst16 + n * out + c0;
#pragma omp simd
        for (int64_t c = 0; c < len; ++c) {
          a[c] += v[c];
          d[c] = to_bf16(v[c]);
        }
        c0 += len;
      }
    for (int64_t c = c_begin; c < c_end; ++c) db[c] += acc[size_t(c - c_begin)];
  }
}

}  // namespace

void layernorm_forward_bf16(uint16_t* x16, uint16_t* y16, float* mean, float* rstd, const float* x,
                            const float* weight, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel
  {
    RowBuffer y(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      layernorm_forward_row(y.data(), mean + n, rstd + n, x + n * C, weight, bias, C);
      narrow(y16 + n * C, y.data(), C);
      narrow(x16 + n * C, x + n * C, C);
    }
  }
}

void split_heads16(uint16_t* q, uint16_t* k, uint16_t* v, const uint16_t* qkv16, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
  for_each_head_run(x, 3 * h, [&](int64_t head, int64_t row) {
    std::copy_n(qkv16 + row, dh, q + head);
    std::copy_n(qkv16 + row + h, dh, k + head);
    std::copy_n(qkv16 + row + 2 * h, dh, v + head);
  });
}

void split_heads_widened(float* q, float* k, float* v, const uint16_t* qkv16, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
  for_each_head_run(x, 3 * h, [&](int64_t head, int64_t row) {
    widen(q + head, qkv16 + row, dh);
    widen(k + head, qkv16 + row + h, dh);
    widen(v + head, qkv16 + row + 2 * h, dh);
  });
}

void merge_heads_bf16(uint16_t* out, const float* heads, const HeadShape& x) {
  for_each_head_run(x, x.a * x.dh, [&](int64_t head, int64_t row) { narrow(out + row, heads + head, x.dh); });
}

void unmerge_heads_bf16(float* heads, const uint16_t* rows16, const HeadShape& x) {
  for_each_head_run(x, x.a * x.dh, [&](int64_t head, int64_t row) { widen(heads + head, rows16 + row, x.dh); });
}

void gelu_forward16(uint16_t* act16, const uint16_t* pre16, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) act16[i] = to_bf16(gelu_value(from_bf16(pre16[i])));
}

void narrow_bias_backward(uint16_t* dy16, float* db, const float* dy, int64_t N, int64_t out) {
  narrow_columns(dy16, db, N, out, out, [=](int64_t n, int64_t c0, int64_t len, float* v) {
    const float* row = dy + n * out + c0;
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) v[c] = row[c];
  });
}

namespace {
// A row of the gradient from its probabilities p (ce_shard_backward's element math), narrowed in
// stack-sized pieces.
void narrow_ce_grad_row(uint16_t* d16, const float* p, int64_t t, int64_t v_local, float scale) {
  constexpr int64_t kChunk = 256;
  float g[kChunk];
  for (int64_t c0 = 0; c0 < v_local; c0 += kChunk) {
    const int64_t len = std::min(kChunk, v_local - c0);
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) g[c] = p[c0 + c] * scale;
    if (t >= c0 && t < c0 + len) g[t - c0] -= scale;  // as ce_shard_backward: after the product's rounding
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) d16[c0 + c] = to_bf16(g[c]);  // the scalar rule, in vector lanes
  }
}
// f(rows, n0, count) for the rows widened a block at a time into one buffer (the fp32 pieces called on a
// block run their own parallel loops over its rows, each row's values computed as over all N, so the
// bits are theirs); blocks of eight rows a thread, so no parallel region opens inside another.
int64_t widened_block_rows(int threads = omp_get_max_threads()) { return 8 * int64_t(std::max(1, threads)); }
// The rows of N a block holds.
int64_t widened_block(int64_t N, int threads) {
  return std::max<int64_t>(1, std::min<int64_t>(N, widened_block_rows(threads)));
}
}  // namespace
int64_t ce_widened_block_bytes(int64_t N, int64_t v_local, int threads) {
  return 4 * std::max<int64_t>(widened_block(N, threads) * v_local, 1);
}
namespace {
template <class F>
void for_each_widened_block(const uint16_t* logits16, int64_t v_local, int64_t N, F f) {
  const int threads = omp_get_max_threads();
  const int64_t block = widened_block(N, threads);
  RowBuffer rows(static_cast<size_t>(ce_widened_block_bytes(N, v_local, threads) / 4));  // the planner's count
  for (int64_t n0 = 0; n0 < N; n0 += block) {
    const int64_t count = std::min(block, N - n0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < count; ++r) widen(rows.data() + r * v_local, logits16 + (n0 + r) * v_local, v_local);
    f(rows.data(), n0, count);
  }
}
}  // namespace

void ce_whole_forward_bf16(const uint16_t* logits16, float* losses, float* row_max, float* row_sum,
                           float* target_logit, const int32_t* targets, int64_t v_local, int64_t real, int64_t N) {
  for_each_widened_block(logits16, v_local, N, [&](float* rows, int64_t n0, int64_t count) {
    ce_whole_forward(rows, losses + n0, row_max + n0, row_sum + n0, target_logit + n0, targets + n0, v_local, real,
                     count);
  });
}

void ce_shard_max_target_bf16(float* row_max, float* target_logit, const uint16_t* logits16, const int32_t* targets,
                              int64_t v0, int64_t v_local, int64_t real, int64_t N) {
  for_each_widened_block(logits16, v_local, N, [&](float* rows, int64_t n0, int64_t count) {
    ce_shard_max_target(row_max + n0, target_logit + n0, rows, targets + n0, v0, v_local, real, count);
  });
}

void ce_shard_exp_sum_bf16(float* row_sum, const uint16_t* logits16, const float* row_max, int64_t v_local,
                           int64_t real, int64_t N) {
  for_each_widened_block(logits16, v_local, N, [&](float* rows, int64_t n0, int64_t count) {
    ce_shard_exp_sum(row_sum + n0, rows, row_max + n0, v_local, real, count);
  });
}

void ce_row_losses(float* losses, const float* row_max, const float* row_sum, const float* target_logit, int64_t N) {
  // ce_shard_normalize over rows of no columns: its losses alone, by its own expression.
  float no_columns = 0.0f;
  ce_shard_normalize(&no_columns, losses, row_max, row_sum, target_logit, 0, 0, N);
}

void ce_shard_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* row_max, const float* row_sum,
                            const int32_t* targets, int64_t v0, int64_t v_local, int64_t real, int64_t N,
                            float scale) {
  RowBuffer unused(static_cast<size_t>(widened_block_rows()));  // a block's rows at most
  const RowBuffer no_target(unused.size(), 0.0f);
  for_each_widened_block(logits16, v_local, N, [&](float* rows, int64_t n0, int64_t count) {
    // The exponentials (their sums again, unused: the kept, all-reduced sums divide), then the quotients.
    ce_shard_exp_sum(unused.data(), rows, row_max + n0, v_local, real, count);
    ce_shard_normalize(rows, unused.data(), row_max + n0, row_sum + n0, no_target.data(), v_local, real, count);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < count; ++r)
      narrow_ce_grad_row(dlogits16 + (n0 + r) * v_local, rows + r * v_local, int64_t(targets[n0 + r]) - v0, v_local,
                         scale);
  });
}

void gelu_backward_narrow(uint16_t* g16, float* db, const uint16_t* pre16, const uint16_t* dout16, int64_t N,
                          int64_t out) {
  narrow_columns(g16, db, N, out, out, [=](int64_t n, int64_t c0, int64_t len, float* v) {
    const uint16_t* d = dout16 + n * out + c0;
    const uint16_t* p = pre16 + n * out + c0;
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) v[c] = from_bf16(d[c]) * gelu_grad(from_bf16(p[c]));
  });
}

void merge_qkv_grads_narrow(uint16_t* dqkv16, float* db, const float* dq, const float* dk, const float* dv,
                            const HeadShape& x) {
  const int64_t dh = x.dh, hl = x.a * x.dh;
  // Units of one head of one of Q, K, V: a block of a row is one contiguous run of that head's row.
  const float* parts[3] = {dq, dk, dv};
  narrow_columns(dqkv16, db, x.b * x.s, 3 * hl, dh, [=](int64_t n, int64_t c0, int64_t len, float* v) {
    const int64_t bi = n / x.s, si = n % x.s, part = c0 / hl, hd = (c0 % hl) / dh, e0 = c0 % dh;
    const float* src = parts[part] + ((bi * x.a + hd) * x.s + si) * dh + e0;
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) v[c] = src[c];
  });
}

void softmax_causal_backward_bf16(uint16_t* ds16, const float* dprobs, const uint16_t* probs16, int64_t batch,
                                  int64_t s) {
#pragma omp parallel
  {
    RowBuffer p(static_cast<size_t>(s)), ds(static_cast<size_t>(s));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < batch * s; ++row) {
      widen(p.data(), probs16 + row * s, s);
      softmax_backward_row(ds.data(), dprobs + row * s, p.data(), row % s, s);
      narrow(ds16 + row * s, ds.data(), s);
    }
  }
}

void layernorm_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  // layernorm_backward's threads, rows and partial sums, the input row widened first.
  const int64_t floats = layernorm_partial_floats(C);
  const int threads = int(floats / (2 * C));
  tracked_vector<float, MemoryCategory::workspaces> partial(static_cast<size_t>(floats), 0.0f);
#pragma omp parallel num_threads(threads)
  {
    float* dw = partial.data() + size_t(omp_get_thread_num()) * 2 * size_t(C);
    float* db = dw + C;
    RowBuffer x(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      widen(x.data(), inp16 + n * C, C);
      layernorm_backward_row(dinp + n * C, dw, db, dout + n * C, x.data(), weight, mean[n], rstd[n], C);
    }
  }
  layernorm_reduce_partials(dweight, dbias, partial.data(), floats, C);
}

}  // namespace lattice
