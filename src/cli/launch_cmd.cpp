// `lattice launch --hostfile H [...] -- train <flags>`: a supervisor around mpirun (docs/recovery.md).
// It starts mpirun as a user would, passes the job's output through, and when a rank is lost (train
// exits 3, a rank is killed, or no output line comes for --no-progress-timeout seconds; a job mpirun
// still holds kLostJobGraceSeconds after a rank was lost is ended here) it finds the
// hosts that still answer, asks the planner for the fastest layout on their slots and starts the
// job again from the last promoted checkpoint. The decisions are in launch_supervisor.*; this file
// holds the processes: mpirun, the probes, the signals. Past the usual length on purpose: the
// handling of mpirun's session (its signals, its reaping, the ranks it leaves) is private to the one
// command that uses it, and reads as one sequence beside it.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "cli/config_file.hpp"
#include "cli/launch_supervisor.hpp"
#include "checkpoint/checkpoint.hpp"
#include "cli/model_flags.hpp"
#include "core/child_process.hpp"
#include "core/error.hpp"
#include "core/pinned_path.hpp"
#include "core/input_file.hpp"
#include "core/memory_limit.hpp"
#include "core/output_path.hpp"
#include "report/run_log.hpp"
#include "core/standard_output.hpp"
#include "data/tokenizer_files.hpp"
#include "train/resume_settings.hpp"

