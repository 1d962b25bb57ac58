#pragma once
// The host simulation's cub::DeviceRadixSort::SortPairs: a stable sort of (key, value) pairs by the
// keys' bits [begin_bit, end_bit), as cub's radix sort orders them (a stable sort on those bits).
#include <algorithm>
#include <numeric>
#include <vector>

#include "../../cuda_runtime.h"

namespace cub {
struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, int64_t n, int begin_bit = 0, int end_bit = int(sizeof(K) * 8),
                               cudaStream_t = nullptr) {
    if (!temp) {
      temp_bytes = 256;  // cub asks for some; the host sort needs none of it
      return cudaSuccess;
    }
    const unsigned width = unsigned(end_bit - begin_bit);
    const K mask = width >= sizeof(K) * 8 ? K(~K(0)) : K((K(1) << width) - 1);
    auto bits = [&](K k) { return K((k >> begin_bit) & mask); };
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t(0));
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return bits(keys_in[a]) < bits(keys_in[b]); });
    std::vector<K> k(static_cast<size_t>(n));
    std::vector<V> v(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) k[i] = keys_in[order[i]], v[i] = values_in[order[i]];
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
    return cudaSuccess;
  }
};
}  // namespace cub
