#include "report/groups_svg.hpp"

#include "core/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/error.hpp"

namespace lattice::parallel {

namespace {

constexpr int kCellW = 50, kCellH = 28;
constexpr int kStageGap = 28;
constexpr int kLeft = 64;          // room for the "dp d" row labels
constexpr int kPanelHeader = 62;   // panel title + stage header + tp header
constexpr int kPanelGap = 30;
constexpr int kTop = 56;           // document title

// Distinct pastel colours: hues a golden angle apart, so neighbouring group indices differ most.
std::string group_colour(int index) { return svg::hsl(std::fmod(index * 137.508, 360.0), 0.60, 0.74); }

struct Panel {
  const char* title;
  const char* note;
  Groups groups;
};

class SvgGrid {
 public:
  explicit SvgGrid(const ParallelLayout& l) : l_(l) {}

  // A stage's columns are its (cp_rank, tp_rank) pairs, tp fastest, as the rank order runs.
  int columns() const { return l_.tp * l_.cp; }
  int panel_width() const { return kLeft + l_.pp * columns() * kCellW + (l_.pp - 1) * kStageGap + 16; }
  int panel_height() const { return kPanelHeader + l_.dp * kCellH; }

  void draw(std::ostringstream& out, const Panel& panel, int top) const {
    std::vector<int> group_of(size_t(l_.world), -1);
    for (size_t g = 0; g < panel.groups.size(); ++g)
      for (int r : panel.groups[g]) group_of[size_t(r)] = int(g);

    out << "<text x='16' y='" << top + 18 << "' class='panel'>" << panel.title << " (" << panel.groups.size()
        << ")<tspan class='note' dx='10'>" << panel.note << "</tspan></text>\n";
    for (int stage = 0; stage < l_.pp; ++stage) {
      const int x0 = stage_x(stage);
      out << "<text x='" << x0 + columns() * kCellW / 2 << "' y='" << top + 38 << "' class='head'>stage " << stage
          << "</text>\n";
      if (columns() <= 16)
        for (int j = 0; j < columns(); ++j) {
          out << "<text x='" << x0 + j * kCellW + kCellW / 2 << "' y='" << top + 54 << "' class='sub'>";
          if (l_.cp > 1) out << "c" << j / l_.tp << " ";
          out << "tp " << j % l_.tp << "</text>\n";
        }
      for (int d = 0; d < l_.dp; ++d)
        for (int j = 0; j < columns(); ++j) {
          RankCoords at;
          at.tp_rank = j % l_.tp, at.cp_rank = j / l_.tp, at.dp_rank = d, at.pp_rank = stage;
          const int rank = rank_of(l_, at);
          const int g = group_of[size_t(rank)];
          const int x = x0 + j * kCellW, y = top + kPanelHeader + d * kCellH;
          out << "<rect x='" << x << "' y='" << y << "' width='" << kCellW << "' height='" << kCellH
              << "' class='cell' fill='" << (g < 0 ? "#eeeeee" : group_colour(g)) << "'/>"
              << "<text x='" << x + kCellW / 2 << "' y='" << y + kCellH / 2 + 4 << "' class='"
              << (g < 0 ? "rank none" : "rank") << "'>" << rank << "</text>\n";
        }
      out << "<rect x='" << x0 << "' y='" << top + kPanelHeader << "' width='" << columns() * kCellW << "' height='"
          << l_.dp * kCellH << "' class='stage'/>\n";
    }
    for (int d = 0; d < l_.dp; ++d)
      out << "<text x='" << kLeft - 10 << "' y='" << top + kPanelHeader + d * kCellH + kCellH / 2 + 4
          << "' class='row'>dp " << d << "</text>\n";
  }

