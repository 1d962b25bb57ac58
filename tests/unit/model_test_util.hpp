#pragma once
// A small GPT and a batch of tokens for the whole-model tests.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "gradcheck_util.hpp"
#include "model/gpt.hpp"

namespace modeltest {

inline lattice::ModelConfig small_model(double dropout = 0.1, int layers = 2, int hidden = 32, int heads = 4,
                                        int seq_len = 16, int vocab = 64) {
  lattice::ModelConfig m;
  m.layers = layers, m.hidden = hidden, m.heads = heads, m.seq_len = seq_len, m.vocab = vocab;
  m.dropout = dropout;
  return m;
}

inline lattice::LayoutConfig layout(lattice::Recompute r, lattice::DType dt, int recompute_layers = -1) {
  lattice::LayoutConfig l;
  l.recompute = r;
  l.activation_dtype = dt;
  l.recompute_layers = recompute_layers;
  return l;
}

// rows × seq_len inputs and targets, uniform over the real vocabulary.
struct Tokens {
  std::vector<int32_t> inputs, targets;
  Tokens(int64_t rows, int64_t s, int vocab, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
    for (int64_t i = 0; i < rows * s; ++i) inputs.push_back(dist(gen)), targets.push_back(dist(gen));
  }
  lattice::MicroBatch rows(int64_t first, int64_t count, int64_t s) const {
    return {inputs.data() + first * s, targets.data() + first * s, count, first};
  }
};

// Replaces GPT-2's tiny init by weights of order one (attention far from uniform, LayerNorm
// weights away from 1, non-zero biases, random padded vocabulary rows), so every path of the
// model carries a gradient a finite difference can see.
inline void randomize_params(lattice::GPT& gpt, uint32_t seed) {
  const auto& table = gpt.table();
  uint32_t k = seed;
  for (const auto& p : table.params()) {
    const bool is_bias = p.name.size() >= 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    float std = 0.1f, mean = 0.0f;
    const bool embedding = p.name == "wte.weight" || p.name == "wpe.weight";
    if (p.shape.size() == 1 && !is_bias) std = 0.2f, mean = 1.0f;  // LayerNorm weight
    if (p.shape.size() == 2) std = embedding ? 0.5f : 1.0f / std::sqrt(float(p.shape[0]));
    const auto v = gradcheck::randn(p.numel, k++, std, mean);
    std::copy(v.begin(), v.end(), gpt.params() + p.offset);
  }
  gpt.refresh_compute_weights();
}

}  // namespace modeltest
