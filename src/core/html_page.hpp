#pragma once
// A self-contained HTML page (inline CSS and script, nothing fetched) for the reports lattice
// writes: `lattice report --html`, `train --report-dir` and `plan --html`. Sections hold SVG charts
// of core/chart.hpp and tables; the page script adds a hover readout to every line chart and marks
// the body with how many it bound (data-charts-ready), which the browser test reads back.
#include <string>
#include <vector>

namespace lattice::html {

// Text and attribute values as HTML (&, <, >, ").
std::string escape(const std::string& text);

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // cells as text (escaped when rendered)
  std::string caption;
};
std::string render(const Table& table);  // cells that read as numbers are right-aligned

struct Page {
  std::string title, subtitle;
  struct Section {
    std::string id, heading, body;  // body: HTML (charts, tables, paragraphs)
  };
  std::vector<Section> sections;
  void add(const std::string& id, const std::string& heading, const std::string& body) {
    sections.push_back({id, heading, body});
  }
  std::string render() const;
};

// A chart's SVG in the block the page script and style expect.
std::string chart_block(const std::string& svg);
// A paragraph of plain text.
std::string paragraph(const std::string& text, const std::string& css_class = "");

}  // namespace lattice::html
