#include "core/html_page.hpp"

#include <cstdlib>

#include "core/output_path.hpp"
#include "core/svg.hpp"

namespace lattice::html {

namespace {

const char* kStyle = R"css(
body{font-family:sans-serif;margin:0;color:#222;background:#f6f6f4}
header{background:#2b3a4a;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;font-size:13px;color:#cfd8e3}
nav{padding:8px 24px;background:#e8ebee;font-size:13px} nav a{margin-right:14px;color:#2b5b8a}
main{padding:8px 24px 40px} section{background:#fff;margin:14px 0;padding:10px 16px;border:1px solid #ddd}
section h2{font-size:17px;margin:6px 0 10px}
.charts{display:flex;flex-wrap:wrap;gap:10px}
.chart{position:relative;display:inline-block}
.readout{position:absolute;pointer-events:none;background:rgba(255,255,255,.95);border:1px solid #999;
 font-size:12px;padding:4px 6px;white-space:pre;display:none}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 8px} th{background:#eef1f4} td.n{text-align:right;font-variant-numeric:tabular-nums}
caption{text-align:left;font-size:13px;padding:4px 0;color:#444}
p.note{font-size:13px;color:#555}
)css";

// Hover readout on line charts: the nearest point of every series to the pointer's x.
const char* kScript = R"js(
(function () {
  var charts = document.querySelectorAll('svg.line-chart');
  var bound = 0;
  charts.forEach(function (svg) {
    var series = JSON.parse(svg.getAttribute('data-series'));
    var box = svg.getAttribute('data-plot').split(',').map(Number);
    var range = svg.getAttribute('data-x-range').split(',').map(Number);
    var label = svg.getAttribute('data-x-label') || 'x';
    var ns = 'http://www.w3.org/2000/svg';
    var rule = document.createElementNS(ns, 'line');
    rule.setAttribute('y1', box[1]); rule.setAttribute('y2', box[1] + box[3]);
    rule.setAttribute('stroke', '#888'); rule.setAttribute('stroke-dasharray', '3,3');
    rule.setAttribute('visibility', 'hidden');
    svg.appendChild(rule);
    var readout = document.createElement('div');
    readout.className = 'readout';
    svg.parentNode.appendChild(readout);
    function nearest(points, x) {
      var lo = 0, hi = points.length - 1;
      if (hi < 0) return null;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (points[mid][0] < x) lo = mid + 1; else hi = mid; }
      if (lo > 0 && Math.abs(points[lo - 1][0] - x) <= Math.abs(points[lo][0] - x)) lo -= 1;
      return points[lo];
    }
    svg.addEventListener('mousemove', function (e) {
      var r = svg.getBoundingClientRect();
      var px = e.clientX - r.left;
      if (px < box[0] || px > box[0] + box[2]) { rule.setAttribute('visibility', 'hidden'); readout.style.display = 'none'; return; }
      var x = range[0] + (px - box[0]) / box[2] * (range[1] - range[0]);
      var lines = [];
      series.forEach(function (s) {
        var p = nearest(s[2], x);
        if (p) lines.push(s[0] + ': ' + Number(p[1].toPrecision(5)) + '  (' + label + ' ' + p[0] + ')');
      });
      rule.setAttribute('x1', px); rule.setAttribute('x2', px); rule.setAttribute('visibility', 'visible');
      readout.textContent = lines.join('\n');
      readout.style.display = 'block';
      readout.style.left = Math.min(px + 12, r.width - 180) + 'px';
      readout.style.top = (box[1] + 4) + 'px';
    });
    svg.addEventListener('mouseleave', function () { rule.setAttribute('visibility', 'hidden'); readout.style.display = 'none'; });
    bound += 1;
  });
  document.body.setAttribute('data-charts-ready', String(bound));
})();
)js";

// "12.3", "1.50 MiB", "12%", "0.25 s": a number alone or with a short unit.
bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  const std::string rest = end;
  if (rest.empty() || rest == "%") return true;
  return rest[0] == ' ' && rest.size() <= 5 && rest.find(' ', 1) == std::string::npos;
}

}  // namespace

std::string escape(const std::string& text) { return svg::escape(text); }

std::string render(const Table& t) {
  std::string s = "<table>";
  if (!t.caption.empty()) s += "<caption>" + escape(t.caption) + "</caption>";
  if (!t.header.empty()) {
    s += "<tr>";
    for (const auto& h : t.header) s += "<th>" + escape(h) + "</th>";
    s += "</tr>\n";
  }
  for (const auto& row : t.rows) {
    s += "<tr>";
    for (const auto& cell : row) s += (is_number(cell) ? "<td class=\"n\">" : "<td>") + escape(cell) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::string chart_block(const std::string& svg) { return "<div class=\"chart\">" + svg + "</div>\n"; }

std::string paragraph(const std::string& text, const std::string& css_class) {
  return (css_class.empty() ? "<p>" : "<p class=\"" + escape(css_class) + "\">") + escape(text) + "</p>\n";
}

std::string Page::render() const {
  std::string s = std::string("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">") + kHtmlGenerator + "\n<title>" + escape(title) +
                  "</title>\n<style>" + kStyle + "</style></head>\n<body>\n<header><h1>" + escape(title) + "</h1>";
  if (!subtitle.empty()) s += "<p>" + escape(subtitle) + "</p>";
  s += "</header>\n<nav>";
  for (const auto& sec : sections) s += "<a href=\"#" + escape(sec.id) + "\">" + escape(sec.heading) + "</a>";
  s += "</nav>\n<main>\n";
  for (const auto& sec : sections)
    s += "<section id=\"" + escape(sec.id) + "\"><h2>" + escape(sec.heading) + "</h2>\n" + sec.body + "</section>\n";
  return s + "</main>\n<script>" + kScript + "</script>\n</body></html>\n";
}

}  // namespace lattice::html