 private:
  int stage_x(int stage) const { return kLeft + stage * (columns() * kCellW + kStageGap); }
  const ParallelLayout& l_;
};

}  // namespace

std::string groups_svg(const ParallelLayout& l) {
  require(l.world <= kMaxSvgRanks, "--svg draws at most " + std::to_string(kMaxSvgRanks) + " ranks (world size " +
                                       std::to_string(l.world) + ")");
  std::vector<Panel> panels = {
      {"Tensor-parallel groups", "consecutive ranks", tp_groups(l)},
      {"Data-parallel groups", l.cp > 1 ? "stride t\u00b7c, within one stage" : "stride t, within one stage",
       dp_groups(l)},
      {"Pipeline-parallel groups",
       l.cp > 1 ? "stride t\u00b7c\u00b7dp, one rank per stage" : "stride t\u00b7dp, one rank per stage", pp_groups(l)},
      {"Embedding groups", "first and last stage of each pipeline; grey: in none", embedding_groups(l)}};
  if (l.cp > 1) {  // with c = 1 every rank is alone in its CP group and DP-with-CP is DP
    panels.insert(panels.begin() + 1, {"Context-parallel groups", "stride t: the ranks of one sequence", cp_groups(l)});
    panels.insert(panels.begin() + 3,
                  {"Data-parallel groups with CP", "gradients reduced over dp \u00d7 cp", dp_cp_groups(l)});
  }
  if (l.ep > 1) {  // with e = 1 every rank is alone in its EP group and expert-DP is DP
    // Folded over dp × cp (Megatron-Core): consecutive positions cp_rank + c·dp_rank.
    panels.push_back({"Expert-parallel groups",
                      l.cp > 1 ? "e consecutive (cp, dp) ranks, cp first: stride t" : "e consecutive dp ranks: stride t",
                      ep_groups(l)});
    panels.push_back({"Expert-data-parallel groups", "same EP position: stride t\u00b7e", expert_dp_groups(l)});
  }
  const SvgGrid grid(l);
  const int n = int(panels.size());
  const int width = std::max(grid.panel_width(), 620);
  const int height = kTop + n * grid.panel_height() + (n - 1) * kPanelGap + 16;

  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height << "' viewBox='0 0 "
      << width << ' ' << height << "' font-family='DejaVu Sans, Helvetica, Arial, sans-serif'>\n"
      << "<style>.title{font-size:16px;font-weight:bold}.note{font-size:11px;font-weight:normal;fill:#555}"
         ".panel{font-size:14px;font-weight:bold}.head{font-size:12px;text-anchor:middle}"
         ".sub{font-size:10px;fill:#666;text-anchor:middle}.row{font-size:11px;fill:#444;text-anchor:end}"
         ".cell{stroke:#fff;stroke-width:2}.stage{fill:none;stroke:#333;stroke-width:1.5}"
         ".rank{font-size:12px;text-anchor:middle;fill:#222}.none{fill:#aaa}</style>\n"
      << "<rect width='100%' height='100%' fill='#fff'/>\n"
      << "<text x='16' y='24' class='title'>world " << l.world << " = t " << l.tp;
  if (l.cp > 1) out << " \u00d7 c " << l.cp;
  out << " \u00d7 dp " << l.dp << " \u00d7 p " << l.pp;
  if (l.ep > 1)
    out << (l.cp > 1 ? " (dp \u00d7 c " : " (dp ") << l.dp * l.cp << " = e " << l.ep << " \u00d7 expert-dp "
        << l.dp * l.cp / l.ep << ')';
  out << "</text>\n"
      << "<text x='16' y='42' class='note'>"
      << (l.cp > 1 ? "rank = tp_rank + t\u00b7cp_rank + t\u00b7c\u00b7dp_rank + t\u00b7c\u00b7dp\u00b7pp_rank; "
                   : "rank = tp_rank + t\u00b7dp_rank + t\u00b7dp\u00b7pp_rank; ")
      << "cells of one colour form one group</text>\n";
  int top = kTop;
  for (const Panel& p : panels) {
    grid.draw(out, p, top);
    top += grid.panel_height() + kPanelGap;
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace lattice::parallel
