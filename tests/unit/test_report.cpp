// The charts (core/chart.hpp), the HTML page (core/html_page.hpp) and the run report
// (report/run_report.hpp), checked on the text a browser receives.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/chart.hpp"
#include "core/html_page.hpp"
#include "report/run_report.hpp"
#include "test_util.hpp"

using namespace lattice;
using nlohmann::json;

namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string unescape(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"},
                                 {"&amp;", "&"}})
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  return s;
}

std::string attribute(const std::string& svg, const std::string& name) {
  const size_t at = svg.find(name + "=\"");
  if (at == std::string::npos) return "";
  const size_t from = at + name.size() + 2;
  return unescape(svg.substr(from, svg.find('"', from) - from));
}

chart::LineChart two_series() {
  chart::LineChart c;
  c.title = "Loss <&> \"quoted\"";
  c.x_label = "step";
  c.series = {{"train", {1, 2, 3, 4, 5}, {5.5, 4.0, 3.2, 2.9, 2.5}, false},
              {"validation", {2, 3, 4, 5}, {4.4, NAN, 3.1, 2.8}, true}};
  return c;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

json step(int i, int of) {
  return {{"event", "step"}, {"step", i}, {"steps", of}, {"loss", 5.0 - 0.1 * i}, {"lr", 1e-3}, {"grad_norm", 1.0},
          {"tokens_per_s", 1000.0 + i}, {"mfu", 0.1}, {"elapsed_s", 0.5 * i}};
}

}  // namespace

TEST(Chart, LineChartDrawsEverySeriesAndCarriesItsPointsForThePageScript) {
  const std::string svg = chart::render_svg(two_series());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(count(svg, "<path class=\"series\""), 2u);
  EXPECT_EQ(count(svg, "<circle"), 3u);  // the validation markers, the NaN left out
  EXPECT_NE(svg.find("Loss &lt;&amp;&gt; &quot;quoted&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<&>"), std::string::npos);
  const json series = json::parse(attribute(svg, "data-series"));
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0][0], "train");
  EXPECT_EQ(series[0][2].size(), 5u);
  EXPECT_EQ(series[1][2].size(), 3u);
  EXPECT_DOUBLE_EQ(series[1][2][1][1].get<double>(), 3.1);
}

TEST(Chart, EveryPointLiesInsideThePlotBox) {
  chart::LineChart c = two_series();
  c.series.push_back({"negative", {0, 10}, {-3.7, 12.25}, false});
  const std::string svg = chart::render_svg(c);
  double box[4];
  ASSERT_EQ(std::sscanf(attribute(svg, "data-plot").c_str(), "%lf,%lf,%lf,%lf", &box[0], &box[1], &box[2], &box[3]), 4);
  const std::regex point("[ML]([0-9.-]+) ([0-9.-]+)");
  size_t points = 0;
  for (std::sregex_iterator it(svg.begin(), svg.end(), point), end; it != end; ++it, ++points) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    EXPECT_GE(x, box[0] - 0.05);
    EXPECT_LE(x, box[0] + box[2] + 0.05);
    EXPECT_GE(y, box[1] - 0.05);
    EXPECT_LE(y, box[1] + box[3] + 0.05);
  }
  EXPECT_EQ(points, 5u + 3u + 2u);
}

TEST(Chart, AChartWithoutDataSaysSo) {
  chart::LineChart c;
  c.series = {{"empty", {}, {}, false}, {"nan", {1}, {NAN}, false}};
  const std::string svg = chart::render_svg(c);
  EXPECT_NE(svg.find("no data"), std::string::npos);
  EXPECT_EQ(count(svg, "<path"), 0u);
}

