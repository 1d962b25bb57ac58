#include "core/stage_partition.hpp"

#include <cerrno>
#include <cstdlib>

#include "core/error.hpp"

namespace lattice {

namespace {
// A user's list in an error line, cut to a readable length.
std::string shortened(const std::string& text) { return text.size() <= 60 ? text : text.substr(0, 57) + "..."; }
}  // namespace

StagePartition StagePartition::even(int layers, int stages) {
  StagePartition p;
  for (int s = 0; s <= stages; ++s) p.first.push_back(int(int64_t(layers) * s / stages));
  return p;
}

StagePartition StagePartition::from_counts(const std::vector<int>& counts) {
  StagePartition p{{0}};
  for (int c : counts) p.first.push_back(p.first.back() + c);
  return p;
}

StagePartition StagePartition::of(const LayoutConfig& layout, int layers) {
  const int stages = layout.pp * layout.virtual_stages;
  if (layout.stage_layers.empty()) {
    require(layers % stages == 0, "--layers " + std::to_string(layers) + " is not divisible by p·m = " +
                                      std::to_string(stages) +
                                      " (pipeline stages × virtual stages); give the counts with --pipeline-layers");
    return even(layers, stages);
  }
  const std::string given = "--pipeline-layers " + shortened(layer_counts_text(layout.stage_layers));
  require(int(layout.stage_layers.size()) == stages,
          given + " gives " + std::to_string(layout.stage_layers.size()) + " stages; the layout has p·m = " +
              std::to_string(stages));
  int64_t sum = 0;
  for (int c : layout.stage_layers) {
    require(c >= 1, given + ": every stage needs at least one layer");
    sum += c;
  }
  require(sum == layers, given + " adds up to " + std::to_string(sum) + " layers; the model has " +
                             std::to_string(layers));
  return from_counts(layout.stage_layers);
}

std::vector<int> StagePartition::layers_of_rank(int rank, int pp) const {
  std::vector<int> out;
  for (int s = rank; s < stages(); s += pp)
    for (int l = begin(s); l < end(s); ++l) out.push_back(l);
  return out;
}

std::vector<int> StagePartition::counts() const {
  std::vector<int> c;
  for (int s = 0; s < stages(); ++s) c.push_back(layers(s));
  return c;
}

std::vector<int> parse_layer_counts(const std::string& text, const std::string& flag) {
  std::vector<int> counts;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    errno = 0;
    const bool digits = !item.empty() && item[0] >= '0' && item[0] <= '9';  // no sign, no space
    const long v = digits ? std::strtol(item.c_str(), &end, 10) : 0;
    require(digits && end && *end == '\0' && errno == 0 && v >= 1 && v <= 1 << 20,
            flag + " must be a list of positive layer counts such as 3,4,4,1 (got '" + shortened(text) + "')");
    counts.push_back(int(v));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return counts;
}

std::string layer_counts_text(const std::vector<int>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(counts[i]);
  }
  return s;
}

}  // namespace lattice
