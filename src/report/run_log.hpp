#pragma once
// Where a training run's JSON Lines records go: standard output (--json) and, with
// --report-dir DIR, DIR/run.jsonl, from which DIR/report.html (report/run_report.hpp) is drawn
// again as the run goes: at evaluations (at most every kMinRenderSeconds), at least every
// kRenderSeconds, and at the end.
#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "core/output_path.hpp"
#include "report/run_report.hpp"

namespace lattice {

// A record as the one line a run log (and --json) writes, without its newline: bytes that are not
// UTF-8 (a path named so) as U+FFFD, not an exception that would end the run. lattice launch's
// records go through it too.
std::string json_line(const nlohmann::json& record);

// Appends `line` (its newline included) to the O_APPEND file `fd`. A write the disk cut short is cut
// off again, back to where the line began, when nothing else was appended meanwhile (train and
// lattice launch both append to a run.jsonl), so the log stays whole lines. Returns 0, or the errno.
int append_whole_line(int fd, const std::string& line);

// Before training starts: DIR is new, empty, or the report directory of an earlier run (its
// run.jsonl a lattice run log: core/output_path.hpp's OutputKind::report_dir, under `rules`);
// neither the checkpoint directory nor inside it (or it inside DIR), nor the trace file. `append` (a
// resume): the log must be readable to the end. Not `append` (a new run): a log holding steps is an
// earlier run's report, refused unless rules.overwrite. `relaunched` (lattice launch's relaunch,
// --continue-report, appending without a resume): a log holding steps must end with the launcher's
// restart record, so that no other run's report is continued. Anything else is refused with one
// line (InputError) naming it.
void check_report_dir(const std::string& dir, const std::string& save, const std::string& trace, bool append,
                      const OutputRules& rules = {}, bool relaunched = false);

class RunLog {
 public:
  static constexpr double kRenderSeconds = 30, kMinRenderSeconds = 5;
  // append: a resumed run continues the directory's run.jsonl (a last line cut short is cut off);
  // else it starts a new one. The log is locked against another run for as long as this one lives.
  // overwrite (--overwrite): the page may replace a report.html lattice did not write (check_report_dir
  // refused one without it before the run).
  RunLog(bool json_stdout, const std::string& report_dir, const std::string& trace_path, bool append,
         bool overwrite = false);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;
  // Prints the record (--json) and appends it to run.jsonl. A log that cannot be written (a full
  // disk) stops the report with one warning; a page that cannot be drawn or written is one warning,
  // and the log goes on. Training and its saves go on either way.
  void record(const nlohmann::json& given);
  void finish();  // report.html with the trace: the end of the run, after the trace is written

 private:
  void render(bool with_trace);
  void stop_log(const std::string& why);  // its one warning; nothing more is written to the directory
  bool json_stdout_;
  std::string dir_, trace_;
  int fd_ = -1;
  RunRecords run_;
  std::chrono::steady_clock::time_point last_render_;
  bool warned_ = false;   // report.html could not be redrawn (said once)
  bool overwrite_ = false;
  bool stopped_ = false;  // run.jsonl could not be written: the report stopped
};

}  // namespace lattice
