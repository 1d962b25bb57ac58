#include "model/params.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>

#include "random/philox.hpp"

namespace lattice {

ParamTable::ParamTable(const ModelConfig& c, int tp_size, int tp_rank, const StageParams& stage)
    : tp_size_(tp_size),
      tp_rank_(tp_rank),
      layer_first_(size_t(c.layers), -1),
      layer_count_(size_t(c.layers), 0),
      expert_first_(size_t(c.layers), -1),
      expert_count_(size_t(c.layers), 0),
      expert0_(stage.experts < 0 ? 0 : stage.expert0) {
  const int64_t h = c.hidden, v = c.padded_vocab(tp_size), s = c.seq_len, t = tp_size;
  const float std_w = 0.02f, std_resid = 0.02f / std::sqrt(2.0f * float(c.layers));
  int full_index = 0;
  // Every tensor of the whole model is visited in one order (its full_index); a stage keeps its own.
  auto add = [&](bool held, std::string name, std::vector<int64_t> full, Split split, bool decay, float std,
                 float value, int layer = -1, bool sequence_partial = true) {
    const int index = full_index++;
    if (!held) return int64_t(-1);
    std::vector<int64_t> shape = full;
    if (split == Split::rows) shape[0] /= t;
    if (split == Split::columns || split == Split::qkv_columns) shape.back() /= t;
    int64_t n = 1;
    for (auto d : shape) n *= d;
    params_.push_back({std::move(name), shape, std::move(full), split, total_, n, decay, std, value, layer, index,
                       split == Split::replicated && sequence_partial});
    total_ += n;
    return params_.back().offset;
  };
  wte_ = add(stage.embedding || stage.head, "wte.weight", {v, h}, Split::rows, true, std_w, 0);
  wpe_ = add(stage.embedding, "wpe.weight", {s, h}, Split::replicated, true, std_w, 0);
  for (int l = 0; l < c.layers; ++l) {
    const bool held = stage.has_layer(l);
    if (held) layer_first_[size_t(l)] = int(params_.size());
    const std::string p = "h." + std::to_string(l) + ".";
    add(held, p + "ln_1.weight", {h}, Split::replicated, false, 0, 1, l);
    add(held, p + "ln_1.bias", {h}, Split::replicated, false, 0, 0, l);
    add(held, p + "attn.c_attn.weight", {h, 3 * h}, Split::qkv_columns, true, std_w, 0, l);
    add(held, p + "attn.c_attn.bias", {3 * h}, Split::qkv_columns, false, 0, 0, l);
    add(held, p + "attn.c_proj.weight", {h, h}, Split::rows, true, std_resid, 0, l);
    add(held, p + "attn.c_proj.bias", {h}, Split::replicated, false, 0, 0, l, /*sequence_partial=*/false);
    add(held, p + "ln_2.weight", {h}, Split::replicated, false, 0, 1, l);
    add(held, p + "ln_2.bias", {h}, Split::replicated, false, 0, 0, l);
    if (!c.moe.is_moe_layer(l)) {
      add(held, p + "mlp.c_fc.weight", {h, 4 * h}, Split::columns, true, std_w, 0, l);
      add(held, p + "mlp.c_fc.bias", {4 * h}, Split::columns, false, 0, 0, l);
      add(held, p + "mlp.c_proj.weight", {4 * h, h}, Split::rows, true, std_resid, 0, l);
      add(held, p + "mlp.c_proj.bias", {h}, Split::replicated, false, 0, 0, l, /*sequence_partial=*/false);
      if (held) layer_count_[size_t(l)] = int(params_.size()) - layer_first_[size_t(l)];
      continue;
    }
    // MoE: the router sees the whole sequence (inside the TP region), so no tensor here is a
    // sequence-parallel partial sum; each expert is an MLP of hidden f, split like the dense one.
    const float scale = float(c.moe.init_scale);
    const int64_t E = c.moe.experts, f = c.ffn_hidden();
    add(held, p + "mlp.router.weight", {h, E}, Split::replicated, true, std_w * scale, 0, l, false);
    if (c.moe.router == MoERouter::topk)
      add(held, p + "mlp.router.noise_weight", {h, E}, Split::replicated, true, std_w * scale, 0, l, false);
    if (held) layer_count_[size_t(l)] = int(params_.size()) - layer_first_[size_t(l)];
    if (held) expert_first_[size_t(l)] = int(params_.size());
    for (int64_t e = 0; e < E; ++e) {
      const bool mine = held && stage.has_expert(int(e));
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      add(mine, x + "c_fc.weight", {h, f}, Split::columns, true, std_w * scale, 0, l, false);
      add(mine, x + "c_fc.bias", {f}, Split::columns, false, 0, 0, l, false);
      add(mine, x + "c_proj.weight", {f, h}, Split::rows, true, std_resid * scale, 0, l, false);
      add(mine, x + "c_proj.bias", {h}, Split::replicated, false, 0, 0, l, false);
    }
    if (held) {
      expert_count_[size_t(l)] = int(params_.size()) - expert_first_[size_t(l)];
      for (size_t i = size_t(expert_first_[size_t(l)]); i < params_.size(); ++i) params_[i].expert = true;
    }
  }
  lnf_w_ = add(stage.head, "ln_f.weight", {h}, Split::replicated, false, 0, 1);
  lnf_b_ = add(stage.head, "ln_f.bias", {h}, Split::replicated, false, 0, 0);
}

int64_t ParamTable::global_index(const ParamInfo& p, int64_t local) const {
  const int64_t cols = p.shape.back(), full_cols = p.full_shape.back();
  const int64_t row = local / cols, col = local % cols;
  switch (p.split) {
    case Split::replicated:
      return local;
    case Split::rows:
      return local + int64_t(tp_rank_) * p.numel;
    case Split::columns:
      return row * full_cols + int64_t(tp_rank_) * cols + col;
    case Split::qkv_columns: {
      const int64_t block = cols / 3;  // this rank's share of Q (or K, or V)
      return row * full_cols + (col / block) * (full_cols / 3) + int64_t(tp_rank_) * block + col % block;
    }
  }
  return local;
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

void init_params(const ParamTable& table, float* out, uint64_t seed, int real_vocab, FlatPiece range) {
  if (range.end < 0) range.end = table.total();
  for (size_t t = 0; t < table.params().size(); ++t) {
    const ParamInfo& p = table.params()[t];
    const int64_t first = std::max(p.offset, range.begin) - p.offset;  // element range of p to fill
    const int64_t last = std::min(p.offset + p.numel, range.end) - p.offset;
    if (first >= last) continue;
    float* w = out + (p.offset - range.begin);
    // Padded vocabulary rows stay zero: they are never an input and never predicted.
    const int64_t real_end = p.offset == table.wte() ? int64_t(real_vocab) * p.shape[1] : INT64_MAX;
    const DropoutStream stream{seed, 0, p.full_index, DropoutSite::init};
#pragma omp parallel for schedule(static)
    for (int64_t i = first; i < last; ++i) {
      const int64_t g = table.global_index(p, i);
      if (p.init_std == 0.0f || g >= real_end) {
        w[i] = g >= real_end ? 0.0f : p.init_value;
        continue;
      }
      w[i] = philox_normal(stream, uint64_t(g)) * p.init_std;
    }
  }
}

}  // namespace lattice
