#include "core/config.hpp"

#include <cmath>
#include <cstdio>

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
const char* to_string(RecomputeMethod m) { return m == RecomputeMethod::uniform ? "uniform" : "block"; }
const char* to_string(DType d) { return d == DType::bf16 ? "bf16" : "fp32"; }
const char* to_string(ParamsDType d) {
  switch (d) {
    case ParamsDType::fp32: return "fp32";
    case ParamsDType::bf16: return "bf16";
    case ParamsDType::fp16: return "fp16";
  }
  return "?";
}

const char* to_string(AttentionKernel k) { return k == AttentionKernel::fused ? "fused" : "unfused"; }

const char* to_string(MoERouter r) {
  switch (r) {
    case MoERouter::topk: return "topk";
    case MoERouter::gshard: return "gshard";
    case MoERouter::switch_: return "switch";
    case MoERouter::expert_choice: return "expert-choice";
  }
  return "?";
}
const char* to_string(DropPolicy p) { return p == DropPolicy::probs ? "probs" : "position"; }

MoERouter parse_moe_router(const std::string& s) {
  if (s == "topk") return MoERouter::topk;
  if (s == "gshard") return MoERouter::gshard;
  if (s == "switch") return MoERouter::switch_;
  if (s == "expert-choice") return MoERouter::expert_choice;
  fail("--moe-router must be topk, gshard, switch or expert-choice (got '" + s + "')");
}

DropPolicy parse_drop_policy(const std::string& s) {
  if (s == "probs") return DropPolicy::probs;
  if (s == "position") return DropPolicy::position;
  fail("--moe-token-drop-policy must be probs or position (got '" + s + "')");
}

int MoEConfig::k() const {
  if (topk > 0) return topk;
  return router == MoERouter::topk || router == MoERouter::gshard ? 2 : 1;
}

int ModelConfig::moe_layers() const {
  if (!moe.enabled()) return 0;
  return (layers + moe.layer_freq - 1) / moe.layer_freq;
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  fail("--recompute must be none, selective, full or auto (auto with --memory-budget) (got '" + s + "')");
}

RecomputeMethod parse_recompute_method(const std::string& s) {
  if (s == "block") return RecomputeMethod::block;
  if (s == "uniform") return RecomputeMethod::uniform;
  fail("--recompute-method must be block or uniform (got '" + s + "')");
}

DType parse_dtype(const std::string& s) {
  if (s == "fp32") return DType::fp32;
  if (s == "bf16") return DType::bf16;
  fail("--activation-dtype must be fp32 or bf16 (got '" + s + "')");
}

AttentionKernel parse_attention(const std::string& s) {
  if (s == "unfused") return AttentionKernel::unfused;
  if (s == "fused") return AttentionKernel::fused;
  fail("--attention must be unfused or fused (got '" + s + "')");
}

const char* to_string(CpComm c) { return c == CpComm::p2p ? "p2p" : "a2a"; }

CpComm parse_cp_comm(const std::string& s) {
  if (s == "a2a") return CpComm::a2a;
  if (s == "p2p") return CpComm::p2p;
  fail("--cp-comm-type must be a2a or p2p (got '" + s + "')");
}

std::string context_parallel_problem(const ModelConfig& m, const LayoutConfig& layout) {
  const int c = layout.cp;
  if (c == 1) return "";
  const std::string flag = "--context-parallel-size " + std::to_string(c), n2c = std::to_string(2 * c);
  if (m.seq_len % (2 * c) != 0)
    return flag + " splits each sequence into 2c = " + n2c + " chunks: --seq-len " + std::to_string(m.seq_len) +
           " is not divisible by " + n2c;
  if (layout.sequence_parallel && m.seq_len % (2 * c * layout.tp) != 0)
    return flag + " with --sequence-parallel needs --seq-len " + std::to_string(m.seq_len) + " divisible by 2c·t = " +
           std::to_string(2 * c * layout.tp);
  if (layout.cp_comm == CpComm::p2p && layout.attention != AttentionKernel::fused)
    return flag + " --cp-comm-type p2p (the ring) runs on the fused attention kernel: add --attention fused, or use "
                  "--cp-comm-type a2a (the ring merges its blocks by their log-sum-exp, which only the fused kernel keeps)";
  if (layout.cp_comm == CpComm::a2a && (m.heads / layout.tp) % c != 0)
    return flag + " --cp-comm-type a2a gives each CP rank heads/(t·c) heads: the " + std::to_string(m.heads / layout.tp) +
           " heads a tensor-parallel rank holds (--heads " + std::to_string(m.heads) + " / t " +
           std::to_string(layout.tp) + ") are not divisible by " + std::to_string(c);
  return "";
}

ParamsDType parse_params_dtype(const std::string& s) {
  if (s == "fp32") return ParamsDType::fp32;
  if (s == "bf16") return ParamsDType::bf16;
  if (s == "fp16") return ParamsDType::fp16;
  fail("--params-dtype must be fp32, bf16 or fp16 (got '" + s + "')");
}

