#pragma once
// StagePartition: which layers each pipeline stage holds (docs/design.md §6). Virtual stage
// s = c·p + r is chunk c of pipeline rank r and holds layers [begin(s), end(s)); stages are
// contiguous and ascending, so the forward runs stage 0, 1, … as one-rank training runs layer 0, 1, ….
// Even stages (L/(p·m) layers each) are the default; `--pipeline-layers 3,4,4,1` gives any counts.
#include <string>
#include <vector>

#include "core/config.hpp"

namespace lattice {

struct StagePartition {
  std::vector<int> first;  // first[s]: the first layer of virtual stage s; first.back() = L

  static StagePartition even(int layers, int stages);
  static StagePartition from_counts(const std::vector<int>& counts);
  // The layout's partition of `layers` layers: its stage_layers, else even. Throws InputError,
  // naming the flag, when the counts do not fit the layout (count ≠ p·m, sum ≠ L, a stage < 1,
  // or even stages with p·m not dividing L).
  static StagePartition of(const LayoutConfig& layout, int layers);

  int stages() const { return int(first.size()) - 1; }
  int begin(int s) const { return first[size_t(s)]; }
  int end(int s) const { return first[size_t(s) + 1]; }
  int layers(int s) const { return end(s) - begin(s); }
  // Rank r's layers over its chunks, ascending (pp ranks, stages()/pp chunks each).
  std::vector<int> layers_of_rank(int rank, int pp) const;
  std::vector<int> counts() const;
};

// "3,4,4,1" → {3, 4, 4, 1}: positive integers separated by commas (InputError otherwise).
std::vector<int> parse_layer_counts(const std::string& text, const std::string& flag);
std::string layer_counts_text(const std::vector<int>& counts);

}  // namespace lattice
