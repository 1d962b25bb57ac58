// --paper's figures: well-formed SVG with one group per model.
#include <gtest/gtest.h>

#include <string>

#include "plan/paper_report.hpp"

using namespace lattice::plan;

namespace {
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST(PlanPaper, Figure1StacksStatesAndActivationsAgainst80GB) {
  const BarChart c = figure1_chart();
  ASSERT_EQ(c.groups.size(), 4u);
  EXPECT_EQ(c.reference, 80);
  // The TP baseline of the 1T model does not fit; SP + selective does.
  const auto& one_t = c.values[3];
  EXPECT_GT(one_t[0][0] + one_t[0][1], 80);
  EXPECT_LT(one_t[1][0] + one_t[1][1], 80);
  const std::string svg = render_svg(c);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<rect"), 1 + 4 * 3 * 2 + 2u);  // background, bars, legend
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
}

TEST(PlanPaper, Figure7SharesAreBelowTheBaseline) {
  const BarChart c = figure7_chart();
  for (const auto& group : c.values)
    for (const auto& bar : group) {
      EXPECT_GT(bar[0], 0);
      EXPECT_LT(bar[0], 100);
    }
  EXPECT_NE(render_svg(c).find("Figure 7"), std::string::npos);
}

TEST(PlanPaper, TextHasEveryTable) {
  const std::string text = paper_text(hardware_preset("A100-80GB"));
  for (const char* t : {"Table 2", "Figure 1", "Figure 7", "Table 4", "Table 5", "1T"})
    EXPECT_NE(text.find(t), std::string::npos) << t;
}
