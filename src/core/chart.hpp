#pragma once
// Charts written as plain SVG, one definition each, for every picture lattice draws of numbers:
// the paper's figures (plan --paper), the run report (lattice report) and the plan report
// (plan --html). A grouped, optionally stacked bar chart, and a line chart over a numeric x axis.
// Every mark carries a <title> (a hover tooltip with its value); line charts also carry their
// points as data for the page script of core/html_page.hpp.
#include <string>
#include <vector>

namespace lattice::chart {

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> groups;  // x-axis categories (the models, the ranks)
  std::vector<std::string> bars;    // bars inside each group (configurations; measured | formula)
  std::vector<std::string> stacks;  // segments of one bar; with a single segment bars get colours
  std::vector<std::vector<std::vector<double>>> values;  // [group][bar][stack]
  double reference = -1;            // dashed horizontal line (e.g. 80 GB), < 0 for none
  std::string reference_label;
};

struct Series {
  std::string name;
  std::vector<double> x, y;  // the same length; points with a non-finite y are left out
  bool markers = false;      // dots at the points (sparse series such as evaluations)
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  double width = 720, height = 280;
};

std::string render_svg(const BarChart& chart);
std::string render_svg(const LineChart& chart);

// The colour of series or stack i (the same palette in every chart).
const char* color(size_t i);

}  // namespace lattice::chart
