#include "report/run_log.hpp"

#include <filesystem>
#include <iostream>

#include "core/atomic_dir.hpp"
#include "core/error.hpp"

namespace lattice {

namespace fs = std::filesystem;

void check_report_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    check_file_writable((fs::path(dir) / "run.jsonl").string(), "--report-dir");
    return;
  }
  require(fs::is_directory(dir, ec), "--report-dir " + dir + " exists and is not a directory");
  const bool ours = fs::is_regular_file(fs::path(dir) / "run.jsonl", ec);
  require(ours || fs::is_empty(dir, ec),
          "--report-dir " + dir + " holds files and no run.jsonl: name a new or empty directory (or an earlier report's)");
  check_file_writable((fs::path(dir) / "run.jsonl").string(), "--report-dir");
}

RunLog::RunLog(bool json_stdout, const std::string& report_dir, const std::string& trace_path, bool append)
    : json_stdout_(json_stdout), dir_(report_dir), trace_(trace_path), last_render_(std::chrono::steady_clock::now()) {
  if (dir_.empty()) return;
  const std::string path = (fs::path(dir_) / "run.jsonl").string();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  require(!ec, "--report-dir: cannot create " + dir_ + ": " + ec.message());
  if (append) {
    // A resumed run: its report covers the steps before the resume too.
    try {
      if (fs::is_regular_file(path, ec)) run_ = read_run_records(path);
    } catch (const InputError&) {
      run_ = {};  // an empty or unreadable earlier log: the report starts here
    }
  }
  file_.open(path, append ? std::ios::app : std::ios::trunc);
  require(bool(file_), "--report-dir: cannot write " + path);
}

void RunLog::record(const nlohmann::json& record) {
  const std::string line = record.dump();
  if (json_stdout_) std::cout << line << "\n" << std::flush;
  if (dir_.empty()) return;
  file_ << line << "\n" << std::flush;
  require(bool(file_), "--report-dir: cannot write " + (fs::path(dir_) / "run.jsonl").string() + " (disk full?)");
  run_.add(record);
  const std::string event = record.value("event", std::string());
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_render_).count();
  if (event == "eval" || since >= kRenderSeconds) render(false);
}

void RunLog::finish() { render(true); }

void RunLog::render(bool with_trace) {
  if (dir_.empty() || run_.steps.empty()) return;
  std::error_code ec;
  // The trace is written at the end of the run: a file at its path before then is an older run's.
  const std::string trace = with_trace && !trace_.empty() && fs::is_regular_file(trace_, ec) ? trace_ : "";
  const std::string page = run_report_html(run_, trace);
  write_file_atomically((fs::path(dir_) / "report.html").string(), page.data(), page.size());
  last_render_ = std::chrono::steady_clock::now();
}

}  // namespace lattice
