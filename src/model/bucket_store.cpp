#include "model/bucket_store.hpp"

namespace lattice {

std::vector<Bucket> model_buckets(const ParamTable& table, int layers) {
  std::vector<Bucket> buckets(2 * size_t(layers) + 3);
  for (int l = 0; l < layers; ++l)
    if (table.has_layer(l)) {
      const auto [begin, end] = table.layer_range(l);
      buckets[size_t(l)] = {begin, end};
      const auto [e_begin, e_end] = table.experts_range(l);
      buckets[size_t(experts_bucket(layers, l))] = {e_begin, e_end, true};
    }
  for (const auto& p : table.params()) {
    if (p.layer >= 0) continue;
    const int b = p.offset == table.wte() ? wte_bucket(layers)
                  : p.offset == table.wpe() ? wpe_bucket(layers)
                                            : lnf_bucket(layers);
    Bucket& bucket = buckets[size_t(b)];
    if (bucket.size() == 0) bucket = {p.offset, p.offset + p.numel, false};
    else bucket.end = p.offset + p.numel;  // ln_f.weight then ln_f.bias, contiguous
  }
  return buckets;
}

}  // namespace lattice
