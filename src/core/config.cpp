#include "core/config.hpp"

#include "core/error.hpp"

namespace lattice {

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}
const char* to_string(DType d) { return d == DType::bf16 ? "bf16" : "fp32"; }
const char* to_string(ParamsDType d) {
  switch (d) {
    case ParamsDType::fp32: return "fp32";
    case ParamsDType::bf16: return "bf16";
    case ParamsDType::fp16: return "fp16";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  fail("--recompute must be none, selective or full (got '" + s + "')");
}

DType parse_dtype(const std::string& s) {
  if (s == "fp32") return DType::fp32;
  if (s == "bf16") return DType::bf16;
  fail("--activation-dtype must be fp32 or bf16 (got '" + s + "')");
}

ParamsDType parse_params_dtype(const std::string& s) {
  if (s == "fp32") return ParamsDType::fp32;
  if (s == "bf16") return ParamsDType::bf16;
  if (s == "fp16") return ParamsDType::fp16;
  fail("--params-dtype must be fp32, bf16 or fp16 (got '" + s + "')");
}

int64_t ModelConfig::num_params() const {
  const int64_t h = hidden, L = layers;
  const int64_t per_layer = 12 * h * h + 13 * h;  // qkv, proj, fc1, fc2 weights+biases, two LNs
  return int64_t(padded_vocab()) * h + int64_t(seq_len) * h + L * per_layer + 2 * h;
}

void ModelConfig::validate() const {
  auto within = [](const char* flag, int v, int lo, int hi) {
    require(v >= lo && v <= hi, std::string(flag) + " must be between " + std::to_string(lo) + " and " +
                                    std::to_string(hi) + " (got " + std::to_string(v) + ")");
  };
  within("--layers", layers, 1, kMaxLayers);
  within("--hidden", hidden, 1, kMaxHidden);
  within("--heads", heads, 1, kMaxHidden);
  within("--seq-len", seq_len, 1, kMaxSeqLen);
  require(hidden % heads == 0, "--heads (" + std::to_string(heads) + ") must divide --hidden (" +
                                   std::to_string(hidden) + ")");
  require(seq_len >= 1, "--seq-len must be at least 1 (got " + std::to_string(seq_len) + ")");
  require(vocab >= 2 && vocab <= 65536,
          "--vocab must be between 2 and 65536 (tokens are uint16; got " + std::to_string(vocab) + ")");
  require(dropout >= 0.0 && dropout < 1.0, "--dropout must be in [0, 1) (got " + std::to_string(dropout) + ")");
}

}  // namespace lattice
