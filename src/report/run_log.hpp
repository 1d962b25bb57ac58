#pragma once
// Where a training run's JSON Lines records go: standard output (--json) and, with
// --report-dir DIR, DIR/run.jsonl, from which DIR/report.html (report/run_report.hpp) is drawn
// again as the run goes: at every evaluation, at least every kRenderSeconds, and at the end.
#include <chrono>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "report/run_report.hpp"

namespace lattice {

// Before training starts: DIR is new, empty, or a report directory of an earlier run (it holds
// run.jsonl). Anything else is a user's directory and is refused (InputError naming it).
void check_report_dir(const std::string& dir);

class RunLog {
 public:
  static constexpr double kRenderSeconds = 30;
  // append: a resumed run continues the directory's run.jsonl; else it starts a new one.
  RunLog(bool json_stdout, const std::string& report_dir, const std::string& trace_path, bool append);
  void record(const nlohmann::json& record);
  void finish();  // report.html with the trace: the end of the run, after the trace is written
  bool active() const { return json_stdout_ || !dir_.empty(); }

 private:
  void render(bool with_trace);
  bool json_stdout_;
  std::string dir_, trace_;
  std::ofstream file_;
  RunRecords run_;
  std::chrono::steady_clock::time_point last_render_;
};

}  // namespace lattice
