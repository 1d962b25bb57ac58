#include "report/run_report_sections.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/chart.hpp"
#include "core/html_page.hpp"

namespace lattice {

namespace {

using nlohmann::json;


std::string text(const json& j, const char* key) {
  if (!j.is_object()) return "–";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "–";
}

std::string num(double v, const char* format = "%.4f") {
  if (!std::isfinite(v)) return "–";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string joined(const json& list) {
  if (!list.is_array() || list.empty()) return "none";
  std::string out;
  for (const json& v : list) out += (out.empty() ? "" : ", ") + (v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

// A layout of a restart record: the line's own words when recorded, else its numbers.
std::string layout_text(const json& restart, const char* text_key, const char* key) {
  if (const std::string t = text(restart, text_key); t != "–") return t;
  const json& l = restart.is_object() && restart.contains(key) ? restart[key] : json();
  return "TP " + num(record_number(l, "tp"), "%.0f") + " × PP " + num(record_number(l, "pp"), "%.0f") + " × DP " +
         num(record_number(l, "dp"), "%.0f") + " (" + num(record_number(l, "world"), "%.0f") + " ranks)";
}

}  // namespace

std::string step_time_section(const RunRecords& run) {
  std::string s;
  if (!run.stragglers.empty()) {
    html::Table named;
    named.header = {"step", "rank", "stage", "compute a step (s)", "peers' median (s)", "ratio", "window"};
    for (const json& r : run.stragglers)
      named.rows.push_back({num(record_number(r, "step"), "%.0f"), num(record_number(r, "rank"), "%.0f"),
                            num(record_number(r, "stage"), "%.0f"), num(record_number(r, "compute_s")),
                            num(record_number(r, "peers_median_s")), num(record_number(r, "ratio"), "%.2fx"),
                            num(record_number(r, "steps"), "%.0f") + " steps, " + num(record_number(r, "window_s"), "%.2f") + " s"});
    named.caption = "Stragglers named while the run went on: compute above its stage's other ranks' median by more "
                    "than the threshold (" + num(100 * record_number(run.stragglers.back(), "threshold"), "%.0f") +
                    "%) over the last 2 s (docs/recovery.md)";
    s += html::render(named);
  }
  const json& times = run.summary.is_object() && run.summary.contains("step_time") ? run.summary["step_time"] : json();
  if (!times.is_object() || !times.contains("ranks") || !times["ranks"].is_array())
    return s + html::paragraph(run.summary.is_null() ? "Each rank's split is in the summary, at the end of the run: not yet."
                                                     : "No step-time split in this log (a run before it was recorded, "
                                                       "or no step after the first).", "note");
  chart::BarChart c;
  c.title = "Step time by rank: compute, communication wait, pipeline bubble (mean after the first step)";
  c.y_label = "ms";
  c.bars = {"step"};
  c.stacks = {"compute", "communication wait", "bubble"};
  html::Table t;
  t.header = {"rank", "stage", "step (s)", "compute (s)", "communication wait (s)", "bubble (s)", "straggler"};
  for (const json& r : times["ranks"]) {
    const double rank = record_number(r, "rank");
    bool named = false;
    for (const json& n : run.stragglers) named = named || record_number(n, "rank") == rank;
    c.groups.push_back("rank " + num(rank, "%.0f"));
    c.values.push_back({{1e3 * record_number(r, "compute_s"), 1e3 * record_number(r, "comm_wait_s"), 1e3 * record_number(r, "bubble_s")}});
    t.rows.push_back({num(rank, "%.0f"), num(record_number(r, "stage"), "%.0f"), num(record_number(r, "step_s")),
                      num(record_number(r, "compute_s")), num(record_number(r, "comm_wait_s")), num(record_number(r, "bubble_s")),
                      named ? "named" : ""});
  }
  t.caption = "Mean over " + num(record_number(times, "steps"), "%.0f") + " steps: compute is everything not a wait (GEMMs, "
              "element-wise, recompute, optimizer, bookkeeping); a slow rank shows as compute, the others wait for it";
  return s + html::chart_block(chart::render_svg(c)) + html::render(t);
}

std::string restarts_section(const RunRecords& run) {
  html::Table t;
  t.header = {"restart", "why", "hosts lost", "layout before → after", "on hosts", "resumed at step", "steps redone",
              "seconds lost", "first step after relaunch (s)"};
  for (size_t i = 0; i < run.restarts.size(); ++i) {
    const json& r = run.restarts[i];
    const json& resumed = r.contains("resumed") ? r["resumed"] : json();  // the launcher's, after the relaunch
    t.rows.push_back({num(record_number(r, "restart"), "%.0f"), text(r, "reason"), joined(r.value("lost_hosts", json())),
                      layout_text(r, "from_text", "from") + " → " + layout_text(r, "to_text", "to"),
                      joined(r.value("hosts", json())), num(record_number(r, "resume_step"), "%.0f"),
                      num(record_number(r, "steps_redone"), "%.0f"), num(record_number(r, "seconds_lost"), "%.1f"),
                      num(record_number(resumed, "seconds_to_first_step"), "%.1f")});
  }
  t.caption = "Each relaunch by lattice launch (docs/recovery.md): seconds lost run from the failed job's last step "
              "to the relaunch; the job's first step after it is the last column";
  return html::render(t);
}

}  // namespace lattice
