#include "kernels/heads.hpp"

#include <algorithm>

namespace lattice {

void split_heads(float* q, float* k, float* v, const float* qkv, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
  for_each_head_run(x, 3 * h, [&](int64_t head, int64_t row) {
    std::copy_n(qkv + row, dh, q + head);
    std::copy_n(qkv + row + h, dh, k + head);
    std::copy_n(qkv + row + 2 * h, dh, v + head);
  });
}

void merge_heads(float* out, const float* heads, const HeadShape& x) {
  for_each_head_run(x, x.a * x.dh, [&](int64_t head, int64_t row) { std::copy_n(heads + head, x.dh, out + row); });
}

void unmerge_heads(float* heads, const float* rows, const HeadShape& x) {
  for_each_head_run(x, x.a * x.dh, [&](int64_t head, int64_t row) { std::copy_n(rows + row, x.dh, heads + head); });
}

void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
  for_each_head_run(x, 3 * h, [&](int64_t head, int64_t row) {
    std::copy_n(dq + head, dh, dqkv + row);
    std::copy_n(dk + head, dh, dqkv + row + h);
    std::copy_n(dv + head, dh, dqkv + row + 2 * h);
  });
}

}  // namespace lattice
