// `lattice report RUN_DIR|RUN.jsonl --html FILE`: a training run's JSON Lines drawn as one
// self-contained HTML page (report/run_report.hpp), with the pipeline timeline when a trace exists.
#include <cstdio>
#include <filesystem>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/output_path.hpp"
#include "core/error.hpp"
#include "report/run_report.hpp"

namespace lattice::cli {

int run_report(int argc, char** argv) {
  CLI::App app("Draw a training run as one self-contained HTML page: loss and validation curves, learning rate, "
               "tokens/s and MFU, memory by category and op per rank beside the formulas, traffic by group and "
               "operator, and the pipeline timeline.",
               "lattice report");
  std::string run, html, trace;
  app.add_option("run", run, "a --report-dir directory (its run.jsonl, and trace.json if there) or a lattice train --json file")
      ->required();
  app.add_option("--html", html, "the HTML file to write")->required();
  app.add_option("--trace", trace, "a lattice train --trace file for the timeline (default: the trace the run wrote into RUN_DIR)");
  bool overwrite = false;
  add_overwrite_flag(app, overwrite);
  if (const auto status = parse_flags(app, argc, argv)) return *status;
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string log = run;
  const bool directory = fs::is_directory(run, ec);
  if (directory) {
    log = (fs::path(run) / "run.jsonl").string();
    require(!fs::exists(fs::symlink_status(log, ec)) || fs::is_regular_file(log, ec),
            run + "'s run.jsonl is not a regular file (a FIFO, device, directory or broken link)");
    require(fs::is_regular_file(log, ec), run + " holds no run.jsonl (write one with lattice train --report-dir " + run + ")");
  }
  require(fs::exists(log, ec), run + " does not exist");
  require(!html.empty() && html.back() != '/' && !fs::is_directory(html, ec), "--html " + html + " must name a file");
  const RunRecords records = read_run_records(log);  // before anything is created for the output
  if (records.skipped_lines > 0) std::fprintf(stderr, "lattice report: warning: %s\n", records.skipped_warning().c_str());
  if (directory && trace.empty()) {
    // The trace the run wrote into its directory (its start record names it), never an older run's.
    const nlohmann::json& own = records.start.is_object() && records.start.contains("report_trace")
                                    ? records.start["report_trace"] : nlohmann::json();
    if (own.is_string() && fs::is_regular_file(fs::path(run) / own.get<std::string>(), ec))
      trace = (fs::path(run) / own.get<std::string>()).string();
  }
  if (!trace.empty()) require(fs::is_regular_file(trace, ec), "--trace " + trace + " is not a readable file");
  OutputRules rules{overwrite, {{"run log", log}, {"--trace", trace}}, {}};
  // Its report.html is this command's to draw, named by the directory or by its run.jsonl.
  if (directory) rules.own_report_dir = run;
  else if (fs::path(log).filename() == "run.jsonl") rules.own_report_dir = fs::absolute(log, ec).parent_path().string();
  check_output_path(html, OutputKind::html, "--html", rules);
  std::string trace_problem;
  const std::string page = run_report_html(records, trace, &trace_problem);
  // A --trace given by hand is drawn or refused (a file of another kind, another layout, a trace cut
  // short): not a page that says it could not be drawn under a line that says it was.
  require(app.count("--trace") == 0 || trace_problem.empty(), "--trace " + trace + " cannot be drawn: " + trace_problem);
  write_output_file(html, OutputKind::html, "--html", page, rules);
  const size_t ranks = records.summary.is_object() && records.summary.contains("memory")
                           ? records.summary["memory"].value("ranks", nlohmann::json::array()).size()
                           : 0;
  std::fprintf(stderr, "lattice report: wrote %s (%zu steps, %zu evaluations, %s%s)\n", html.c_str(),
               records.steps.size(), records.evals.size(),
               ranks ? (std::to_string(ranks) + " rank(s)").c_str() : "no summary yet",
               trace.empty() ? "" : trace_problem.empty() ? ", timeline from the trace"
                                                            : (", trace not drawn: " + trace_problem).c_str());
  return 0;
}

}  // namespace lattice::cli
