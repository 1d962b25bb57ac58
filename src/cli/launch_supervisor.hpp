#pragma once
// `lattice launch`'s decisions, apart from the processes it starts (docs/recovery.md): the hostfile,
// what a finished job means (done, bad input, a lost rank), which hosts the next job gets, the
// layout the planner chooses for them, the train flags that carry it, where the run resumes from,
// and when to stop. The loop `supervise` runs a Launcher and asks an Environment (hosts that answer,
// the checkpoint's step, the clock), so tests drive it with fakes (tests/unit/test_launch.cpp); the
// real ones, which fork mpirun, are in launch_cmd.cpp.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "plan/hardware.hpp"
#include "plan/plan_request.hpp"

namespace lattice::cli::launch {

// Exit statuses of `lattice launch`: the job's own 0/1/2, 3 when ranks were lost and the run could
// not go on (fewer than --min-ranks, --max-restarts reached, no layout fits, --save still locked by
// a rank of the job before), 130/143 interrupted.
inline constexpr int kExitRankLost = 3;
// A restart whose slots no layout fits tries this many rank counts at most, every slot first.
inline constexpr int kFewerRanksTried = 8;

struct Host {
  std::string name;
  int slots = 1;
};

// An OpenMPI hostfile: "NAME [slots=N] [max_slots=M]" a line, '#' comments, blank lines. Throws
// InputError "PATH:LINE: ..." for anything else (an unknown key, a key given twice, a bad count, a
// host twice, two names of this machine (`this_hostname`, as is_local_host), none).
std::vector<Host> parse_hostfile(const std::string& text, const std::string& path,
                                 const std::string& this_hostname = "");
std::string hostfile_text(const std::vector<Host>& hosts);
int total_slots(const std::vector<Host>& hosts);
// The host that runs world rank `rank` under mpirun's default mapping (by slot, hosts in order).
std::string host_of_rank(const std::vector<Host>& hosts, int rank);
// localhost, 127.x, ::1, or this machine's own name (in any case): answers without the remote agent.
bool is_local_host(const std::string& name, const std::string& this_hostname);
// The remote agents mpirun would try, in its order (OpenMPI's plm_rsh_agent: a ':'-separated list of
// commands, the first found on PATH used): `--mca plm_rsh_agent A` among `mpi_args`, else `env_agent`
// ($OMPI_MCA_plm_rsh_agent), else "ssh : rsh". Each as its words.
std::vector<std::vector<std::string>> remote_agents(const std::vector<std::string>& mpi_args, const char* env_agent);

// What one job (one mpirun) did, as its launcher saw it.
struct JobResult {
  int exit_status = 0;                   // mpirun's: 0, 1, 2, 3, or 128 + the signal that ended a rank
  bool no_progress = false;              // the launcher's own timeout ended it (no output line for N s)
  bool interrupted = false;              // SIGINT/SIGTERM/SIGHUP reached the launcher and was forwarded
  int interrupt_signal = 0;              // which (0: none)
  int crash_signal = 0;                  // a rank ended by SIGSEGV, SIGABRT, SIGBUS, SIGFPE or SIGILL
  int crashed_rank = -1;                 // (mpirun's line): lattice's own crash, never restarted
  std::vector<int> ranks_reporting_lost;  // ranks that said rank_lost (watchdog, MPI error)
  std::vector<std::string> hosts_died;   // hosts where a rank was ended by a signal (mpirun's line)
  int64_t last_step = 0;                 // the highest step the job reported (0: none)
  bool refused = false;                  // train said why in its own line ("lattice train: error:")
  double seconds_since_progress = 0;     // from its last step line (or its start) to its end
  bool relaunched = false;               // a restart's job, not the launch's first
  // --save's lock still held by a rank of the job before when the next would start (a process on a
  // host that stopped without dying, which could yet write there): why, in words. Empty: let go.
  std::string save_locked_by;
};

// What a finished job means. A lost rank is a stall or death (exit 3, a rank_lost line, a rank ended
// by SIGKILL/SIGTERM/SIGHUP, the no-progress timeout), or mpirun's own failure (a status no lattice
// rank exits with: 255 when a daemon could not start or a rank's MPI library aborted on a broken link)
// in a relaunch or after the job trained; any other non-zero exit is the run's own failure (1: bad
// input, 2: usage), never restarted, and so is a rank's crash (a crash signal in mpirun's line),
// whatever the other ranks said after it.
enum class Verdict { completed, failed, lost, interrupted };

// A job with a lost or killed rank has not ended this many seconds after the first such line: the
// launcher ends it. mpirun ends a job within a second or two of a rank's non-zero exit, but waits on a
// daemon whose host stopped answering for as long as TCP does (many minutes), and the job cannot
// complete without that rank; --no-progress-timeout (600 s by default) would wait that long past the
// job's last line.
inline constexpr double kLostJobGraceSeconds = 10;
Verdict classify(const JobResult& job);
// An exit status of mpirun's own: none of lattice's 0 to 3, nor 128 + a signal.
bool mpirun_own_status(int exit_status);
const char* verdict_name(Verdict v);

// Readers of the job's output lines, for the launcher to fill a JobResult as lines pass.
// A JSON step record ({"event":"step", "step":N, ...}, keys in any order) or a text "step N ..." line.
std::optional<int64_t> step_in_line(const std::string& line);
// {"event":"rank_lost","rank":N,...} or "lattice: rank N: ...; stopping (exit 3: rank lost)".
std::optional<int> lost_rank_in_line(const std::string& line);
// "mpirun noticed that process rank N with PID P on node NAME exited on signal S": N, S and NAME (the
// hostfile's name for the host, or the daemon's own hostname, by OpenMPI's version and setup:
// host_of_died_rank takes it where it names a hostfile host, else maps N by slot order).
struct DiedRank {
  int rank = 0, signal = 0;
  std::string node;  // as mpirun names it
};
// The host a dead rank ran on: the hostfile's host mpirun's line names (in any case), else the one
// whose slots hold its number (mpirun's default placement).
std::string host_of_died_rank(const std::vector<Host>& hosts, const DiedRank& died);
std::optional<DiedRank> died_rank_in_line(const std::string& line);
// SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL: a process's own fault, not a lost host or an operator.
bool is_crash_signal(int signal);

// A layout the launcher can pass to train: the planner's choice, as flags.
struct Layout {
  int tp = 1, pp = 1, dp = 1, world = 1;
  int ep = 1;                                  // expert-parallel size (MoE; divides dp)
  int micro_batch = 1, zero = 0;
  bool sequence_parallel = false;
  std::vector<int> stage_layers;               // empty: even stages
  Recompute recompute = Recompute::none;
  int recompute_layers = -1;                   // full: each stage's first N layers (-1: all)
  std::vector<LayerRecompute> recompute_plan;  // per layer, when the planner chose one
  double predicted_step_s = 0;                 // the planner's iteration time (0: not planned)

