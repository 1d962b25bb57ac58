#pragma once
// Model and layout configuration shared by the engine, the planner and the reports.
#include <cstdint>
#include <string>

namespace lattice {

enum class Recompute { none, selective, full };
enum class DType { fp32, bf16 };
// How model weights and gradients are stored: fp32, or 16 bits with fp32 master weights.
enum class ParamsDType { fp32, bf16, fp16 };

const char* to_string(Recompute r);
const char* to_string(DType d);
const char* to_string(ParamsDType d);
Recompute parse_recompute(const std::string& s);  // throws InputError
DType parse_dtype(const std::string& s);          // throws InputError
ParamsDType parse_params_dtype(const std::string& s);  // throws InputError
inline int bytes_of(DType d) { return d == DType::bf16 ? 2 : 4; }

// Bounds of a model's shape: far past any model trained today, and small enough that every size
// computed from them (parameters, bytes, FLOPs) fits 64-bit arithmetic.
inline constexpr int kMaxLayers = 10000;
inline constexpr int kMaxHidden = 1 << 20;
inline constexpr int kMaxSeqLen = 1 << 20;

struct ModelConfig {
  int layers = 4;
  int hidden = 128;
  int heads = 4;
  int seq_len = 64;
  int vocab = 256;     // the tokenizer's vocabulary; padded internally
  double dropout = 0.1;

  int head_dim() const { return hidden / heads; }
  // Megatron's --make-vocab-size-divisible-by 128, times the tensor-parallel size.
  int padded_vocab(int tp = 1) const {
    const int q = 128 * tp;
    return (vocab + q - 1) / q * q;
  }
  int64_t num_params() const;  // with the padded vocabulary (what the engine stores)
  void validate() const;       // throws InputError naming the bad field
};

// How the work is split; everything defaults to one rank.
struct LayoutConfig {
  int tp = 1;             // tensor-parallel size t
  int pp = 1;             // pipeline-parallel size p
  int virtual_stages = 1; // m, interleaved chunks per pipeline rank
  int dp = 1;             // data-parallel size N_d
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int recompute_layers = -1;  // full recompute of the first N layers only; -1 = all (when full)
  DType activation_dtype = DType::fp32;
  int zero = 0;
  // Model weights and gradients for compute: fp32, or 16-bit (bf16, fp16) with fp32 master
  // weights in the optimizer (mixed precision, docs/design.md §8).
  ParamsDType params_dtype = ParamsDType::fp32;
  bool mixed_precision() const { return params_dtype != ParamsDType::fp32; }
};

}  // namespace lattice
