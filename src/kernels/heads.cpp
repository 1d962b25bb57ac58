#include "kernels/heads.hpp"

namespace lattice {

void split_heads(float* q, float* k, float* v, const float* qkv, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < x.b; ++bi)
    for (int64_t si = 0; si < x.s; ++si) {
      const float* row = qkv + (bi * x.s + si) * 3 * h;
      for (int64_t hd = 0; hd < x.a; ++hd) {
        const int64_t dst = ((bi * x.a + hd) * x.s + si) * dh;
        for (int64_t e = 0; e < dh; ++e) {
          q[dst + e] = row[hd * dh + e];
          k[dst + e] = row[h + hd * dh + e];
          v[dst + e] = row[2 * h + hd * dh + e];
        }
      }
    }
}

void merge_heads(float* out, const float* heads, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < x.b; ++bi)
    for (int64_t si = 0; si < x.s; ++si)
      for (int64_t hd = 0; hd < x.a; ++hd)
        for (int64_t e = 0; e < dh; ++e)
          out[(bi * x.s + si) * h + hd * dh + e] = heads[((bi * x.a + hd) * x.s + si) * dh + e];
}

void unmerge_heads(float* heads, const float* rows, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < x.b; ++bi)
    for (int64_t si = 0; si < x.s; ++si)
      for (int64_t hd = 0; hd < x.a; ++hd)
        for (int64_t e = 0; e < dh; ++e)
          heads[((bi * x.a + hd) * x.s + si) * dh + e] = rows[(bi * x.s + si) * h + hd * dh + e];
}

void merge_qkv_grads(float* dqkv, const float* dq, const float* dk, const float* dv, const HeadShape& x) {
  const int64_t dh = x.dh, h = x.a * x.dh;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < x.b; ++bi)
    for (int64_t si = 0; si < x.s; ++si) {
      float* row = dqkv + (bi * x.s + si) * 3 * h;
      for (int64_t hd = 0; hd < x.a; ++hd) {
        const int64_t src = ((bi * x.a + hd) * x.s + si) * dh;
        for (int64_t e = 0; e < dh; ++e) {
          row[hd * dh + e] = dq[src + e];
          row[h + hd * dh + e] = dk[src + e];
          row[2 * h + hd * dh + e] = dv[src + e];
        }
      }
    }
}

}  // namespace lattice