  std::string describe() const;                // "TP 2 × DP 2 (4 ranks, micro-batch 2)"
  std::vector<std::string> flags() const;      // the train flags that give it
  nlohmann::json to_json() const;
};

// The layout the run was started with: its flags over `world` ranks.
Layout layout_of(const LayoutConfig& layout, int micro_batch, int world);

// The planner's fastest layout (`plan --search`, plan/search.hpp) of `base`'s model and global batch
// on `world` ranks of `hw`, at most `slots_per_host` ranks a host holding a TP group (TP stays inside
// a host), each within `base.gpu_memory` bytes. Only layouts train takes as flags are chosen (one
// virtual stage). Throws InputError when none fits.
Layout choose_layout(plan::PlanRequest base, plan::Hardware hw, int world, int slots_per_host);

// Whether a relaunch takes `flag` ("--zero") out of the train flags and gives its own: the layout
// flags and --init (whose run the relaunch resumes); not --resume, which it gives only once a
// checkpoint is saved.
bool replaced_on_relaunch(const std::string& flag);
// Of those, the ones every relaunch gives again (the sizes and the batch): a --config file's value
// of them is overridden by the command line's, never left beside the new layout.
bool restated_on_relaunch(const std::string& flag);

// The train flags of a relaunch: `args` without the flags that set a layout (tensor/pipeline sizes,
// virtual stages, pipeline layers, sequence parallelism, ZeRO, micro-batch, recompute), a schedule
// of virtual stages or of one stage's ranks only, nor a previous --resume/--init; then the layout's
// flags, --global-batch, --continue-report when `continue_report` (the job wrote the run's
// --report-dir log: the relaunch goes on with it), and --resume `resume_dir` when not empty, else
// the run's own --init/--resume (no checkpoint to resume from yet).
std::vector<std::string> relaunch_args(const std::vector<std::string>& args, const Layout& layout, int global_batch,
                                       const std::string& resume_dir, bool continue_report = false);

// The train flag's value in `args` ("--save DIR" or "--save=DIR"), the last one given; nullopt if absent.
std::optional<std::string> flag_value(const std::vector<std::string>& args, const std::vector<std::string>& names);

struct Options {
  int min_ranks = 1;
  int max_restarts = 3;
  std::string save_dir;  // train's --save: where the promoted checkpoint lives
  int64_t own_resume_step = 0;  // the step of the run's own --resume checkpoint (0: none)
};

// Starts one job: `args` are train's flags, run over `hosts` (their slots, `world` ranks in all).
class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual JobResult run(const std::vector<Host>& hosts, int world, const std::vector<std::string>& args) = 0;
};

