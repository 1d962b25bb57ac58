#include "report/run_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/atomic_dir.hpp"
#include "core/error.hpp"
#include "core/output_path.hpp"
#include "core/standard_output.hpp"

namespace lattice {

namespace fs = std::filesystem;

namespace {

std::string log_path(const std::string& dir) { return (fs::path(dir) / kRunLog).string(); }

// The "event" of the log's last whole line ("" when it has none, or the line is not a record).
std::string last_event(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line, last;
  while (std::getline(in, line))
    if (!in.eof() && line.find_first_not_of(" \t\r") != std::string::npos) last = line;  // a cut last line is not whole
  const nlohmann::json record = nlohmann::json::parse(last, nullptr, false);
  return record.is_object() && record.contains("event") && record["event"].is_string() ? record["event"].get<std::string>()
                                                                                        : "";
}

}  // namespace

void check_report_dir(const std::string& dir, const std::string& save, const std::string& trace, bool append,
                      const OutputRules& rules, bool relaunched) {
  require(!dir.empty(), "--report-dir needs a directory");
  require(save.empty() || (!path_within(dir, save) && !path_within(save, dir)),
          "--report-dir " + dir + " and --save " + save + " overlap: a checkpoint directory holds only the checkpoint");
  require(trace.empty() || !path_within(dir, trace), "--report-dir " + dir + " is the --trace file");
  check_output_path(dir, OutputKind::report_dir, "--report-dir", rules);
  // A live run holds the log's lock (RunLog): say so before judging its contents.
  const int fd = ::open(log_path(dir).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    require(!held, "--report-dir " + dir + " is being written by another lattice run");
  }
  std::error_code ec;
  if (fs::is_regular_file(log_path(dir), ec) && fs::file_size(log_path(dir), ec) > 0) {
    // An earlier run's log that holds steps is kept: a resume continues it, a new run may not
    // truncate it unless told to (--overwrite). One with no step has nothing to lose.
    bool has_steps = true;
    try {
      (void)read_run_records(log_path(dir));
    } catch (const InputError& e) {
      const std::string why = e.what();
      has_steps = why.find("holds no training step") == std::string::npos;
      require(!append || !has_steps, "--report-dir " + dir + " cannot be continued: " + why);
    }
    require(append || !has_steps || rules.overwrite,
            "--report-dir " + dir + " holds an earlier run's report: continue it with --resume, name a new "
            "directory, or pass --overwrite to start it again");
    require(!relaunched || !has_steps || last_event(log_path(dir)) == "restart",
            "--continue-report: --report-dir " + dir + "'s log does not end with lattice launch's restart record "
            "(it continues only the report of the run the launcher restarted)");
  }
  check_file_writable(log_path(dir), "--report-dir");
  // The page drawn beside the log: one that is not lattice's is refused now, not after the run.
  const std::string page = (fs::path(dir) / kRunReport).string();
  if (fs::exists(fs::symlink_status(page, ec))) {
    OutputRules own = rules;
    own.own_report_dir = dir;
    check_output_path(page, OutputKind::html, "--report-dir", own);
  }
}

RunLog::RunLog(bool json_stdout, const std::string& report_dir, const std::string& trace_path, bool append,
               bool overwrite)
    : json_stdout_(json_stdout),
      dir_(report_dir),
      trace_(trace_path),
      last_render_(std::chrono::steady_clock::now() - std::chrono::hours(1)) {  // the first step draws a page
  overwrite_ = overwrite;
  if (dir_.empty()) return;
  const std::string path = log_path(dir_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  require(!ec, "--report-dir: cannot create " + dir_ + ": " + ec.message());
  // O_APPEND: lattice launch appends its own records (restart, resumed) to the same file while the
  // job runs; each line then lands whole at the end instead of being overwritten at this fd's offset.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_APPEND, 0644);  // a FIFO put there does not block
  require(fd_ >= 0, "--report-dir: cannot write " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_), fd_ = -1;
    fail("--report-dir " + dir_ + " is being written by another lattice run");
  }
  if (append) {
    // A resumed run: its report covers the steps before the resume too. A last line cut short (the
    // run before was killed mid-write) is cut off, so the next record starts a line of its own.
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t keep = text.empty() || text.back() == '\n' ? text.size() : text.rfind('\n') + 1;  // npos + 1 = 0
    if (keep != text.size()) require(::ftruncate(fd_, off_t(keep)) == 0, "--report-dir: cannot repair " + path);
    if (keep > 0) run_ = read_run_records(path);
    if (run_.skipped_lines > 0) std::fprintf(stderr, "lattice train: warning: %s\n", run_.skipped_warning().c_str());
    ::lseek(fd_, 0, SEEK_END);
  } else {
    require(::ftruncate(fd_, 0) == 0, "--report-dir: cannot write " + path);
  }
}

RunLog::~RunLog() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

std::string json_line(const nlohmann::json& record) {
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int append_whole_line(int fd, const std::string& line) {
  const off_t before = ::lseek(fd, 0, SEEK_END);  // where this line starts (O_APPEND writes at the end)
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    const int why = n < 0 ? errno : ENOSPC;
    struct stat st {};
    if (done > 0 && before >= 0 && ::fstat(fd, &st) == 0 && st.st_size == before + off_t(done))
      (void)!::ftruncate(fd, before);
    return why;
  }
  return 0;
}

void RunLog::record(const nlohmann::json& given) {
  nlohmann::json record = given;
  // A trace written into the report directory is named in the start record, relative to it, so
  // `lattice report DIR` draws this run's trace and never an older run's left there.
  if (!dir_.empty() && !trace_.empty() && record.value("event", std::string()) == "start" && path_within(trace_, dir_)) {
    std::error_code ec;
    record["report_trace"] = fs::relative(fs::weakly_canonical(fs::absolute(trace_)), fs::weakly_canonical(fs::absolute(dir_)), ec).string();
  }
  const std::string line = json_line(record) + "\n";
  if (json_stdout_) {
    // A closed stdout (`| head`) is reported once and the run goes on: the log and the save matter more.
    std::cout << line;
    standard_output::flush();
  }
  if (dir_.empty() || stopped_) return;
  if (const int why = append_whole_line(fd_, line)) {
    // The report is for looking at: a log that cannot be written stops it, never the training or its --save.
    stop_log("cannot write " + log_path(dir_) + ": " + std::strerror(why));
    return;
  }
  run_.add(record);
  const std::string event = record.value("event", std::string());
  const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_render_).count();
  if ((event == "eval" && since >= kMinRenderSeconds) || since >= kRenderSeconds) render(false);
}

