#include "core/chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/svg.hpp"

namespace lattice::chart {

namespace {

const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
                         "#ff9da7", "#9c755f", "#bab0ac"};

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

std::string rect(double x, double y, double w, double h, const char* fill, const std::string& title = "") {
  std::string s = "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
                  "\" fill=\"" + fill + "\"";
  return title.empty() ? s + "/>\n" : s + "><title>" + escape(title) + "</title></rect>\n";
}

std::string line(double x1, double y1, double x2, double y2, const char* stroke) {
  return "<line x1=\"" + num(x1) + "\" x2=\"" + num(x2) + "\" y1=\"" + num(y1) + "\" y2=\"" + num(y2) +
         "\" stroke=\"" + stroke + "\"/>\n";
}

// A round axis maximum: 1, 2 or 5 times a power of ten, at or above `v`.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

// A value as a short label: 4 significant digits, thousands as k, M, G.
std::string short_number(double v) {
  const double a = std::abs(v);
  const char* suffix = "";
  if (a >= 1e9) v /= 1e9, suffix = "G";
  else if (a >= 1e6) v /= 1e6, suffix = "M";
  else if (a >= 1e4) v /= 1e3, suffix = "k";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g%s", v, suffix);
  return buf;
}

// Ticks at a round step covering [lo, hi]: the axis runs from the first to the last. At most
// wanted + 2 ticks for any finite input: a range too narrow for its magnitude (values equal to the
// last bits, or spanning the whole double range) is widened or clamped first.
std::vector<double> ticks(double lo, double hi, int wanted) {
  const double big = 1e300;
  lo = std::max(-big, std::min(big, lo)), hi = std::max(-big, std::min(big, hi));
  const double magnitude = std::max({std::abs(lo), std::abs(hi), 1e-300});
  if (!(hi - lo > magnitude * 1e-9)) {
    const double pad = std::max(magnitude * 0.1, 1e-300);
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / wanted, p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * p;
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) { step = m * p; break; }
  if (!std::isfinite(step) || !(step > 0)) return {lo, hi};
  const double first = std::floor(lo / step);
  std::vector<double> t;
  for (int i = 0; i <= wanted + 2; ++i) {
    const double v = (first + i) * step;
    t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
    if (v >= hi - step * 1e-9) break;
  }
  if (t.size() < 2 || !(t.back() > t.front())) return {lo, hi};
  return t;
}

// Data for the page script: [[name, colour, [[x, y], ...]], ...] as JSON inside an attribute.
std::string series_data(const LineChart& c) {
  std::string s = "[";
  char buf[64];
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& se = c.series[i];
    std::string name;
    for (char ch : se.name) {
      if (ch == '"' || ch == '\\') name += '\\';
      name += ch;
    }
    s += (i ? ",[\"" : "[\"") + name + "\",\"" + color(i) + "\",[";
    bool first = true;
    for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k) {
      if (!std::isfinite(se.x[k]) || !std::isfinite(se.y[k])) continue;
      std::snprintf(buf, sizeof buf, "%s[%.9g,%.9g]", first ? "" : ",", se.x[k], se.y[k]);
      s += buf;
      first = false;
    }
    s += "]]";
  }
  return s + "]";
}

}  // namespace

const char* color(size_t i) { return kColors[i % (sizeof kColors / sizeof kColors[0])]; }