TEST(Chart, BarLegendWrapsIntoRowsAndTheChartGrowsToHoldThem) {
  chart::BarChart c;
  c.title = "t";
  c.y_label = "MiB";
  c.groups = {"rank 0"};
  c.bars = {"measured", "predicted"};
  for (int i = 0; i < 12; ++i) c.stacks.push_back("a rather long category name " + std::to_string(i));
  c.values = {{std::vector<double>(12, 1.0), std::vector<double>(12, 2.0)}};
  const std::string svg = chart::render_svg(c);
  double width = 0, height = 0;
  ASSERT_EQ(std::sscanf(svg.c_str(), "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bar-chart\" width=\"%lf\" height=\"%lf\"",
                        &width, &height), 2);
  EXPECT_GT(height, 50 + 320 + 90 + 18 * 3);  // four or more legend rows
  const std::regex text_x("<text x=\"([0-9.]+)\"[^>]*text-anchor=\"start\">a rather");
  size_t legend = 0;
  for (std::sregex_iterator it(svg.begin(), svg.end(), text_x), end; it != end; ++it, ++legend)
    EXPECT_LT(std::stod((*it)[1]) + 7 * 30, width);
  EXPECT_EQ(legend, 12u);
  EXPECT_NE(svg.find("bars: 1 = measured,  2 = predicted"), std::string::npos);
}

TEST(Html, TablesEscapeTheirCellsAndRightAlignNumbers) {
  html::Table t;
  t.header = {"<name>", "bytes"};
  t.rows = {{"<script>x</script>", "12.50 MiB"}, {"rank 0", "7%"}, {"1.5 GiB of memory", "–"}};
  const std::string s = html::render(t);
  EXPECT_EQ(s.find("<script>"), std::string::npos);
  EXPECT_NE(s.find("&lt;script&gt;x&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(s.find("<td class=\"n\">12.50 MiB</td>"), std::string::npos);
  EXPECT_NE(s.find("<td class=\"n\">7%</td>"), std::string::npos);
  EXPECT_NE(s.find("<td>rank 0</td>"), std::string::npos);
  EXPECT_NE(s.find("<td>1.5 GiB of memory</td>"), std::string::npos);
}

