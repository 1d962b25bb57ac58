#include "tensor_parallel/vocab_parallel.hpp"

#include <algorithm>
#include <vector>

#include "backend/device_ops.hpp"
#include "tensor/device_memory.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::parallel {

void embedding_tokens_forward(float* out, const int32_t* ids, const float* wte, const VocabShard& v, int64_t N,
                              int64_t h) {
  dev::embedding_shard_forward(out, ids, wte, v.v0, v.v_local, N, h);
}

void embedding_tokens_backward(float* dwte, const float* dout, const int32_t* ids, const VocabShard& v, int64_t N,
                               int64_t h) {
  dev::embedding_shard_backward(dwte, dout, ids, v.v0, v.v_local, N, h);
}

namespace {
// Columns of this shard that are real tokens.
int64_t real_columns(const VocabShard& v) { return std::max<int64_t>(0, std::min(v.v_local, v.v_real - v.v0)); }
// The rows' maximum, sum of exponentials and target logit, N floats each.
struct RowStats {
  explicit RowStats(int64_t N)
      : row_max(static_cast<size_t>(N)), row_sum(row_max.size()), target_logit(row_max.size()) {}
  DeviceVector<float, MemoryCategory::workspaces> row_max, row_sum, target_logit;
};
// The rows' statistics over the TP group: each shard's maximum and target logit (max_target), all-reduced
// (MAX, SUM), then its sum of exponentials under the global maximum (exp_sum), all-reduced (SUM).
template <class MaxTarget, class ExpSum>
void all_reduced_stats(const TensorParallel& tp, float* row_max, float* target_logit, float* row_sum, int64_t N,
                       MaxTarget max_target, ExpSum exp_sum) {
  max_target();
  tp.group->all_reduce({row_max, size_t(N)}, comm::ReduceOp::max);
  tp.group->all_reduce({target_logit, size_t(N)});
  exp_sum();
  tp.group->all_reduce({row_sum, size_t(N)});
}
}  // namespace

void cross_entropy_forward(const TensorParallel& tp, float* logits, float* losses, const int32_t* targets,
                           const VocabShard& v, int64_t N) {
  const int64_t real = real_columns(v);
  RowStats stats(N);
  auto &row_max = stats.row_max, &row_sum = stats.row_sum, &target_logit = stats.target_logit;
  if (!tp.active()) {  // one shard (v0 = 0), nothing to all-reduce between the pieces: one pass on a device
    dev::ce_whole_forward(logits, losses, row_max.data(), row_sum.data(), target_logit.data(), targets, v.v_local,
                          real, N);
    return;
  }
  all_reduced_stats(
      tp, row_max.data(), target_logit.data(), row_sum.data(), N,
      [&] { dev::ce_shard_max_target(row_max.data(), target_logit.data(), logits, targets, v.v0, v.v_local, real, N); },
      [&] { dev::ce_shard_exp_sum(row_sum.data(), logits, row_max.data(), v.v_local, real, N); });
  dev::ce_shard_normalize(logits, losses, row_max.data(), row_sum.data(), target_logit.data(), v.v_local, real, N);
}

void cross_entropy_forward_bf16(const TensorParallel& tp, float* kept_stats, const uint16_t* logits16, float* losses,
                                const int32_t* targets, const VocabShard& v, int64_t N) {
  const int64_t real = real_columns(v);
  float *row_max = kept_stats, *row_sum = kept_stats + N;
  DeviceVector<float, MemoryCategory::workspaces> target_logit(static_cast<size_t>(N));
  if (!tp.active()) {
    dev::ce_whole_forward_bf16(logits16, losses, row_max, row_sum, target_logit.data(), targets, v.v_local, real, N);
    return;
  }
  all_reduced_stats(
      tp, row_max, target_logit.data(), row_sum, N,
      [&] { dev::ce_shard_max_target_bf16(row_max, target_logit.data(), logits16, targets, v.v0, v.v_local, real, N); },
      [&] { dev::ce_shard_exp_sum_bf16(row_sum, logits16, row_max, v.v_local, real, N); });
  dev::ce_row_losses(losses, row_max, row_sum, target_logit.data(), N);
}

void cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, const VocabShard& v,
                            int64_t N, float scale) {
  dev::ce_shard_backward(dlogits, probs, targets, v.v0, v.v_local, N, scale);
}

void cross_entropy_backward_bf16(uint16_t* dlogits16, const uint16_t* logits16, const float* kept_stats,
                                 const int32_t* targets, const VocabShard& v, int64_t N, float scale) {
  dev::ce_shard_backward_bf16(dlogits16, logits16, kept_stats, kept_stats + N, targets, v.v0, v.v_local,
                              real_columns(v), N, scale);
}

}  // namespace lattice::parallel