struct Environment {
  std::function<bool(const Host&)> answers;                // the host answers (localhost: always)
  // The launcher's own machine: a rank killed there does not take the host out (it is up: the
  // launcher runs on it). Unset: no host is local.
  std::function<bool(const Host&)> local;
  std::function<std::optional<int64_t>()> checkpoint_step;  // the promoted checkpoint's step, if any
  // A checkpoint this launch promoted is in --save but its trainer.json cannot be read (damaged):
  // the relaunch resumes it anyway, so that train names the damage. Unset: never.
  std::function<bool()> checkpoint_unreadable;
  // The planner's layout for `world` ranks, at most `slots_per_host` a host (throws InputError).
  std::function<Layout(int world, int slots_per_host)> plan;
  std::function<double()> now;                             // seconds, monotonic
  std::function<void(const std::string& line)> say;         // one line on stderr
  std::function<void(const nlohmann::json& event)> event;   // the JSON stream (and the run log)
  // Whether the job wrote the run's --report-dir log, which the relaunch then continues. Unset: no.
  std::function<bool()> report_written;
  // The signal that interrupted the launcher, 0 if none: checked before each probe and launch, so an
  // interruption between jobs starts no other. Unset: never.
  std::function<int()> interrupted;
};

// The restart's record: one line and one event.
struct Restart {
  int number = 0, max_restarts = 0;
  std::string reason;                  // "rank died", "rank lost", "no progress", "mpirun failed (exit N)"
  std::vector<std::string> lost_hosts;  // died or no longer answering
  std::vector<std::string> hosts;       // the next job's
  Layout from, to;
  int64_t resume_step = 0;              // 0: from the start
  int64_t steps_redone = 0;
  double seconds_lost = 0;              // from the failed job's last step to the relaunch
  std::string resume_dir;               // empty: from step 0
  std::string own_start;                // with no checkpoint of this run's: its own --resume/--init, if any
  bool resume_unreadable = false;       // resume_dir's trainer.json cannot be read (the job says why)
  int idle_slots = 0;                   // slots answering that no layout could use (fewer ranks fit)
};
std::string restart_line(const Restart& r);
nlohmann::json restart_event(const Restart& r);

// Runs the job, and after each lost rank the next one, until it completes, fails on its own, or
// cannot go on (returns the exit status; every stop is one line through env.say).
int supervise(const std::vector<Host>& hosts, const std::vector<std::string>& train_args, const Layout& first,
              int global_batch, const Options& options, Launcher& launcher, const Environment& env);

}  // namespace lattice::cli::launch