void RunLog::finish() { render(true); }

void RunLog::stop_log(const std::string& why) {
  stopped_ = true;
  std::fprintf(stderr, "lattice train: warning: --report-dir %s: %s; the report stops here, training and --save go on\n",
               dir_.c_str(), why.c_str());
}

void RunLog::render(bool with_trace) {
  if (dir_.empty() || stopped_ || (run_.steps.empty() && run_.summary.is_null())) return;
  last_render_ = std::chrono::steady_clock::now();
  std::error_code ec;
  // The trace is written at the end of the run: a file at its path before then is an older run's.
  const std::string trace = with_trace && !trace_.empty() && fs::is_regular_file(trace_, ec) ? trace_ : "";
  try {
    const std::string page = run_report_html(run_, trace);
    OutputRules own;
    own.own_report_dir = dir_;
    own.overwrite = overwrite_;
    write_output_file((fs::path(dir_) / kRunReport).string(), OutputKind::html, "--report-dir", page, own);
  } catch (const std::exception& e) {
    // The page is for looking at: a full disk or an odd record must not stop the training, nor the
    // log (`lattice report` draws the page from it). Said once; drawing is tried again at the next turn.
    if (!warned_)
      std::fprintf(stderr, "lattice train: warning: report.html not redrawn: %s (run.jsonl, training and --save go on)\n",
                   e.what());
    warned_ = true;
  }
}

}  // namespace lattice
