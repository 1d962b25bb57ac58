#include "data/loader.hpp"

#include <string>

#include "core/error.hpp"

namespace lattice::data {
namespace {

// splitmix64's finalizer: a bijective 64-bit mixer with full avalanche.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A counter-based draw: the seed selects a stream, the window index a position in it.
uint64_t window_hash(uint64_t seed, uint64_t window) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  return mix64(mix64(seed + kGolden) + (window + 1) * kGolden);
}

}  // namespace

BatchLoader::BatchLoader(const TokenFile& file, int seq_len, int64_t global_batch, uint64_t seed,
                         bool shuffle)
    : file_(file), seq_len_(seq_len), global_batch_(global_batch), seed_(seed), shuffle_(shuffle) {
  require(seq_len > 0, "seq-len must be positive, got " + std::to_string(seq_len));
  require(global_batch > 0, "global batch must be positive, got " + std::to_string(global_batch));
  require(file.size() >= static_cast<size_t>(seq_len) + 1,
          "seq-len " + std::to_string(seq_len) + " needs at least " + std::to_string(seq_len + 1) +
              " tokens; " + file.path() + " has " + std::to_string(file.size()));
}

int64_t BatchLoader::window_start(int64_t step, int64_t row) const {
  const auto n = static_cast<int64_t>(file_.size());
  const uint64_t w =
      static_cast<uint64_t>(step) * static_cast<uint64_t>(global_batch_) + static_cast<uint64_t>(row);
  if (shuffle_) return static_cast<int64_t>(window_hash(seed_, w) % static_cast<uint64_t>(n - seq_len_));
  const auto windows = static_cast<uint64_t>((n - 1) / seq_len_);
  return static_cast<int64_t>(w % windows) * seq_len_;
}

void BatchLoader::fill(int64_t step, int64_t first_row, int rows, int32_t* inputs, int32_t* targets) const {
  if (step < 0 || first_row < 0 || rows < 0 || first_row + rows > global_batch_) {
    fail("batch rows [" + std::to_string(first_row) + ", " + std::to_string(first_row + rows) + ") of step " +
         std::to_string(step) + " are outside the global batch of " + std::to_string(global_batch_));
  }
  const uint16_t* tokens = file_.tokens().data();
  for (int r = 0; r < rows; ++r) {
    const uint16_t* window = tokens + window_start(step, first_row + r);
    int32_t* in = inputs + static_cast<int64_t>(r) * seq_len_;
    int32_t* out = targets + static_cast<int64_t>(r) * seq_len_;
    for (int i = 0; i < seq_len_; ++i) {
      in[i] = window[i];
      out[i] = window[i + 1];
    }
  }
}

}  // namespace lattice::data
