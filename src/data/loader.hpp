#pragma once
// Batch loader. A global batch's content is a pure function of (seed, step, global row), so any
// parallel layout (data-parallel ranks reading their own rows, any micro-batch split) and a run
// resumed from a checkpoint read exactly the same sequences: there is no cursor to save.
#include <cstdint>

#include "data/token_file.hpp"

namespace lattice::data {

class BatchLoader {
 public:
  // Throws InputError if the file has fewer than seq_len + 1 tokens, or for a non-positive
  // seq_len or global_batch.
  BatchLoader(const TokenFile& file, int seq_len, int64_t global_batch, uint64_t seed, bool shuffle);

  // Rows [first_row, first_row + rows) of the global batch of `step`, each seq_len tokens, into
  // inputs and targets (row-major, rows x seq_len); targets are the inputs shifted by one.
  void fill(int64_t step, int64_t first_row, int rows, int32_t* inputs, int32_t* targets) const;

  // First token of the window read by `row` of `step`'s global batch. Window index
  // w = step * global_batch + row. shuffle off: (w mod W) * seq_len with W = (n - 1) / seq_len,
  // i.e. llm.c's order, wrapping when a window of seq_len + 1 tokens would pass the end.
  // shuffle on: hash(seed, w) mod (n - seq_len), a stateless counter-based draw.
  int64_t window_start(int64_t step, int64_t row) const;

  // W = (n - 1) / seq_len: the windows that follow one another through the file. Shuffle off, the
  // first W windows read (steps times rows) are each read once; the next wraps to the start.
  int64_t windows() const { return (int64_t(file_.size()) - 1) / seq_len_; }
  int seq_len() const { return seq_len_; }
  int64_t global_batch() const { return global_batch_; }

 private:
  TokenFile file_;
  int seq_len_;
  int64_t global_batch_;
  uint64_t seed_;
  bool shuffle_;
};

}  // namespace lattice::data
