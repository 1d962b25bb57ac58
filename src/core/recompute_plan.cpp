#include "core/recompute_plan.hpp"

#include "core/error.hpp"

namespace lattice {

char to_char(LayerRecompute r) {
  switch (r) {
    case LayerRecompute::none: return 'n';
    case LayerRecompute::selective: return 's';
    case LayerRecompute::checkpoint: return 'c';
    case LayerRecompute::in_segment: return '~';
  }
  return '?';
}

std::string recompute_plan_text(const std::vector<LayerRecompute>& plan) {
  std::string text;
  text.reserve(plan.size());
  for (LayerRecompute r : plan) text += to_char(r);
  return text;
}

std::vector<LayerRecompute> parse_recompute_plan(const std::string& text) {
  require(!text.empty(), "--recompute-plan: empty (one character a layer: n s c ~)");
  std::vector<LayerRecompute> plan;
  plan.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    switch (text[i]) {
      case 'n': plan.push_back(LayerRecompute::none); break;
      case 's': plan.push_back(LayerRecompute::selective); break;
      case 'c': plan.push_back(LayerRecompute::checkpoint); break;
      case '~': plan.push_back(LayerRecompute::in_segment); break;
      default:
        fail("--recompute-plan '" + text + "': character " + std::to_string(i + 1) +
             " is not one of n (none), s (selective), c (checkpoint), ~ (in a segment)");
    }
  }
  return plan;
}

}  // namespace lattice