std::string render_svg(const BarChart& c) {
  const double left = 70, right = 20, top = 50, plot_h = 320, bottom = 90;
  const double bar_w = 22, bar_gap = 4, group_gap = 30;
  const size_t nb = c.bars.size(), ng = c.groups.size();
  const double group_w = nb * (bar_w + bar_gap);
  const double plot_w = ng * group_w + (ng + 1) * group_gap;
  // Wide enough for the legend row even with few groups.
  const double width = std::max(left + plot_w + right, 720.0), height = top + plot_h + bottom;
  const bool colour_by_bar = c.stacks.size() <= 1;
  const bool numbered = !colour_by_bar && nb > 1;  // stacked bars side by side: numbered under the axis

  double peak = c.reference;
  for (const auto& g : c.values)
    for (const auto& bar : g) {
      double sum = 0;
      for (double v : bar) sum += std::isfinite(v) ? std::max(0.0, v) : 0.0;
      peak = std::max(peak, sum);
    }
  const double y_max = nice_ceiling(std::min(peak, 1e300) * 1.05);
  auto y_of = [&](double v) { return top + plot_h * (1 - v / y_max); };

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bar-chart\" width=\"" + num(width) +
                  "\" height=\"" + num(height) + "\" font-family=\"sans-serif\">\n";
  s += rect(0, 0, width, height, "white");
  s += text(width / 2, 24, c.title, "middle", 15);
  // Axis with five gridlines.
  for (int i = 0; i <= 5; ++i) {
    const double v = y_max * i / 5, y = y_of(v);
    s += line(left, y, left + plot_w, y, "#ddd");
    s += text(left - 6, y + 4, short_number(v), "end", 11);
  }
  s += "<text transform=\"translate(18," + num(top + plot_h / 2) + ") rotate(-90)\" font-size=\"12\" "
       "text-anchor=\"middle\">" + escape(c.y_label) + "</text>\n";

  for (size_t g = 0; g < ng; ++g) {
    const double gx = left + group_gap + g * (group_w + group_gap);
    for (size_t b = 0; b < nb; ++b) {
      const double x = gx + b * (bar_w + bar_gap);
      double base = 0;
      for (size_t k = 0; k < c.values[g][b].size(); ++k) {
        const double v = std::isfinite(c.values[g][b][k]) ? std::max(0.0, c.values[g][b][k]) : 0.0;
        const std::string what = c.groups[g] + ", " + c.bars[b] + (colour_by_bar ? "" : ", " + c.stacks[k]) + ": " +
                                 short_number(v) + " " + c.y_label;
        s += rect(x, y_of(base + v), bar_w, y_of(base) - y_of(base + v), colour_by_bar ? color(b) : color(k), what);
        base += v;
      }
      if (numbered) s += text(x + bar_w / 2, top + plot_h + 14, std::to_string(b + 1), "middle", 10);
    }
    s += text(gx + group_w / 2, top + plot_h + (numbered ? 32 : 18), c.groups[g], "middle", 13);
  }
  if (c.reference >= 0) {
    const double y = y_of(c.reference);
    s += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + plot_w) + "\" y1=\"" + num(y) + "\" y2=\"" +
         num(y) + "\" stroke=\"#d00\" stroke-dasharray=\"6,4\" stroke-width=\"2\"/>\n";
    s += text(left + plot_w - 4, y - 6, c.reference_label, "end", 11);
  }
  s += line(left, top, left, top + plot_h, "black");
  s += line(left, top + plot_h, left + plot_w, top + plot_h, "black");

  // Legend: the colours (in rows as wide as the chart), and for stacked charts the numbering of the bars.
  const auto& keys = colour_by_bar ? c.bars : c.stacks;
  double ly = top + plot_h + 50, lx = left;
  for (size_t i = 0; i < keys.size(); ++i) {
    const double w = 24 + 7.0 * double(keys[i].size());
    if (lx > left && lx + w > width - right) lx = left, ly += 18;
    s += rect(lx, ly - 10, 12, 12, color(i));
    s += text(lx + 16, ly, keys[i], "start", 11);
    lx += w;
  }
  if (numbered) {
    std::string numbering;
    for (size_t b = 0; b < nb; ++b) numbering += (b ? ",  " : "bars: ") + std::to_string(b + 1) + " = " + c.bars[b];
    s += text(left, ly + 20, numbering, "start", 11);
  }
  // The rows the legend took beyond the first, added to the height given above.
  const double extra = ly - (top + plot_h + 50);
  if (extra > 0) {
    const std::string old_height = "height=\"" + num(height) + "\"";  // the <svg>'s and the background's
    for (int k = 0; k < 2; ++k) s.replace(s.find(old_height), old_height.size(), "height=\"" + num(height + extra) + "\"");
  }
  return s + "</svg>\n";
}