namespace lattice::cli {

namespace {

using launch::Host;
using launch::JobResult;

// The longest output line the launcher reads (for step and rank-lost records); past it, bytes pass on unread.
constexpr size_t kLongestLine = size_t(1) << 20;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The job's process group and the signal that interrupted the launcher (forwarded to the group).
volatile sig_atomic_t g_job_group = 0;
volatile sig_atomic_t g_signal = 0;

void forward_signal(int sig) {
  g_signal = sig;
  // The group; or mpirun itself, in the instant before it has made its session (and group).
  if (g_job_group > 0 && kill(-pid_t(g_job_group), sig) != 0) kill(pid_t(g_job_group), sig);
}

std::string this_hostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Waits up to `seconds` for `pid`; returns its status, or nullopt (still running, or the launcher
// interrupted while `interruptible`).
std::optional<int> wait_for(pid_t pid, double seconds, bool interruptible = false) {
  const double until = now_s() + seconds;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return exit_status_of(status);
    if (r < 0 && errno != EINTR) return 1;
    if (now_s() >= until || (interruptible && g_signal != 0)) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Whether `pid` has ended, without reaping it: while it is a zombie its pid (and so its session's id)
// cannot be taken by another process.
bool has_ended(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

// The live processes of session `sid` but its leader, from /proc (field 6 of /proc/PID/stat, read
// after the command's closing parenthesis, which may itself hold spaces or parentheses).
std::vector<pid_t> session_members(pid_t sid) {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (!dir) return out;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == sid) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    long ppid = 0, pgrp = 0, session = 0;
    if (!(rest >> state >> ppid >> pgrp >> session)) continue;
    if (session == sid && state != "Z") out.push_back(pid_t(pid));
  }
  closedir(dir);
  return out;
}

// Ends what is left of a job whose mpirun (the session's leader, ended, not yet reaped) is gone: its
// ranks on this machine, stopped or running, which would otherwise train on and hold the checkpoint's
// lock against the relaunch. Ranks on other hosts end with their daemon, when mpirun's link to it goes.
void end_session(pid_t sid) {
  for (int round = 0; round < 250; ++round) {  // 5 s
    const std::vector<pid_t> left = session_members(sid);
    if (left.empty()) return;
    for (const pid_t p : left) kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

struct LaunchFlags {
  std::string hostfile, mpirun = "mpirun", hardware = "cpu";
  std::string save;  // train's --save, whose lock a relaunch waits for
  std::vector<std::string> mpi_args;
  int min_ranks = 1, max_restarts = 3;
  double no_progress_timeout = 600, probe_timeout = 10;
};

// A failed write to standard output (a full disk, a reader gone) is said when it happens, with its
// cause, once; the job goes on (its checkpoints are the run's record), and the exit status says it.
void flush_output(std::FILE* to) {
  if (to == stdout) standard_output::flush(true);
  else std::fflush(to);
}

// What tells one state of a file from another without reading it: its inode, size and change time
// ("" when there is none).
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_ctim.tv_sec) + "." +
         std::to_string(st.st_ctim.tv_nsec);
}

class MpirunLauncher final : public launch::Launcher {
 public:
  MpirunLauncher(const LaunchFlags& flags, bool json, std::string report_log)
      : flags_(flags), json_(json), report_log_(std::move(report_log)), report_at_start_(file_identity(report_log_)) {}

  // Whether a job of this launch wrote the --report-dir log (it is not what the launch began with):
  // then the launcher's records go into it and the relaunch continues it; an older run's log that
  // no job took on (the first failed before opening it) is neither appended to nor continued.
  bool report_written() const {
    const std::string now = file_identity(report_log_);
    return !now.empty() && now != report_at_start_;
  }

  // The relaunch's start, for the "resumed" line when its first step arrives.
  void restarted(double last_progress_before) {
    restart_at_ = now_s();
    failed_progress_at_ = last_progress_before;
    awaiting_first_step_ = true;
  }
  double last_progress() const { return last_progress_; }

  void emit(const nlohmann::json& event) {
    const std::string line = json_line(event);  // as the run log writes its records
    if (json_) {
      std::printf("%s\n", line.c_str());
      flush_output(stdout);
    }
    // Only into the run log a job of this launch made or took on: never a file of the user's, nor one
    // train refused, nor an older run's.
    if (report_written() && run_log_problem(report_log_).empty()) {
      const int log = ::open(report_log_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
      if (log >= 0) (void)append_whole_line(log, line + "\n"), ::close(log);
    }
  }

  JobResult run(const std::vector<Host>& hosts, int world, const std::vector<std::string>& args) override {
    JobResult job;
    job.relaunched = jobs_run_++ > 0;
    char hostfile[] = "/tmp/lattice-launch-hosts-XXXXXX";
    const int hf = mkstemp(hostfile);
    if (hf < 0) throw std::runtime_error(std::string("cannot create a hostfile in /tmp: ") + std::strerror(errno));
    const std::string text = launch::hostfile_text(hosts);
    const bool wrote = write(hf, text.data(), text.size()) == ssize_t(text.size());
    close(hf);
    if (!wrote) throw std::runtime_error("cannot write the hostfile " + std::string(hostfile));

    std::vector<std::string> argv = {flags_.mpirun, "--hostfile", hostfile, "-np", std::to_string(world)};
    argv.insert(argv.end(), flags_.mpi_args.begin(), flags_.mpi_args.end());
    argv.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
    argv.push_back("train");
    argv.insert(argv.end(), args.begin(), args.end());

    if (g_signal != 0) {  // interrupted between jobs: no job is started
      unlink(hostfile);
      job.interrupted = true, job.interrupt_signal = g_signal, job.exit_status = 128 + g_signal;
      return job;
    }
    // Close-on-exec: mpirun must hold only its own ends (as stdout and stderr), or a job whose
    // launcher died would hold its own pipe's reader and block on a full pipe forever.
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)
      throw std::runtime_error("cannot create pipes");
    const double started = now_s();
    save_lock_ = DirLock();  // held since the job before ended: the job's rank 0 takes it
    const pid_t pid = spawn_tied_child(argv, out_pipe[1], err_pipe[1], "lattice launch", &g_job_group);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (pid < 0) throw std::runtime_error(std::string("cannot fork: ") + std::strerror(errno));

    double last_line = started;
    last_progress_ = started;
    std::string pending[2];
    bool inside_long_line[2] = {false, false};
    bool open_fd[2] = {true, true};
    const int fds[2] = {out_pipe[0], err_pipe[0]};
    std::optional<int> status;
    double reaped_at = 0, term_sent = 0, interrupted_at = 0;
    double lost_at = 0;  // the first line saying a rank is lost or killed (0: none yet)
    std::string lost_said;
    auto pass_raw = [&](int which, const std::string& bytes) {
      std::FILE* to = which == 0 ? stdout : stderr;
      std::fwrite(bytes.data(), 1, bytes.size(), to);
      flush_output(to);
      last_line = now_s();
    };
    // mpirun has read its hostfile once a rank prints: gone from /tmp then, so a launcher killed by
    // SIGKILL (no handler runs) leaves none behind past the job's start.
    bool hostfile_gone = false;
    // mpirun's notices come in blocks between lines of dashes, held until the block ends: the one that
    // says a rank exited non-zero is left out after train's own error line, which said why (one line
    // for bad input, not a page), except for the ranks' own lines among it; every other block is
    // passed on, and so is a block past kBlockLines (not a notice: held no longer).
    constexpr size_t kBlockLines = 64;
    std::vector<std::string> block;
    bool in_block = false;
    auto is_rule = [](const std::string& line) { return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos; };
    auto pass_block = [&]() {
      std::string text;
      for (const std::string& l : block) text += l + "\n";
      const bool exit_notice = text.find("non-zero exit code") != std::string::npos ||
                               text.find("exited with non-zero status") != std::string::npos;
      const bool dropped = job.refused && exit_notice && block.size() <= kBlockLines;
      std::string kept;
      for (const std::string& l : block)
        if (!dropped || l.rfind("lattice ", 0) == 0 || l.rfind("{", 0) == 0) kept += l + "\n";
      std::fwrite(kept.data(), 1, kept.size(), stderr);
      std::fflush(stderr);
      block.clear();
      in_block = false;
    };
    auto line_seen = [&](int which, const std::string& line, bool whole = true) {
      if (!hostfile_gone && launch::step_in_line(line)) {  // a rank trains: mpirun read the file long ago
        unlink(hostfile);
        hostfile_gone = true;
      }
      if (which == 0 && !whole) {
        // The job's last stdout line, cut by its end (a rank killed mid-write): on stderr, said so,
        // so that stdout stays whole lines (a --json stream stays JSON).
        std::fprintf(stderr, "lattice launch: the job's output ended inside a line: %s\n", line.c_str());
        std::fflush(stderr);
        return;
      }
      if (which == 1 && line.rfind("lattice train: error:", 0) == 0) job.refused = true;
      if (which == 1 && (in_block || is_rule(line))) {
        block.push_back(line);
        if (!in_block) in_block = true;
        else if (is_rule(line) || block.size() > kBlockLines) pass_block();
      } else {
        std::FILE* to = which == 0 ? stdout : stderr;
        std::fwrite(line.data(), 1, line.size(), to);
        std::fputc('\n', to);
        flush_output(to);
      }
      last_line = now_s();
      if (const auto step = launch::step_in_line(line)) {
        job.last_step = std::max(job.last_step, *step);
        last_progress_ = last_line;
        if (awaiting_first_step_) {
          awaiting_first_step_ = false;
          const double resume_s = last_line - restart_at_, lost_s = last_line - failed_progress_at_;
          std::fprintf(stderr,
                       "lattice launch: resumed: step %lld %.1f s after the relaunch, %.1f s after the last step "
                       "before the failure\n",
                       static_cast<long long>(*step), resume_s, lost_s);
          std::fflush(stderr);
          emit({{"event", "resumed"}, {"step", *step}, {"seconds_to_first_step", std::round(resume_s * 10) / 10},
                {"seconds_since_last_step", std::round(lost_s * 10) / 10}});
        }
      }
      if (const auto rank = launch::lost_rank_in_line(line)) {
        job.ranks_reporting_lost.push_back(*rank);
        if (lost_at == 0) lost_at = last_line, lost_said = "rank " + std::to_string(*rank) + " reported itself lost";
      }
      if (const auto died = launch::died_rank_in_line(line)) {
        if (lost_at == 0)
          lost_at = last_line, lost_said = "rank " + std::to_string(died->rank) + " ended on signal " +
                                           std::to_string(died->signal);
        job.hosts_died.push_back(launch::host_of_died_rank(hosts, *died));
        if (launch::is_crash_signal(died->signal) && job.crash_signal == 0)
          job.crash_signal = died->signal, job.crashed_rank = died->rank;
      }
    };
    while (open_fd[0] || open_fd[1] || !status) {
      pollfd p[2];
      int n = 0;
      int which_of[2];
      for (int i = 0; i < 2; ++i)
        if (open_fd[i]) {
          p[n] = {fds[i], POLLIN, 0};
          which_of[n++] = i;
        }
      if (n > 0) poll(p, nfds_t(n), 200);
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int k = 0; k < n; ++k) {
        if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int i = which_of[k];
        char buf[65536];
        const ssize_t got = read(fds[i], buf, sizeof buf);
        if (got <= 0) {
          if (got < 0 && errno == EINTR) continue;
          open_fd[i] = false;
          if (inside_long_line[i]) pass_raw(i, pending[i] + "\n");
          else if (!pending[i].empty()) line_seen(i, pending[i], false);
          pending[i].clear();
          continue;
        }
        const size_t scanned = pending[i].size();
        pending[i].append(buf, size_t(got));
        size_t from = 0;
        for (size_t nl = scanned; (nl = pending[i].find('\n', nl)) != std::string::npos; from = ++nl) {
          if (inside_long_line[i]) {  // the end of a line passed on raw: raw too
            pass_raw(i, pending[i].substr(from, nl + 1 - from));
            inside_long_line[i] = false;
          } else {
            line_seen(i, pending[i].substr(from, nl - from));
          }
        }
        pending[i].erase(0, from);
        // A line past kLongestLine (a progress bar of carriage returns, a stream with no newline) is
        // passed on as it comes, unread, not held: the launcher's memory stays bounded.
        if (pending[i].size() > kLongestLine) {
          pass_raw(i, pending[i]);
          pending[i].clear();
          inside_long_line[i] = true;
        }
      }
      const double now = now_s();
      if (!status && has_ended(pid)) {
        end_session(pid);  // what of the job is left on this machine (a stopped rank, a daemon)
        status = wait_for(pid, 5);
        if (!status) status = 1;
        reaped_at = now;
      }
      // Daemons of other hosts may hold the pipes after mpirun ended: 2 s for their last lines.
      if (status && now - reaped_at > 2) break;
      if (!status && term_sent == 0 && lost_at > 0 && now - lost_at > launch::kLostJobGraceSeconds) {
        std::fprintf(stderr,
                     "lattice launch: %s %.0f s ago and mpirun has not ended the job (a daemon it waits on: a "
                     "host that stopped answering, or stopped without dying): ending it\n",
                     lost_said.c_str(), now - lost_at);
        std::fflush(stderr);
        kill(-pid, SIGTERM);
        term_sent = now;
      }
      if (!status && term_sent == 0 && flags_.no_progress_timeout > 0 && now - last_line > flags_.no_progress_timeout) {
        job.no_progress = true;
        std::fprintf(stderr, "lattice launch: no output from the job for %.0f s (--no-progress-timeout): ending it\n",
                     flags_.no_progress_timeout);
        std::fflush(stderr);
        kill(-pid, SIGTERM);
        term_sent = now;
      }
      if (!status && term_sent > 0 && now - term_sent > 5) {
        kill(-pid, SIGKILL);
        term_sent = now + 1e9;  // once
      }
      // An interruption forwarded to a job that does not end (a stopped mpirun keeps the signal
      // pending): continued at once, killed after 10 s.
      if (!status && g_signal != 0) {
        if (interrupted_at == 0) {
          interrupted_at = now;
          kill(-pid, SIGCONT);
        } else if (now - interrupted_at > 10) {
          kill(-pid, SIGKILL);
          interrupted_at = now + 1e9;  // once
        }
      }
    }
    if (in_block) pass_block();  // a block the job's end cut off
    close(fds[0]);
    close(fds[1]);
    g_job_group = 0;
    if (!hostfile_gone) unlink(hostfile);
    job.exit_status = *status;
    job.interrupted = g_signal != 0;
    job.interrupt_signal = g_signal;
    job.seconds_since_progress = now_s() - last_progress_;
    // Held for the relaunch a lost rank brings; a job done, or failed on its own, or the last restart's,
    // has none to wait for. Interrupted while waiting: the job counts as interrupted.
    if (launch::classify(job) == launch::Verdict::lost && jobs_run_ <= flags_.max_restarts) {
      job.save_locked_by = hold_save_lock();
      if (g_signal != 0) job.interrupted = true, job.interrupt_signal = g_signal;
    }
    return job;
  }

 private:
  LaunchFlags flags_;
  bool json_;
  std::string report_log_, report_at_start_;
  double last_progress_ = 0, restart_at_ = 0, failed_progress_at_ = 0;
  bool awaiting_first_step_ = false;
  int jobs_run_ = 0;
  DirLock save_lock_;  // --save's, held between jobs

  // After a job: --save's lock, held until the next job starts (docs/recovery.md), so that no other
  // run writes the checkpoint the relaunch resumes from in between, and taken only once every rank
  // of the job before (on another host, or still ending here) has let go of it. Waits up to
  // kSaveLockWaitSeconds: an NFS server frees a dead client's lock when its lease ends (90 s by
  // Linux's default). Returns why the lock is still held past that (a rank on a host that stopped
  // without dying, which could yet write there: the launcher then stops), else "".
  static constexpr double kSaveLockWaitSeconds = 120;
  std::string hold_save_lock() {
    if (flags_.save.empty()) return "";
    const double until = now_s() + kSaveLockWaitSeconds;
    for (bool said = false;; said = true) {
      try {
        save_lock_ = DirLock(flags_.save, "--save");
        return "";
      } catch (const LockHeldError& e) {
        if (g_signal != 0) return "";
        if (now_s() >= until)
          return std::string(e.what()) + " still, " + std::to_string(int(kSaveLockWaitSeconds)) +
                 " s after the job before ended (a rank of it on a host that stopped without dying, which could "
                 "yet write there)";
        if (!said) std::fprintf(stderr, "lattice launch: waiting for the job before to let go of it: %s\n", e.what());
      } catch (const InputError&) {
        return "";  // another cause: train will name it
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
};

// Whether `program` runs here: a path to an executable file, or a name found so on PATH.
bool runnable(const std::string& program) {
  if (program.empty()) return false;
  const auto executable = [](const std::string& file) {
    struct stat st {};
    return ::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(file.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) return executable(program);
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && executable(d + "/" + program)) return true;
  return false;
}

// localhost answers; another host answers when its remote agent (mpirun's plm_rsh_agent, else
// ssh) runs `true` there within the probe timeout.
bool host_answers(const Host& host, double timeout, const std::vector<std::string>& mpi_args) {
  if (launch::is_local_host(host.name, this_hostname())) return true;
  // The agent mpirun will use: the first of its alternatives that runs here.
  std::vector<std::string> argv = {"ssh"};
  for (const std::vector<std::string>& agent : launch::remote_agents(mpi_args, std::getenv("OMPI_MCA_plm_rsh_agent")))
    if (runnable(agent[0])) {
      argv = agent;
      break;
    }
  if (std::filesystem::path(argv[0]).filename() == "ssh")
    argv.insert(argv.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=" + std::to_string(int(timeout))});
  argv.insert(argv.end(), {host.name, "true"});
  const pid_t pid = spawn_tied_child(argv, -1, -1, "lattice launch");
  if (pid < 0) return false;
  const std::optional<int> status = wait_for(pid, timeout, /*interruptible=*/true);
  if (!status) {
    kill(-pid, SIGKILL);
    wait_for(pid, 5);
    return false;
  }
  return *status == 0;
}


// The first MiB of `path` (empty: none, or unreadable).
std::string file_head(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text(size_t(1) << 20, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(std::max<std::streamsize>(0, in.gcount())));
  return text;
}

// trainer.json of the checkpoint in `dir` as bytes (empty: none): what tells one promoted checkpoint
// from another (its step, losses and settings).
std::string checkpoint_identity(const std::string& dir) { return file_head(dir + "/trainer.json"); }

// The step of the checkpoint in `dir` promoted since the launch began (its trainer.json is not the one
// found then): nullopt when this run has saved none, so that a restart never resumes from an older
// run's checkpoint that --save named.
std::optional<int64_t> checkpoint_step(const std::string& dir, const std::string& found_at_start) {
  const std::string text = checkpoint_identity(dir);
  if (text.empty() || text == found_at_start) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) return j["step"].get<int64_t>();
  return std::nullopt;
}

// The checkpoint manifest in `dir` as bytes (empty: none): a save of this launch's changes it.
std::string manifest_identity(const std::string& dir) { return file_head(dir + "/" + kCheckpointManifest); }

// A checkpoint this launch promoted in `dir` (its manifest is not the one found then) whose
// trainer.json gives no step: damaged, which the relaunch's train names when it resumes it.
bool checkpoint_unreadable(const std::string& dir, const std::string& manifest_at_start) {
  const std::string manifest = manifest_identity(dir);
  return !manifest.empty() && manifest != manifest_at_start && !checkpoint_step(dir, "").has_value();
}

constexpr const char* kUsage =
    "usage: lattice launch --hostfile H [--min-ranks N] [--max-restarts K] [--no-progress-timeout S] -- train "
    "<the run's flags, with --save DIR>";

}  // namespace

int run_launch(int argc, char** argv) {
  // Split at "--": launch's own flags before, train's after.
  int dash = 1;
  while (dash < argc && std::string(argv[dash]) != "--") ++dash;
  LaunchFlags f;
  if (const char* env = std::getenv("MPIEXEC"); env && *env) f.mpirun = env;
  CLI::App app("Run a training job under mpirun and restart it, on the hosts that still answer, when a rank is "
               "lost (docs/recovery.md). " + std::string(kUsage),
               "lattice launch");
  app.add_option("--hostfile", f.hostfile, "OpenMPI hostfile: NAME slots=N a line")->required();
  app.add_option("--min-ranks", f.min_ranks, "stop rather than restart on fewer slots")->capture_default_str();
  app.add_option("--max-restarts", f.max_restarts, "restarts at most")->capture_default_str();
  app.add_option("--no-progress-timeout", f.no_progress_timeout,
                 "seconds without an output line before the job is ended as lost (0 = off)")
      ->capture_default_str();
  app.add_option("--probe-timeout", f.probe_timeout, "seconds a host has to answer the remote agent")
      ->capture_default_str();
  app.add_option("--mpirun", f.mpirun, "the launcher to run (default: $MPIEXEC or mpirun)");
  app.add_option("--mpi-arg", f.mpi_args, "one more argument for mpirun (repeatable: --mpi-arg=--oversubscribe)")
      ->allow_extra_args(false);
  app.add_option("--hardware", f.hardware, "the machine the planner plans restarts for (a preset)")->capture_default_str();
  if (const auto status = parse_flags(app, dash, argv)) return *status;
  if (dash >= argc - 1 || std::string(argv[dash + 1]) != "train") {
    std::fprintf(stderr, "lattice launch: error: %s\n", kUsage);
    return 2;
  }

  // Train's flags, read by train's own parser (the same checks, the same messages).
  const int train_argc = argc - dash - 1;
  char** train_argv = argv + dash + 1;
  std::vector<std::string> train_args(train_argv + 1, train_argv + train_argc);
  CLI::App tapp("lattice train's flags", "lattice train");
  ModelConfig model;
  LayoutFlags layout;
  TrainConfig train;
  std::string shuffle = "on", device = "cpu", hardware = "cpu", memory_limit, config_path;
  bool dump = false;
  add_model_flags(tapp, model);
  add_layout_flags(tapp, layout);
  add_train_flags(tapp, train, shuffle);
  add_device_flag(tapp, device);
  tapp.add_option("--hardware", hardware);
  tapp.add_option("--pipeline-memory-limit", memory_limit);
  add_config_file(tapp, config_path);
  tapp.add_flag("--dump-config", dump);
  if (const auto status = parse_flags(tapp, train_argc, train_argv)) return *status;
  // Train's settings printed as train prints them (as --help shows train's flags): no job starts.
  if (dump) return run_train(train_argc, train_argv);
  if (train.save.empty()) {
    std::fprintf(stderr, "lattice launch: error: the train flags must include --save DIR: a restart resumes from its "
                         "last promoted checkpoint\n");
    return 2;
  }
  // What launch reads of --resume's (or --init's) checkpoint before the first job is of one version,
  // should a run be saving into it (core/pinned_path.hpp); let go before any job starts.
  std::optional<PinnedPath> pinned_checkpoint(std::in_place, train.resume.empty() ? train.init : train.resume);
  take_resumed_settings(tapp, train);  // a resumed run's batch, which restarts keep
  bool vocab_taken = false;  // and its model, which restarts plan for
  const bool resuming = !train.resume.empty();
  for (const auto& [flag, value] :
       take_checkpoint_model(tapp, model, resuming ? train.resume : train.init,
                             resuming ? CheckpointModel::resume : CheckpointModel::init, !data::has_tokenizer(train.data_dir)))
    vocab_taken = vocab_taken || flag == "vocab";
  require(f.min_ranks >= 1 && f.max_restarts >= 0 && f.no_progress_timeout >= 0 && f.probe_timeout > 0,
          "--min-ranks must be at least 1, --max-restarts and --no-progress-timeout at least 0, --probe-timeout above 0");
  const std::vector<Host> hosts = launch::parse_hostfile(
      read_regular_file(f.hostfile, "--hostfile", size_t(1) << 20), f.hostfile, this_hostname());
  require(launch::total_slots(hosts) >= f.min_ranks,
          "the hostfile's " + std::to_string(launch::total_slots(hosts)) + " slot(s) are fewer than --min-ranks " +
              std::to_string(f.min_ranks));
  // A relaunch replaces the layout flags (and --init by its resume) on the command line, where they
  // win over a --config file; set there instead, a value the relaunch leaves out (SP, ZeRO, the
  // recompute, --init) would stay beside the new layout's. The sizes and the batch it always gives.
  for (const CLI::Option* opt : tapp.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    bool replaced = false, typed = false;
    for (const std::string& name : opt->get_lnames()) {
      // A schedule of pipelines only is dropped where the relaunch has one stage.
      replaced = replaced ||
                 (launch::replaced_on_relaunch("--" + name) && !launch::restated_on_relaunch("--" + name)) ||
                 (name == "schedule" && (train.schedule == "interleaved" || train.schedule == "zb-h1"));
      typed = typed || std::any_of(train_args.begin(), train_args.end(), [&](const std::string& a) {
                return a == "--" + name || a.rfind("--" + name + "=", 0) == 0;
              });
    }
    require(!replaced || typed, "--" + opt->get_lnames().front() + " set by --config " + config_path +
                                    ": under launch give it on the command line, where a restart replaces it "
                                    "(with the new layout's, or with the resume)");
  }
  // The mpirun options the launcher owns, by why: the ranks and hosts (an -np of mpi-arg's won over the
  // launcher's, and restarts were planned for slots the job did not use); the job's output, which it
  // reads line by line (steps, lost ranks, --json passed through as JSON); where the ranks go (a lost
  // rank's host is the one whose slots hold its number, in the hostfile's order, as mpirun places
  // ranks by slot, its default: --ppr or --pernode would put rank 1 on the second host, and a
  // healthy host could be dropped for good).
  const std::pair<std::vector<const char*>, const char*> owned[] = {
      {{"-np", "--np", "-n", "--n", "-c", "-N", "--npernode", "-npernode", "--hostfile", "-hostfile", "--machinefile",
        "-machinefile", "--default-hostfile", "--host", "-host", "-H", "--rankfile", "-rf"},
       "the launcher sets the ranks and hosts itself (from --hostfile)"},
      {{"--tag-output", "-tag-output", "--timestamp-output", "-timestamp-output", "--xml", "-xml", "--output-filename",
        "-output-filename", "--merge-stderr-to-stdout", "-merge-stderr-to-stdout", "--output", "-output", "--xterm",
        "-xterm", "-q", "--quiet", "-quiet"},
       "the launcher reads the job's output line by line as the ranks write it (and mpirun's notice of a rank's end)"},
      {{"--ppr", "-ppr", "--npersocket", "-npersocket", "--pernode", "-pernode"},
       "the launcher finds a lost rank's host by the hostfile's slot order, as mpirun places ranks by slot"}};
  for (const std::string& arg : f.mpi_args)
    for (const auto& [names, why] : owned)
      for (const char* own : names)
        require(arg != own && arg.rfind(std::string(own) + "=", 0) != 0, "--mpi-arg " + arg + ": " + why);
  // The placement flags that take a value: slot and core place as mpirun's default does.
  for (size_t i = 0; i < f.mpi_args.size(); ++i) {
    const std::string& arg = f.mpi_args[i];
    for (const char* own : {"--map-by", "-map-by", "--rank-by", "-rank-by"}) {
      const std::string name = own;
      const bool inline_value = arg.rfind(name + "=", 0) == 0;
      if (arg != name && !inline_value) continue;
      const std::string value = inline_value ? arg.substr(name.size() + 1) : i + 1 < f.mpi_args.size() ? f.mpi_args[i + 1] : "";
      require(value.rfind("slot", 0) == 0 || value.rfind("core", 0) == 0,
              "--mpi-arg " + name + " " + value + ": the launcher finds a lost rank's host by the hostfile's slot "
              "order, as mpirun places ranks by slot (" + name + " slot or core only)");
    }
  }
  // The same set as MCA parameters (--mca orte_tag_output 1, or OMPI_MCA_orte_tag_output in the environment).
  const auto output_parameter = [](const std::string& text) {
    for (const char* key : {"tag_output", "timestamp_output", "output_filename", "xml_output", "xterm"})
      if (text.find(key) != std::string::npos) return true;
    return false;
  };
  for (const std::string& arg : f.mpi_args)
    require(!output_parameter(arg), "--mpi-arg " + arg + ": the launcher reads the job's output line by line as the "
                                    "ranks write it");
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    require(var.rfind("OMPI_MCA_", 0) != 0 || !output_parameter(var.substr(0, var.find('='))),
            var.substr(0, var.find('=')) + " (environment): the launcher reads the job's output line by line as the "
                                           "ranks write it; unset it");
  }
  // And the placement as MCA parameters (--mca rmaps_base_mapping_policy node, or OMPI_MCA_... in the
  // environment, as a site's module may set it): a mapping or ranking policy of slot or core only, as
  // --map-by; a per-node count or a rankfile not at all.
  const auto placement_refusal = [](const std::string& key, const std::string& value) -> std::string {
    // OpenMPI 4's names and PRRTE's (OpenMPI 5: rmaps_default_...).
    for (const char* policy : {"rmaps_base_mapping_policy", "rmaps_base_ranking_policy", "rmaps_default_mapping_policy",
                               "rmaps_default_ranking_policy"})
      if (key == policy && value.rfind("slot", 0) != 0 && value.rfind("core", 0) != 0)
        return key + " '" + value + "': slot or core only";
    if (key == "rmaps" && value != "round_robin") return "rmaps '" + value + "'";  // seq, ppr, rank_file, ...
    for (const char* count : {"n_pernode", "n_persocket", "ppr", "rank_file", "rankfile"})
      if (key.rfind("rmaps_", 0) == 0 && key.find(count) != std::string::npos) return key;
    return "";
  };
  const std::string placement_why =
      ": the launcher finds a lost rank's host by the hostfile's slot order, as mpirun places ranks by slot";
  for (size_t i = 0; i < f.mpi_args.size(); ++i) {
    const std::string why = placement_refusal(f.mpi_args[i], i + 1 < f.mpi_args.size() ? f.mpi_args[i + 1] : "");
    require(why.empty(), "--mpi-arg " + why + placement_why);
  }
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    for (const std::string prefix : {"OMPI_MCA_", "PRTE_MCA_"}) {
      if (var.rfind(prefix, 0) != 0) continue;
      const size_t eq = var.find('=');
      const std::string key = var.substr(prefix.size(), eq - prefix.size());
      const std::string why = placement_refusal(key, eq == std::string::npos ? "" : var.substr(eq + 1));
      require(why.empty(), prefix + why + " (environment)" + placement_why + "; unset it");
    }
  }
  require(runnable(f.mpirun), "--mpirun " + f.mpirun + " (or $MPIEXEC) is not a program this machine can run");
  f.save = train.save;
  if (tapp.count("--vocab") == 0 && !vocab_taken) model.vocab = data::load_tokenizer(train.data_dir).vocab();
  // Another model is refused here, as the job would refuse it, before any rank starts (a --resume that
  // holds no checkpoint yet is the job's to name).
  if (checkpoint::holds_trainer_state(train.resume)) {
    const std::string other_model = resumed_model_difference(checkpoint::read_model_config(train.resume), model,
                                                             train.resume, tapp.count("--vocab") > 0);
    require(other_model.empty(), other_model);
  } else if (!train.init.empty() && train.resume.empty()) {
    checkpoint::weights_file(train.init, model);  // its shape against the flags (a lattice checkpoint's)
  }
  const LayoutConfig resolved = layout.resolve(model.layers);
  const int world = launch::total_slots(hosts);
  const launch::Layout first = launch::layout_of(resolved, train.micro_batch, world);
  {  // a resumed MoE run on more data-parallel ranks asks for --micro-batch: here, not from every rank
    TrainConfig probe = train;
    fit_resumed_micro_batch(probe, first.dp, model);
  }
  const int global_batch = train.global_batch > 0 ? train.global_batch : train.micro_batch * first.dp;
  const plan::Hardware hw = plan::hardware_preset(f.hardware);
  pinned_checkpoint.reset();

  std::string report_log;
  if (!train.report_dir.empty()) report_log = train.report_dir + "/run.jsonl";
  MpirunLauncher launcher(f, train.json, report_log);

  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Every host of the hostfile answers before the first job (as a restart asks): one that does not
  // is named here, not left to mpirun's pages about an unreachable daemon.
  std::vector<std::string> silent;
  for (const Host& h : hosts) {
    if (g_signal != 0) break;
    if (!launch::is_local_host(h.name, this_hostname()) && !host_answers(h, f.probe_timeout, f.mpi_args))
      silent.push_back(h.name);
  }
  if (g_signal != 0) {
    std::fprintf(stderr, "lattice launch: interrupted (%s) while the hosts were asked; no job was started\n",
                 strsignal(g_signal));
    return 128 + g_signal;
  }
  if (!silent.empty()) {
    std::string names;
    for (const std::string& n : silent) names += (names.empty() ? "" : ", ") + n;
    fail("host(s) " + names + " of " + f.hostfile + " do not answer the remote agent within --probe-timeout " +
         std::to_string(int(f.probe_timeout)) + " s");
  }

  launch::Environment env;
  env.answers = [&](const Host& h) { return host_answers(h, f.probe_timeout, f.mpi_args); };
  env.local = [](const Host& h) { return launch::is_local_host(h.name, this_hostname()); };
  const std::string found_at_start = checkpoint_identity(train.save);
  env.checkpoint_step = [&] { return checkpoint_step(train.save, found_at_start); };
  const std::string manifest_at_start = manifest_identity(train.save);
  env.checkpoint_unreadable = [&] { return checkpoint_unreadable(train.save, manifest_at_start); };
  env.plan = [&](int ranks, int slots_per_host) {
    plan::PlanRequest base;
    base.model = model;
    base.layout = resolved;
    base.micro_batch = train.micro_batch;
    base.global_batch = global_batch;
    base.save = true;
    base.threads = train.threads > 0 ? train.threads : 1;
    base.offload_optimizer = !train.optim.offload_dir.empty();
    base.offload_params = train.optim.offload_params;
    base.gpu_memory = int64_t(physical_memory_bytes() / std::max(1, slots_per_host));
    return launch::choose_layout(base, hw, ranks, slots_per_host);
  };
  env.now = now_s;
  env.report_written = [&] { return launcher.report_written(); };
  env.interrupted = [] { return int(g_signal); };
  env.say = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  env.event = [&](const nlohmann::json& event) {
    launcher.emit(event);
    if (event.value("event", "") == "restart") launcher.restarted(launcher.last_progress());
  };
  launch::Options options;
  options.min_ranks = f.min_ranks;
  options.max_restarts = f.max_restarts;
  options.save_dir = train.save;
  if (!train.resume.empty()) options.own_resume_step = checkpoint_step(train.resume, "").value_or(0);

  const int status = launch::supervise(hosts, train_args, first, global_batch, options, launcher, env);
  // Done means the run's last checkpoint is there, written by this launch: an "mpirun" that exits 0
  // without training (an --mpi-arg that made it print and stop) is not a finished run, whatever an
  // older run left in --save. A run resumed from --save itself at its last step was finished already.
  std::error_code same_error;
  const bool same = !train.resume.empty() && std::filesystem::equivalent(train.resume, train.save, same_error);
  const bool resumed_finished = same && checkpoint_step(train.save, "") == train.steps;
  const std::optional<int64_t> reached =
      resumed_finished ? checkpoint_step(train.save, "") : checkpoint_step(train.save, found_at_start);
  if (status == 0 && g_signal == 0 && reached != train.steps) {
    std::fprintf(stderr, "lattice launch: error: the job exited 0, but %s holds %s, not step %lld (--steps): the run "
                 "did not finish\n", train.save.c_str(),
                 reached               ? ("step " + std::to_string(*reached)).c_str()
                 : found_at_start.empty() ? "no checkpoint"
                 : same                   ? "only the checkpoint the run resumed from"
                                          : "no checkpoint of this launch (an older run's)",
                 static_cast<long long>(train.steps));
    return 1;
  }
  return status;
}

}  // namespace lattice::cli
