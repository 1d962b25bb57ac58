// The kernels the backend seam needed beyond the CPU kernels' first CUDA forms (cuda/kernels.hpp):
// the vocabulary shard's embedding, the positions, the bf16 accumulate of 16-bit gradients. The same
// arithmetic in the same order as the CPU's (kernels/vocab_shard.cpp, tensor/half.cpp).
#include <cub/device/device_radix_sort.cuh>

#include "cuda/common.cuh"
#include "cuda/kernels.hpp"

namespace lattice::cuda {

using namespace detail;

namespace {

// Token ids are non-negative int32: a shard's backward sorts on every bit an id may have, since the
// tokens of other shards are in the same list (skipped after the sort).
constexpr int kIdBits = 31;

__global__ void embedding_shard_forward_kernel(float* out, const int32_t* ids, const float* wte, int64_t v0,
                                               int64_t v_local, int64_t h, int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / h, i = k % h, row = int64_t(ids[n]) - v0;
    out[k] = row >= 0 && row < v_local ? wte[row * h + i] : 0.0f;
  }
}

__global__ void shard_iota_kernel(uint32_t* v, int64_t n) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    v[k] = uint32_t(k);
}

// One block per position of the sorted tokens; the block at the start of a run of one id this shard
// holds adds the run's gradients into the row, in token order (the sort is stable).
__global__ void embedding_shard_backward_kernel(float* dwte, const float* dout, const uint32_t* sorted_ids,
                                                const uint32_t* sorted_tokens, int64_t v0, int64_t v_local,
                                                int64_t N, int64_t h) {
  const int64_t k = blockIdx.x;
  const uint32_t id = sorted_ids[k];
  if (k > 0 && sorted_ids[k - 1] == id) return;
  const int64_t row = int64_t(id) - v0;
  if (row < 0 || row >= v_local) return;
  int64_t end = k + 1;
  while (end < N && sorted_ids[end] == id) ++end;
  float* out = dwte + row * h;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float acc = out[i];
    for (int64_t t = k; t < end; ++t) acc += dout[int64_t(sorted_tokens[t]) * h + i];
    out[i] = acc;
  }
}

__global__ void add_positions_kernel(float* x, const float* wpe, int64_t s_local, int64_t pos0, int64_t h,
                                     int64_t total) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / h, i = k % h;
    x[k] += wpe[(pos0 + n % s_local) * h + i];
  }
}

__global__ void position_grads_kernel(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0,
                                      int64_t h) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < s_local * h;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / h, c = k % h;
    float acc = dwpe[(pos0 + i) * h + c];
    for (int64_t bi = 0; bi < b; ++bi) acc += dx[(bi * s_local + i) * h + c];
    dwpe[(pos0 + i) * h + c] = acc;
  }
}

__global__ void bf16_accumulate_kernel(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    dst[k] = to_bf16_bits(from_bf16_bits(dst[k]) + src[k]);
}

struct ShardSortLayout {
  size_t sorted_ids, tokens, sorted_tokens, temp, temp_bytes, total;
};
ShardSortLayout shard_sort_layout(int64_t N) {
  ShardSortLayout w{};
  check(cub::DeviceRadixSort::SortPairs(nullptr, w.temp_bytes, static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), N, 0, kIdBits),
        "radix sort size");
  size_t at = 0;
  const size_t words = size_t(N) * sizeof(uint32_t);
  w.sorted_ids = carve(at, words);
  w.tokens = carve(at, words);
  w.sorted_tokens = carve(at, words);
  w.temp = carve(at, w.temp_bytes);
  w.total = at;
  return w;
}

}  // namespace

void embedding_shard_forward(float* out, const int32_t* ids, const float* wte, int64_t v0, int64_t v_local, int64_t N,
                             int64_t h, cudaStream_t stream) {
  const int64_t total = N * h;
  embedding_shard_forward_kernel<<<grid_for(total), kBlock, 0, stream>>>(out, ids, wte, v0, v_local, h, total);
  check_launch("embedding_shard_forward");
}

size_t embedding_shard_backward_workspace_bytes(int64_t N, int64_t) { return shard_sort_layout(N).total; }

void embedding_shard_backward(float* dwte, const float* dout, const int32_t* ids, int64_t v0, int64_t v_local,
                              int64_t N, int64_t h, Workspace ws, cudaStream_t stream) {
  const ShardSortLayout w = shard_sort_layout(N);
  if (ws.bytes < w.total || (w.total > 0 && !ws.data))
    throw std::invalid_argument("embedding_shard_backward: workspace of " + std::to_string(ws.bytes) +
                                " bytes, needs " + std::to_string(w.total));
  if (N == 0) return;
  char* base = static_cast<char*>(ws.data);
  auto* sorted_ids = reinterpret_cast<uint32_t*>(base + w.sorted_ids);
  auto* tokens = reinterpret_cast<uint32_t*>(base + w.tokens);
  auto* sorted_tokens = reinterpret_cast<uint32_t*>(base + w.sorted_tokens);
  shard_iota_kernel<<<grid_for(N), kBlock, 0, stream>>>(tokens, N);
  check_launch("embedding_shard_backward iota");
  size_t temp_bytes = w.temp_bytes;
  check(cub::DeviceRadixSort::SortPairs(base + w.temp, temp_bytes, reinterpret_cast<const uint32_t*>(ids), sorted_ids,
                                        tokens, sorted_tokens, N, 0, kIdBits, stream),
        "embedding_shard_backward radix sort");
  embedding_shard_backward_kernel<<<unsigned(N), kBlock, 0, stream>>>(dwte, dout, sorted_ids, sorted_tokens, v0,
                                                                       v_local, N, h);
  check_launch("embedding_shard_backward");
}

void add_positions(float* x, const float* wpe, int64_t b, int64_t s_local, int64_t pos0, int64_t h,
                   cudaStream_t stream) {
  const int64_t total = b * s_local * h;
  add_positions_kernel<<<grid_for(total), kBlock, 0, stream>>>(x, wpe, s_local, pos0, h, total);
  check_launch("add_positions");
}

void position_grads(float* dwpe, const float* dx, int64_t b, int64_t s_local, int64_t pos0, int64_t h,
                    cudaStream_t stream) {
  position_grads_kernel<<<grid_for(s_local * h), kBlock, 0, stream>>>(dwpe, dx, b, s_local, pos0, h);
  check_launch("position_grads");
}

void bf16_accumulate(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  bf16_accumulate_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  check_launch("bf16_accumulate");
}

}  // namespace lattice::cuda
