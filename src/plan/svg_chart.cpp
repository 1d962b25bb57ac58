#include "plan/svg_chart.hpp"

#include "core/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lattice::plan {

namespace {

const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948"};
const char* color(size_t i) { return kColors[i % (sizeof kColors / sizeof kColors[0])]; }

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

using svg::escape;

std::string text(double x, double y, const std::string& s, const char* anchor = "middle", int size = 12) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + std::to_string(size) +
         "\" text-anchor=\"" + anchor + "\">" + escape(s) + "</text>\n";
}

std::string rect(double x, double y, double w, double h, const char* fill) {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
         "\" fill=\"" + fill + "\"/>\n";
}

// A round axis maximum: 1, 2 or 5 times a power of ten, at or above `v`.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

}  // namespace

std::string render_svg(const BarChart& c) {
  const double left = 70, right = 20, top = 50, plot_h = 320, bottom = 90;
  const double bar_w = 22, bar_gap = 4, group_gap = 30;
  const size_t nb = c.bars.size(), ng = c.groups.size();
  const double group_w = nb * (bar_w + bar_gap);
  const double plot_w = ng * group_w + (ng + 1) * group_gap;
  // Wide enough for the legend row even with few groups.
  const double width = std::max(left + plot_w + right, 720.0), height = top + plot_h + bottom;
  const bool colour_by_bar = c.stacks.size() <= 1;

  double peak = c.reference;
  for (const auto& g : c.values)
    for (const auto& bar : g) {
      double sum = 0;
      for (double v : bar) sum += v;
      peak = std::max(peak, sum);
    }
  const double y_max = nice_ceiling(peak * 1.05);
  auto y_of = [&](double v) { return top + plot_h * (1 - v / y_max); };

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
                  num(height) + "\" font-family=\"sans-serif\">\n";
  s += rect(0, 0, width, height, "white");
  s += text(width / 2, 24, c.title, "middle", 15);
  // Axis with five gridlines.
  for (int i = 0; i <= 5; ++i) {
    const double v = y_max * i / 5, y = y_of(v);
    s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + plot_w) + "\" y1=\"" + num(y) + "\" y2=\"" +
         num(y) + "\" stroke=\"#ddd\"/>\n";
    char label[32];
    std::snprintf(label, sizeof label, "%g", v);
    s += text(left - 6, y + 4, label, "end", 11);
  }
  s += "<text transform=\"translate(18," + num(top + plot_h / 2) + ") rotate(-90)\" font-size=\"12\" "
       "text-anchor=\"middle\">" + escape(c.y_label) + "</text>\n";

  for (size_t g = 0; g < ng; ++g) {
    const double gx = left + group_gap + g * (group_w + group_gap);
    for (size_t b = 0; b < nb; ++b) {
      const double x = gx + b * (bar_w + bar_gap);
      double base = 0;
      for (size_t k = 0; k < c.values[g][b].size(); ++k) {
        const double v = c.values[g][b][k];
        s += rect(x, y_of(base + v), bar_w, y_of(base) - y_of(base + v), colour_by_bar ? color(b) : color(k));
        base += v;
      }
      if (!colour_by_bar) s += text(x + bar_w / 2, top + plot_h + 14, std::to_string(b + 1), "middle", 10);
    }
    s += text(gx + group_w / 2, top + plot_h + 32, c.groups[g], "middle", 13);
  }
  if (c.reference >= 0) {
    const double y = y_of(c.reference);
    s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + plot_w) + "\" y1=\"" + num(y) + "\" y2=\"" +
         num(y) + "\" stroke=\"#d00\" stroke-dasharray=\"6,4\" stroke-width=\"2\"/>\n";
    s += text(left + plot_w - 4, y - 6, c.reference_label, "end", 11);
  }
  s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left) + "\" y1=\"" + num(top) + "\" y2=\"" +
       num(top + plot_h) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + plot_w) + "\" y1=\"" + num(top + plot_h) +
       "\" y2=\"" + num(top + plot_h) + "\" stroke=\"black\"/>\n";

  // Legend: the colours, and for stacked charts the numbering of the bars.
  double ly = top + plot_h + 50;
  double lx = left;
  const auto& keys = colour_by_bar ? c.bars : c.stacks;
  for (size_t i = 0; i < keys.size(); ++i) {
    s += rect(lx, ly - 10, 12, 12, color(i));
    s += text(lx + 16, ly, keys[i], "start", 11);
    lx += 24 + 7.0 * keys[i].size();
  }
  if (!colour_by_bar) {
    std::string numbering;
    for (size_t b = 0; b < nb; ++b) numbering += (b ? ",  " : "bars: ") + std::to_string(b + 1) + " = " + c.bars[b];
    s += text(left, ly + 20, numbering, "start", 11);
  }
  return s + "</svg>\n";
}

}  // namespace lattice::plan