namespace {
// The parameter count in T: int64_t for num_params, double for validate's bound (in double it cannot
// wrap, so a model past the bound is refused rather than counted negative).
template <class T>
T parameters_of(const ModelConfig& c) {
  const T h = T(c.hidden), L = T(c.layers);
  const T per_layer = 12 * h * h + 13 * h;  // qkv, proj, fc1, fc2 weights+biases, two LNs
  const T dense = T(c.padded_vocab()) * h + T(c.seq_len) * h + L * per_layer + 2 * h;
  if (!c.moe.enabled()) return dense;
  // An MoE layer's MLP (8h² + 5h) becomes E experts of 2hf + f + h, and a router (hE, twice for
  // noisy top-k).
  const T f = T(c.ffn_hidden()), E = T(c.moe.experts);
  const T router = h * E * (c.moe.router == MoERouter::topk ? 2 : 1);
  return dense + T(c.moe_layers()) * (E * (2 * h * f + f + h) + router - (8 * h * h + 5 * h));
}
}  // namespace

int64_t ModelConfig::num_params() const { return parameters_of<int64_t>(*this); }

void ModelConfig::require_token_vocab() const {
  require(vocab <= kMaxTokenVocab,
          "a vocabulary of " + std::to_string(vocab) + " pieces: lattice trains, evaluates and samples models of at most " +
              std::to_string(kMaxTokenVocab) + " (its token files hold uint16 ids); lattice plan sizes up to " +
              std::to_string(kMaxVocab));
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
  within("--vocab", vocab, 2, kMaxVocab);
  require(dropout >= 0.0 && dropout < 1.0, "--dropout must be in [0, 1) (got " + std::to_string(dropout) + ")");
  if (!moe.enabled()) {
    const MoEConfig d;
    const bool moe_flags = moe.layer_freq != d.layer_freq || moe.topk != d.topk || moe.ffn_hidden != d.ffn_hidden ||
                           moe.router != d.router || moe.capacity_factor != d.capacity_factor ||
                           moe.drop_policy != d.drop_policy || moe.aux_loss_coeff != d.aux_loss_coeff ||
                           moe.load_balancing != d.load_balancing || moe.groups != d.groups ||
                           moe.expert_dropout != d.expert_dropout || moe.init_scale != d.init_scale;
    require(moe.experts == 0 && !moe_flags, moe.experts < 0 ? "--num-experts must be 0 (dense) or more (got " +
                                                                  std::to_string(moe.experts) + ")"
                                                            : std::string("the --moe-* and --expert-dropout flags "
                                                                          "need a Mixture-of-Experts model (--num-experts E)"));
    return;
  }
  within("--num-experts", moe.experts, 1, 1 << 16);
  within("--moe-layer-freq", moe.layer_freq, 1, kMaxLayers);
  // k past E: a k the router chose by default (2 for topk and gshard) is named as such.
  require(moe.topk > 0 || moe.k() <= moe.experts,
          "--num-experts " + std::to_string(moe.experts) + " is fewer than the " + std::to_string(moe.k()) +
              " experts a token goes to by default under this --moe-router: give --moe-router-topk 1, or more experts");
  within("--moe-router-topk", moe.k(), 1, moe.experts);
  within("--moe-ffn-hidden-size", ffn_hidden(), 1, 4 * kMaxHidden);
  within("--moe-groups", moe.groups, 1, 1 << 20);
  require(std::isfinite(moe.capacity_factor) && moe.capacity_factor >= 0.0 && moe.capacity_factor <= 1e4,
          "--moe-expert-capacity-factor must be in [0, 10000] (got " + std::to_string(moe.capacity_factor) + ")");
  require(moe.router != MoERouter::expert_choice || moe.capacity_factor > 0.0,
          "--moe-router expert-choice needs a capacity: --moe-expert-capacity-factor must be above 0");
  require(std::isfinite(moe.aux_loss_coeff) && moe.aux_loss_coeff >= 0.0 && moe.aux_loss_coeff <= 1e3,
          "--moe-aux-loss-coeff must be in [0, 1000] (got " + std::to_string(moe.aux_loss_coeff) + ")");
  require(moe.expert_dropout >= 0.0 && moe.expert_dropout < 1.0,
          "--expert-dropout must be in [0, 1) (got " + std::to_string(moe.expert_dropout) + ")");
  require(std::isfinite(moe.init_scale) && moe.init_scale > 0.0 && moe.init_scale <= 100.0,
          "--moe-init-scale must be in (0, 100] (got " + std::to_string(moe.init_scale) + ")");
  // A rank's byte counts are int64: up to 32 bytes a parameter (weights, gradients, AdamW's moments,
  // fp32 masters, two weight versions) must stay below 2^62. The dense shapes the flags allow stay
  // under 2^57 parameters (1.3e17 at their largest); experts can pass it.
  const double n = parameters_of<double>(*this);
  if (!(n < 0x1p57)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", n);
    fail(std::string("the model would have ") + text +
         " parameters, past the 2^57 (1.4e17) whose bytes lattice can count: lower --num-experts, "
         "--moe-ffn-hidden-size, --layers or --hidden");
  }
}

}  // namespace lattice
