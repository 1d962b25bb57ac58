#pragma once
// A grouped (optionally stacked) bar chart written as plain SVG, for the paper's figures.
#include <string>
#include <vector>

namespace lattice::plan {

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> groups;  // x-axis categories (the models)
  std::vector<std::string> bars;    // bars inside each group (configurations)
  std::vector<std::string> stacks;  // segments of one bar; with a single segment bars get colours
  std::vector<std::vector<std::vector<double>>> values;  // [group][bar][stack]
  double reference = -1;            // dashed horizontal line (e.g. 80 GB), < 0 for none
  std::string reference_label;
};

std::string render_svg(const BarChart& chart);

}  // namespace lattice::plan
