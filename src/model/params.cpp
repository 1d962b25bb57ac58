#include "model/params.hpp"

#include <cmath>
#include <stdexcept>

#include "random/philox.hpp"

namespace lattice {

ParamTable::ParamTable(const ModelConfig& c) {
  const int64_t h = c.hidden, v = c.padded_vocab(), s = c.seq_len;
  const float std_w = 0.02f, std_resid = 0.02f / std::sqrt(2.0f * float(c.layers));
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, float std, float value) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    params_.push_back({std::move(name), std::move(shape), total_, n, decay, std, value});
    total_ += n;
  };
  add("wte.weight", {v, h}, true, std_w, 0);
  add("wpe.weight", {s, h}, true, std_w, 0);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {h}, false, 0, 1);
    add(p + "ln_1.bias", {h}, false, 0, 0);
    add(p + "attn.c_attn.weight", {h, 3 * h}, true, std_w, 0);
    add(p + "attn.c_attn.bias", {3 * h}, false, 0, 0);
    add(p + "attn.c_proj.weight", {h, h}, true, std_resid, 0);
    add(p + "attn.c_proj.bias", {h}, false, 0, 0);
    add(p + "ln_2.weight", {h}, false, 0, 1);
    add(p + "ln_2.bias", {h}, false, 0, 0);
    add(p + "mlp.c_fc.weight", {h, 4 * h}, true, std_w, 0);
    add(p + "mlp.c_fc.bias", {4 * h}, false, 0, 0);
    add(p + "mlp.c_proj.weight", {4 * h, h}, true, std_resid, 0);
    add(p + "mlp.c_proj.bias", {h}, false, 0, 0);
  }
  add("ln_f.weight", {h}, false, 0, 1);
  add("ln_f.bias", {h}, false, 0, 0);
}

const ParamInfo& ParamTable::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

void init_params(const ParamTable& table, float* params, uint64_t seed, int real_vocab) {
  for (size_t t = 0; t < table.params().size(); ++t) {
    const ParamInfo& p = table.params()[t];
    float* w = params + p.offset;
    if (p.init_std == 0.0f) {
      for (int64_t i = 0; i < p.numel; ++i) w[i] = p.init_value;
      continue;
    }
    const DropoutStream stream{seed, 0, int(t), DropoutSite::init};
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.numel; ++i) {
      // Box–Muller from two independent 32-bit draws of this element's counter.
      const uint32_t u1 = philox_bits(stream, uint64_t(2 * i)), u2 = philox_bits(stream, uint64_t(2 * i + 1));
      const double a = (double(u1) + 1.0) / 4294967297.0, b = double(u2) / 4294967296.0;
      w[i] = float(std::sqrt(-2.0 * std::log(a)) * std::cos(6.283185307179586 * b)) * p.init_std;
    }
  }
  // Padded vocabulary rows stay zero: they are never an input and never predicted.
  const int64_t h = table.params()[0].shape[1];
  for (int64_t i = int64_t(real_vocab) * h; i < table.params()[0].numel; ++i) params[table.wte() + i] = 0.0f;
}

}  // namespace lattice