TEST(Html, APageLinksEverySectionAndCarriesItsScript) {
  html::Page page;
  page.title = "run <1>";
  page.add("a", "First", "<p>one</p>");
  page.add("b", "Second", "<p>two</p>");
  const std::string s = page.render();
  EXPECT_EQ(s.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(s.find("<title>run &lt;1&gt;</title>"), std::string::npos);
  EXPECT_NE(s.find("<a href=\"#a\">First</a><a href=\"#b\">Second</a>"), std::string::npos);
  EXPECT_NE(s.find("<section id=\"b\"><h2>Second</h2>"), std::string::npos);
  EXPECT_NE(s.find("data-charts-ready"), std::string::npos);
  EXPECT_EQ(s.find("http://") == std::string::npos ? 0 : count(s, "src=\"http"), 0u);  // nothing fetched
}

TEST(RunReport, ARecordThatIsNotJsonIsNamedByItsLine) {
  const std::string dir = testing_util::scratch_dir("report");
  write(dir + "/run.jsonl", step(1, 3).dump() + "\n\n" + step(2, 3).dump() + "\n{\"event\": \"step\", oops\n");
  testing_util::expect_input_error([&] { read_run_records(dir + "/run.jsonl"); }, "line 4 is not JSON");
  write(dir + "/array.jsonl", step(1, 3).dump() + "\n[1, 2]\n");
  testing_util::expect_input_error([&] { read_run_records(dir + "/array.jsonl"); }, "line 2 is not a JSON object");
  write(dir + "/plan.jsonl", "{\"event\": \"plan\"}\n");
  testing_util::expect_input_error([&] { read_run_records(dir + "/plan.jsonl"); }, "holds no training step");
  testing_util::expect_input_error([&] { read_run_records(dir + "/missing.jsonl"); }, "missing.jsonl does not exist");
}

TEST(RunReport, ARunningRunIsReportedAsRunning) {
  RunRecords run;
  for (int i = 1; i <= 4; ++i) run.add(step(i, 10));
  run.add({{"event", "eval"}, {"step", 4}, {"loss", 4.4}});
  run.add({{"event", "plan"}});  // another kind: left out
  EXPECT_EQ(run.steps.size(), 4u);
  EXPECT_EQ(run.evals.size(), 1u);
  const std::string page = run_report_html(run, "");
  EXPECT_NE(page.find("running: step 4 of 10"), std::string::npos);
  EXPECT_NE(page.find("Measured at the end of the run: not yet."), std::string::npos);
  EXPECT_NE(page.find("No trace"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"line-chart\""), 5u);  // loss, lr, |g|, tokens/s, MFU (no bits per byte)
}

TEST(RunReport, TheMfuPeakAndItsSourceAreShownAndNoPeakDrawsNoMfu) {
  RunRecords run;
  for (int i = 1; i <= 3; ++i) {
    json s = step(i, 3);
    s["peak_flops"] = 5.32e12, s["peak_flops_total"] = 10.64e12, s["peak_source"] = "AMX bf16: 2 cores <x>";
    run.add(s);
  }
  const std::string page = run_report_html(run, "");
  EXPECT_NE(page.find("5.32 TFLOP/s a rank, 10.6 TFLOP/s over the ranks: AMX bf16: 2 cores &lt;x&gt;"), std::string::npos);
  RunRecords none;  // no peak known: the MFU is null, the source says why
  for (int i = 1; i <= 3; ++i) {
    json s = step(i, 3);
    s["mfu"] = nullptr, s["peak_flops"] = nullptr, s["peak_source"] = "MFU n/a (no peak: pass --peak-flops)";
    none.add(s);
  }
  const std::string na = run_report_html(none, "");
  EXPECT_NE(na.find("MFU n/a (no peak: pass --peak-flops)"), std::string::npos);
  EXPECT_EQ(count(na, "class=\"line-chart\""), 4u);  // loss, lr, |g|, tokens/s
}

TEST(RunReport, EachRankIsSetBesideItsOwnStagesPrediction) {
  RunRecords run;
  auto predicted = [](int stage, bool writer, int64_t accounted) {
    return json{{"stage", stage}, {"writer", writer}, {"bytes", {{"activations", 1}, {"accounted_peak_bytes", accounted}}}};
  };
  run.add({{"event", "start"}, {"world", 2}, {"save", true},
           {"predicted_memory", {predicted(0, false, 5 << 20), predicted(0, true, 7 << 20)}}});
  run.add(step(1, 1));
  auto rank = [](int r) {
    return json{{"rank", r}, {"pp_rank", 0}, {"category_peak_bytes", {{"activations", 2}}}, {"accounted_peak_bytes", 3 << 20}};
  };
  run.add({{"event", "summary"}, {"steps", 1}, {"memory", {{"ranks", {rank(0), rank(1)}}}}, {"comm", {{"ranks", json::array()}}}});
  const std::string page = run_report_html(run, "");
  EXPECT_NE(page.find("7.00 MiB"), std::string::npos);  // rank 0 writes the checkpoint
  EXPECT_NE(page.find("5.00 MiB"), std::string::npos);  // rank 1 does not
  EXPECT_EQ(page.find("No prediction"), std::string::npos);
}

TEST(RunReport, RecordsOfTheWrongShapeAreInputErrorsNotCrashes) {
  const json bad_summaries[] = {
      {{"event", "summary"}, {"memory", 7}},
      {{"event", "summary"}, {"memory", {{"ranks", json::array()}}}},
      {{"event", "summary"}, {"memory", {{"ranks", {{{"category_peak_bytes", "x"}}}}}}},
      {{"event", "summary"}, {"memory", {{"ranks", {{{"activation_bytes_per_layer", {"a", "b"}}}}}}}},
      {{"event", "summary"}, {"memory", {{"ranks", {json::object()}}}}, {"comm", {{"ranks", {{{"by_op", 3}}}}}}},
  };
  for (const json& summary : bad_summaries) {
    RunRecords run;
    run.add(step(1, 1));
    run.add(summary);
    try {
      const std::string page = run_report_html(run, "");
      EXPECT_NE(page.find("</html>"), std::string::npos) << summary.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  RunRecords run;
  run.add(step(1, 1));
  run.add({{"event", "start"}, {"layout", {{"sequence_parallel", "yes"}}}});
  testing_util::expect_input_error([&] { run_report_html(run, ""); }, "not lattice train's");
}

TEST(Chart, TicksStayFewForAnyFiniteValues) {
  const std::vector<std::pair<double, double>> ranges = {
      {1.0, 1.0000000000000002}, {-1e308, 1e308}, {5e-324, 1e-323}, {0, 0}, {1e300, 1e300}, {-3, -3.0000001}};
  for (const auto& [lo, hi] : ranges) {
    chart::LineChart c;
    c.series = {{"s", {1e308, -1e308, 3}, {lo, hi, lo}, false}};
    const std::string svg = chart::render_svg(c);
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << lo << " " << hi;
    EXPECT_LT(count(svg, "<line"), 40u) << lo << " " << hi;  // gridlines and ticks: a handful
    EXPECT_EQ(svg.find("nan"), std::string::npos) << lo << " " << hi;
  }
}

TEST(Chart, ALonePointIsDrawnAsADot) {
  chart::LineChart c;
  c.series = {{"loss", {1}, {5.5}, false}};
  EXPECT_EQ(count(chart::render_svg(c), "<circle"), 1u);
}

TEST(RunReport, AResumedRunSupersedesWhatCameAfterItsCheckpoint) {
  RunRecords run;
  run.add({{"event", "start"}, {"world", 1}});
  for (int i = 1; i <= 6; ++i) run.add(step(i, 6));
  run.add({{"event", "eval"}, {"step", 6}, {"loss", 4.0}});
  run.add({{"event", "summary"}, {"steps", 6}});
  run.add({{"event", "start"}, {"world", 1}});  // resumed from step 4's checkpoint
  EXPECT_TRUE(run.summary.is_null());
  json again = step(5, 8);
  again["loss"] = 9.5;
  run.add(again);
  ASSERT_EQ(run.steps.size(), 5u);
  EXPECT_EQ(run.steps.back()["loss"], 9.5);
  EXPECT_TRUE(run.evals.empty());
  for (size_t i = 0; i < run.steps.size(); ++i) EXPECT_EQ(run.steps[i]["step"], int(i) + 1);
}

TEST(RunReport, ALongRunIsThinnedWithItsFirstAndLastStepsKept) {
  RunRecords run;
  const int n = 50000;
  for (int i = 1; i <= n; ++i) run.add(step(i, n));
  EXPECT_LE(run.steps.size(), 2 * RunRecords::kMaxSteps);
  EXPECT_GE(run.steps.size(), RunRecords::kMaxSteps);
  EXPECT_EQ(run.steps.front()["step"], 1);
  EXPECT_EQ(run.steps.back()["step"], n);
  for (size_t i = 1; i < run.steps.size(); ++i) EXPECT_LT(run.steps[i - 1]["step"], run.steps[i]["step"]);
  EXPECT_LT(run_report_html(run, "").size(), size_t(4) << 20);
}

TEST(RunReport, ALastLineCutShortIsLeftOutButOneInTheMiddleIsAnError) {
  const std::string dir = testing_util::scratch_dir("report");
  const std::string two = step(1, 3).dump() + "\n" + step(2, 3).dump() + "\n";
  write(dir + "/cut.jsonl", two + step(3, 3).dump().substr(0, 20));
  EXPECT_EQ(read_run_records(dir + "/cut.jsonl").steps.size(), 2u);
  write(dir + "/middle.jsonl", step(1, 3).dump().substr(0, 20) + "\n" + two);
  testing_util::expect_input_error([&] { read_run_records(dir + "/middle.jsonl"); }, "line 1 is not JSON");
}