std::string render_svg(const LineChart& c) {
  const double left = 70, right = 20, top = 40, bottom = 62;
  const double plot_w = c.width - left - right, plot_h = c.height - top - bottom;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const Series& se : c.series)
    for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k) {
      if (!std::isfinite(se.x[k]) || !std::isfinite(se.y[k])) continue;
      x_lo = std::min(x_lo, se.x[k]), x_hi = std::max(x_hi, se.x[k]);
      y_lo = std::min(y_lo, se.y[k]), y_hi = std::max(y_hi, se.y[k]);
    }
  const bool empty = !std::isfinite(x_lo);
  if (empty) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  const std::vector<double> xt = ticks(x_lo, x_hi, 6), yt = ticks(y_lo, y_hi, 5);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto px = [&](double x) { return left + plot_w * (x - x0) / (x1 - x0); };
  auto py = [&](double y) { return top + plot_h * (1 - (y - y0) / (y1 - y0)); };
  char box[160];
  std::snprintf(box, sizeof box, "%.1f,%.1f,%.1f,%.1f", left, top, plot_w, plot_h);
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"line-chart\" width=\"" + num(c.width) +
                  "\" height=\"" + num(c.height) + "\" font-family=\"sans-serif\" data-plot=\"" + box +
                  "\" data-x-range=\"" + std::to_string(x0) + "," + std::to_string(x1) + "\" data-x-label=\"" +
                  escape(c.x_label) + "\" data-series=\"" + escape(series_data(c)) + "\">\n";
  s += rect(0, 0, c.width, c.height, "white");
  s += text(c.width / 2, 22, c.title, "middle", 14);
  for (double v : yt) {
    s += line(left, py(v), left + plot_w, py(v), "#e4e4e4");
    s += text(left - 6, py(v) + 4, short_number(v), "end", 11);
  }
  for (double v : xt) {
    s += line(px(v), top + plot_h, px(v), top + plot_h + 4, "black");
    s += text(px(v), top + plot_h + 16, short_number(v), "middle", 11);
  }
  s += line(left, top, left, top + plot_h, "black");
  s += line(left, top + plot_h, left + plot_w, top + plot_h, "black");
  s += text(left + plot_w / 2, top + plot_h + 32, c.x_label, "middle", 12);
  s += "<text transform=\"translate(16," + num(top + plot_h / 2) + ") rotate(-90)\" font-size=\"12\" "
       "text-anchor=\"middle\">" + escape(c.y_label) + "</text>\n";
  if (empty) s += text(left + plot_w / 2, top + plot_h / 2, "no data", "middle", 13);
  double lx = left;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& se = c.series[i];
    std::string path, dots;
    size_t finite = 0;
    for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k) finite += std::isfinite(se.x[k]) && std::isfinite(se.y[k]);
    for (size_t k = 0; k < se.x.size() && k < se.y.size(); ++k) {
      if (!std::isfinite(se.x[k]) || !std::isfinite(se.y[k])) continue;
      path += (path.empty() ? "M" : " L") + num(px(se.x[k])) + " " + num(py(se.y[k]));
      if (se.markers || finite == 1)  // a lone point is drawn as a dot: a one-point path shows nothing
        dots += "<circle cx=\"" + num(px(se.x[k])) + "\" cy=\"" + num(py(se.y[k])) + "\" r=\"3.5\" fill=\"" +
                color(i) + "\"><title>" + escape(se.name + " at " + short_number(se.x[k]) + ": " + short_number(se.y[k])) +
                "</title></circle>\n";
    }
    if (!path.empty())
      s += "<path class=\"series\" d=\"" + path + "\" fill=\"none\" stroke=\"" + color(i) +
           "\" stroke-width=\"1.6\"><title>" + escape(se.name) + "</title></path>\n" + dots;
    s += rect(lx, c.height - 18, 12, 12, color(i));
    s += text(lx + 16, c.height - 8, se.name, "start", 11);
    lx += 30 + 6.5 * double(se.name.size());
  }
  return s + "</svg>\n";
}

}  // namespace lattice::chart
