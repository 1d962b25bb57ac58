// `lattice launch`'s decisions (cli/launch_supervisor.hpp). Slightly past the usual length: every
// decision the header lists is here, and the unit tests drive each with fakes.
#include "cli/launch_supervisor.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/recompute_plan.hpp"
#include "core/stage_partition.hpp"
#include "plan/search.hpp"

namespace lattice::cli::launch {

namespace {

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// A whole number in [lo, hi], else nullopt.
std::optional<long long> whole(const std::string& text, long long lo, long long hi) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  for (char c : text)
    if (c < '0' || c > '9') return std::nullopt;
  const long long v = std::stoll(text);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

// A word of the hostfile as a message shows it: control bytes (a NUL cut the line) as \xNN, at most
// 80 bytes.
std::string printable(const std::string& word) {
  std::string out;
  for (size_t i = 0; i < word.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    if (c >= 0x20 && c != 0x7f) {
      out += char(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return word.size() > 80 ? out + "..." : out;
}

std::string joined(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

}  // namespace

std::vector<Host> parse_hostfile(const std::string& text, const std::string& path, const std::string& this_hostname) {
  std::vector<Host> hosts;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trimmed(line);
    if (line.empty()) continue;
    std::istringstream words(line);
    Host host;
    words >> host.name;
    // A host's name or address (user@ as mpirun takes it), never an option: the remote agent is
    // given it as an argument, and "-oProxyCommand=..." would be one of ssh's.
    const bool name_ok = (std::isalnum(static_cast<unsigned char>(host.name[0])) || host.name[0] == ':') &&
                         std::all_of(host.name.begin(), host.name.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) ||
                                  (c != '\0' && std::strchr("._:@%-", c) != nullptr);
                         });
    if (!name_ok)
      throw InputError(where + "'" + printable(host.name) +
                       "' is not a host name or address (letters, digits and . _ : @ % -, starting with a letter, "
                       "a digit or ':')");
    bool slots_given = false, max_given = false;
    int max_slots = 0;
    for (std::string word; words >> word;) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
      if (key != "slots" && key != "max_slots" && key != "max-slots")
        throw InputError(where + "'" + printable(word) + "' is not slots=N or max_slots=N");
      bool& given = key == "slots" ? slots_given : max_given;
      if (given) throw InputError(where + key + " is given twice");  // mpirun would take one, silently
      given = true;
      const auto n = whole(value, 1, 1 << 20);
      if (!n) throw InputError(where + key + " must be a whole number from 1 to 1048576 (got '" + printable(value) + "')");
      if (key == "slots") host.slots = int(*n);
      else max_slots = int(*n);
    }
    if (max_given && slots_given && max_slots < host.slots)  // in either order on the line
      throw InputError(where + "max_slots " + std::to_string(max_slots) + " is below slots " + std::to_string(host.slots));
    for (const Host& h : hosts) {
      if (h.name == host.name) throw InputError(where + "host '" + host.name + "' is listed twice");
      if (is_local_host(h.name, this_hostname) && is_local_host(host.name, this_hostname))
        throw InputError(where + "'" + host.name + "' and '" + h.name +
                         "' both name this machine (mpirun refuses two slot counts for one node): list it once");
    }
    hosts.push_back(host);
  }
  if (hosts.empty()) throw InputError(path + ": the hostfile lists no host");
  return hosts;
}

std::string hostfile_text(const std::vector<Host>& hosts) {
  std::string out;
  for (const Host& h : hosts) out += h.name + " slots=" + std::to_string(h.slots) + "\n";
  return out;
}

int total_slots(const std::vector<Host>& hosts) {
  int n = 0;
  for (const Host& h : hosts) n += h.slots;
  return n;
}

std::string host_of_rank(const std::vector<Host>& hosts, int rank) {
  for (const Host& h : hosts) {
    if (rank < h.slots) return h.name;
    rank -= h.slots;
  }
  return "";
}

namespace {
// Host names are case-insensitive (LOCALHOST is this machine too): compared lowered.
std::string lowercase(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

bool is_local_host(const std::string& name, const std::string& this_hostname) {
  const std::string n = lowercase(name);
  return n == "localhost" || n == "::1" || n.rfind("127.", 0) == 0 ||
         (!this_hostname.empty() && n == lowercase(this_hostname));
}

std::vector<std::vector<std::string>> remote_agents(const std::vector<std::string>& mpi_args, const char* env_agent) {
  // mpirun's own order: the MCA parameter on its command line, then the environment's, then its default.
  std::string agent = env_agent && *env_agent ? env_agent : "ssh : rsh";
  for (size_t i = 0; i + 2 < mpi_args.size(); ++i)
    if ((mpi_args[i] == "--mca" || mpi_args[i] == "-mca") && mpi_args[i + 1] == "plm_rsh_agent") agent = mpi_args[i + 2];
  std::vector<std::vector<std::string>> out;
  std::istringstream alternatives(agent);
  for (std::string alternative; std::getline(alternatives, alternative, ':');) {
    std::istringstream words(alternative);
    std::vector<std::string> argv;
    for (std::string w; words >> w;) argv.push_back(w);
    if (!argv.empty()) out.push_back(argv);
  }
  return out;
}

bool is_crash_signal(int signal) {
  return signal == SIGSEGV || signal == SIGABRT || signal == SIGBUS || signal == SIGFPE || signal == SIGILL;
}

Verdict classify(const JobResult& job) {
  if (job.interrupted) return Verdict::interrupted;
  // A rank's own crash (mpirun's line names it): the survivors' rank_lost lines and exit 3 follow
  // from it, and a relaunch would crash again (docs/recovery.md: passed on, never restarted). Only
  // the line counts: mpirun's own status can be a crash of mpirun itself, in its teardown after the
  // launcher ended a hung job.
  if (job.crash_signal != 0) return Verdict::failed;
  if (job.exit_status == 0 && !job.no_progress) return Verdict::completed;
  if (job.no_progress || !job.ranks_reporting_lost.empty() || !job.hosts_died.empty()) return Verdict::lost;
  if (job.exit_status == kExitRankLost) return Verdict::lost;
  // mpirun's own failure: in a relaunch (its daemon on a host that answers the probe but cannot take
  // the job, a link cut one way) or after steps, a lost host the next probe may find, and bounded by
  // --max-restarts; before the first job's first step, passed on (an mpirun or --mpi-arg that fails).
  if (mpirun_own_status(job.exit_status) && !job.refused && (job.relaunched || job.last_step > 0))
    return Verdict::lost;
  // A rank ended by a signal a lost host or an operator sends (not a crash of lattice itself).
  if (job.exit_status == 128 + SIGKILL || job.exit_status == 128 + SIGTERM || job.exit_status == 128 + SIGHUP)
    return Verdict::lost;
  return Verdict::failed;
}

bool mpirun_own_status(int exit_status) {
  return exit_status != 0 && !(exit_status >= 1 && exit_status <= kExitRankLost) &&
         !(exit_status > 128 && exit_status <= 128 + 64);
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::completed: return "completed";
    case Verdict::failed: return "failed";
    case Verdict::lost: return "lost";
    case Verdict::interrupted: return "interrupted";
  }
  return "?";
}

std::optional<int64_t> step_in_line(const std::string& line) {
  // The JSON stream's keys come in any order (train writes them sorted).
  static const std::regex step_key(R"("step":([0-9]{1,15})[,}])");
  static const std::regex text(R"(^step +([0-9]{1,15})\b)");
  std::smatch m;
  if (!line.empty() && line[0] == '{') {
    if (line.find(R"("event":"step")") != std::string::npos && std::regex_search(line, m, step_key))
      return std::stoll(m[1].str());
    return std::nullopt;
  }
  if (std::regex_search(line, m, text)) return std::stoll(m[1].str());
  return std::nullopt;
}

std::optional<int> lost_rank_in_line(const std::string& line) {
  static const std::regex rank_key(R"("rank":([0-9]{1,9})[,}])");
  static const std::regex text(R"(^lattice: rank ([0-9]{1,9}): .*\(exit 3: rank lost\)$)");
  std::smatch m;
  if (!line.empty() && line[0] == '{') {
    if (line.find(R"("event":"rank_lost")") != std::string::npos && std::regex_search(line, m, rank_key))
      return std::stoi(m[1].str());
    return std::nullopt;
  }
  if (std::regex_search(line, m, text)) return std::stoi(m[1].str());
  return std::nullopt;
}

std::optional<DiedRank> died_rank_in_line(const std::string& line) {
  static const std::regex noticed(
      R"(mpirun noticed that process rank ([0-9]{1,9}) with PID [0-9]+ on node (\S+) exited on signal ([0-9]{1,3}))");
  std::smatch m;
  if (std::regex_search(line, m, noticed))
    return DiedRank{std::stoi(m[1].str()), std::stoi(m[3].str()), m[2].str()};
  return std::nullopt;
}

std::string host_of_died_rank(const std::vector<Host>& hosts, const DiedRank& died) {
  // mpirun names the node as the hostfile does (an MCA mapping policy the launcher did not see may
  // have put the rank elsewhere than its slot order says).
  for (const Host& h : hosts)
    if (lowercase(h.name) == lowercase(died.node)) return h.name;
  return host_of_rank(hosts, died.rank);
}

std::string Layout::describe() const {
  std::vector<std::string> parts;
  if (tp > 1) parts.push_back("TP " + std::to_string(tp));
  if (pp > 1) parts.push_back("PP " + std::to_string(pp));
  parts.push_back("DP " + std::to_string(dp));
  if (ep > 1) parts.push_back("EP " + std::to_string(ep));
  std::string out = joined(parts, " × ") + " (" + std::to_string(world) + (world == 1 ? " rank" : " ranks") +
                    ", micro-batch " + std::to_string(micro_batch);
  if (sequence_parallel) out += ", SP";
  if (zero > 0) out += ", ZeRO-" + std::to_string(zero);
  if (!recompute_plan.empty() && recompute_plan_text(recompute_plan).find_first_not_of('n') != std::string::npos)
    out += ", recompute " + recompute_plan_text(recompute_plan);
  else if (recompute_plan.empty() && recompute != Recompute::none)
    out += std::string(", recompute ") + to_string(recompute);
  if (!stage_layers.empty()) out += ", layers " + layer_counts_text(stage_layers);
  return out + ")";
}

std::vector<std::string> Layout::flags() const {
  std::vector<std::string> f = {"--tensor-model-parallel-size", std::to_string(tp), "--pipeline-model-parallel-size",
                                std::to_string(pp), "--micro-batch", std::to_string(micro_batch)};
  if (zero > 0) f.insert(f.end(), {"--zero", std::to_string(zero)});
  if (ep > 1) f.insert(f.end(), {"--expert-model-parallel-size", std::to_string(ep)});
  if (sequence_parallel) f.push_back("--sequence-parallel");
  if (!stage_layers.empty()) f.insert(f.end(), {"--pipeline-layers", layer_counts_text(stage_layers)});
  if (!recompute_plan.empty()) {
    f.insert(f.end(), {"--recompute-plan", recompute_plan_text(recompute_plan)});
  } else {
    f.insert(f.end(), {"--recompute", to_string(recompute)});
    if (recompute == Recompute::full && recompute_layers > 0)
      f.insert(f.end(), {"--recompute-method", "block", "--recompute-layers", std::to_string(recompute_layers)});
  }
  return f;
}

nlohmann::json Layout::to_json() const {
  nlohmann::json j{{"tp", tp}, {"pp", pp}, {"dp", dp}, {"world", world}, {"micro_batch", micro_batch},
                   {"zero", zero}, {"sequence_parallel", sequence_parallel}};
  if (ep > 1) j["ep"] = ep;
  if (predicted_step_s > 0) j["predicted_step_s"] = predicted_step_s;
  return j;
}

Layout layout_of(const LayoutConfig& layout, int micro_batch, int world) {
  Layout l;
  l.tp = layout.tp;
  l.pp = layout.pp;
  l.world = world;
  l.dp = std::max(1, world / std::max(1, layout.tp * layout.pp));
  l.ep = std::max(1, layout.ep);
  l.micro_batch = micro_batch;
  l.zero = layout.zero;
  l.sequence_parallel = layout.sequence_parallel;
  l.stage_layers = layout.stage_layers;
  l.recompute = layout.recompute;
  l.recompute_layers = layout.recompute_layers;
  l.recompute_plan = layout.recompute_plan;
  return l;
}

Layout choose_layout(plan::PlanRequest base, plan::Hardware hw, int world, int slots_per_host) {
  require(world >= 1, "no rank is left to run on");
  base.gpus = world;
  hw.devices_per_node = std::max(1, slots_per_host);
  const plan::SearchResult found = plan::search_layouts(base, hw, 1 << 20);
  for (const plan::Plan& p : found.best) {
    const LayoutConfig& l = p.request.layout;
    if (l.virtual_stages != 1 || l.cp != 1) continue;  // train's flags below carry one virtual stage, no CP
    if (slots_per_host % l.tp != 0) continue;           // a TP group must not straddle two hosts
    Layout out;
    out.tp = l.tp;
    out.pp = l.pp;
    out.dp = l.dp;
    out.ep = std::max(1, l.ep);
    out.world = world;
    out.micro_batch = p.request.micro_batch;
    out.zero = l.zero;
    out.sequence_parallel = l.sequence_parallel;
    out.stage_layers = l.stage_layers;
    out.recompute = l.recompute;
    out.recompute_layers = l.recompute_layers;
    out.recompute_plan = l.recompute_plan;
    out.predicted_step_s = p.time.iteration_s;
    return out;
  }
  throw InputError("no layout of the model and global batch " + std::to_string(base.global_batch) + " fits " +
                   std::to_string(world) + " rank(s) of " + std::to_string(base.gpu_memory >> 20) +
                   " MiB (the planner considered " + std::to_string(found.considered) + ")");
}

namespace {

// Train's flags that set the layout (with their aliases), and whether each takes a value.
struct FlagName {
  const char* name;
  bool value;
};
const FlagName kLayoutFlags[] = {
    {"--tensor-model-parallel-size", true}, {"--pipeline-model-parallel-size", true},
    {"--virtual-stages", true},             {"--virtual-pipeline-model-parallel-size", true},
    {"--pipeline-layers", true},            {"--decoder-first-pipeline-num-layers", true},
    {"--decoder-last-pipeline-num-layers", true},
    {"--sequence-parallel", false},         {"--zero", true},
    {"--use-distributed-optimizer", false}, {"--micro-batch", true},
    {"--micro-batch-size", true},           {"--global-batch", true},
    {"--global-batch-size", true},          {"--recompute", true},
    {"--recompute-granularity", true},      {"--recompute-layers", true},
    {"--recompute-num-layers", true},       {"--recompute-method", true},
    {"--recompute-plan", true},             {"--memory-budget", true},
    {"--pipeline-memory-limit", true},      {"--resume", true},
    {"--expert-model-parallel-size", true}, {"--ep", true},
    {"--init", true},                       {"--load", true},
};

const FlagName* layout_flag(const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  for (const FlagName& f : kLayoutFlags)
    if (name == f.name) return &f;
  return nullptr;
}

}  // namespace

bool replaced_on_relaunch(const std::string& flag) {
  const FlagName* f = layout_flag(flag);
  return f && flag != "--resume";
}

bool restated_on_relaunch(const std::string& flag) {
  for (const char* always : {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch",
                             "--micro-batch-size", "--global-batch", "--global-batch-size"})
    if (flag == always) return true;
  return false;
}

std::vector<std::string> relaunch_args(const std::vector<std::string>& args, const Layout& layout, int global_batch,
                                       const std::string& resume_dir, bool continue_report) {
  std::vector<std::string> out;
  std::vector<std::string> kept_start;  // --init/--resume of the run itself, while nothing was saved
  for (size_t i = 0; i < args.size(); ++i) {
    const FlagName* f = layout_flag(args[i]);
    if (!f) {
      // A pipeline-only schedule has no meaning on one stage (train refuses it), and the interleaved one
      // none without its virtual stages, which a relaunch's layout does not have.
      const auto dropped = [&](const std::string& schedule) {
        return schedule == "interleaved" || (layout.pp == 1 && schedule == "zb-h1");
      };
      if (args[i] == "--schedule" && i + 1 < args.size() && dropped(args[i + 1])) {
        ++i;
        continue;
      }
      if (args[i].rfind("--schedule=", 0) == 0 && dropped(args[i].substr(11))) continue;
      if (args[i] == "--continue-report") continue;  // given again below when it applies
      out.push_back(args[i]);
      continue;
    }
    const std::string name = args[i].substr(0, args[i].find('='));
    std::string value;
    const bool inline_value = args[i].find('=') != std::string::npos;
    if (inline_value) value = args[i].substr(args[i].find('=') + 1);
    else if (f->value && i + 1 < args.size()) value = args[++i];
    if (name == "--resume" || name == "--init" || name == "--load") kept_start = {name, value};
  }
  const std::vector<std::string> lf = layout.flags();
  out.insert(out.end(), lf.begin(), lf.end());
  out.insert(out.end(), {"--global-batch", std::to_string(global_batch)});
  // The run's report goes on, from step 0 too (where train would start it again).
  if (continue_report) out.push_back("--continue-report");
  if (!resume_dir.empty()) out.insert(out.end(), {"--resume", resume_dir});
  else out.insert(out.end(), kept_start.begin(), kept_start.end());
  return out;
}

std::optional<std::string> flag_value(const std::vector<std::string>& args, const std::vector<std::string>& names) {
  std::optional<std::string> found;
  for (size_t i = 0; i < args.size(); ++i)
    for (const std::string& n : names) {
      if (args[i] == n && i + 1 < args.size()) found = args[i + 1];
      else if (args[i].rfind(n + "=", 0) == 0) found = args[i].substr(n.size() + 1);
    }
  return found;
}

std::string restart_line(const Restart& r) {
  std::string lost = r.lost_hosts.empty() ? "no host lost (every host answers)" : "lost " + joined(r.lost_hosts, ", ");
  std::string out = "lattice launch: restart " + std::to_string(r.number) + " of at most " +
                    std::to_string(r.max_restarts) + " (" + r.reason + "): " + lost + "; " + r.from.describe() +
                    " → " + r.to.describe() + " on " + joined(r.hosts, ", ") +
                    (r.idle_slots > 0 ? " (" + std::to_string(r.idle_slots) + " slot(s) idle: no layout of " +
                                            std::to_string(r.to.world + r.idle_slots) + " ranks fits)"
                                      : std::string()) +
                    "; ";
  if (r.resume_dir.empty() && !r.own_start.empty())
    out += "from the run's own " + r.own_start +
           (r.own_start.rfind("--resume", 0) == 0 ? " at step " + std::to_string(r.resume_step) : "") +
           " (no checkpoint saved yet)";
  else if (r.resume_dir.empty()) out += "from step 0 (no checkpoint saved yet)";
  else if (r.resume_unreadable) out += "resuming " + r.resume_dir + ", whose trainer.json cannot be read (the job will say why)";
  else out += "resuming " + r.resume_dir + " at step " + std::to_string(r.resume_step);
  out += ", " + std::to_string(r.steps_redone) + " step(s) redone, " + seconds_text(r.seconds_lost) + " s lost";
  return out;
}

namespace {
// The checkpoint the relaunch resumes: --save's, else the run's own --resume (as the line says).
std::string resumed_dir(const Restart& r) {
  if (!r.resume_dir.empty()) return r.resume_dir;
  return r.own_start.rfind("--resume ", 0) == 0 ? r.own_start.substr(9) : "";
}
}  // namespace

nlohmann::json restart_event(const Restart& r) {
  return {{"event", "restart"},       {"restart", r.number},
          {"max_restarts", r.max_restarts}, {"reason", r.reason},
          {"lost_hosts", r.lost_hosts},  {"hosts", r.hosts},
          {"from", r.from.to_json()},    {"to", r.to.to_json()},
          {"from_text", r.from.describe()}, {"to_text", r.to.describe()},  // as the line says them (the report shows these)
          {"resume_step", r.resume_step}, {"resume", resumed_dir(r).empty() ? nlohmann::json(nullptr) : nlohmann::json(resumed_dir(r))},
          {"steps_redone", r.steps_redone}, {"seconds_lost", std::round(r.seconds_lost * 10) / 10},
          {"resume_unreadable", r.resume_unreadable}, {"idle_slots", r.idle_slots}};
}

int supervise(const std::vector<Host>& hosts, const std::vector<std::string>& train_args, const Layout& first,
              int global_batch, const Options& options, Launcher& launcher, const Environment& env) {
  std::vector<Host> current = hosts;
  std::vector<std::string> args = train_args;
  Layout layout = first;
  std::set<std::string> dead;  // hosts where a rank was killed: not used again
  const auto interrupted = [&] { return env.interrupted ? env.interrupted() : 0; };
  // What the promoted checkpoint holds, as every stop line ends.
  const auto unreadable = [&] { return env.checkpoint_unreadable && env.checkpoint_unreadable(); };
  const auto kept_text = [&](const std::optional<int64_t>& saved) {
    return saved        ? "the checkpoint in " + options.save_dir + " holds step " + std::to_string(*saved)
           : unreadable() ? "the checkpoint in " + options.save_dir + " cannot be read (its trainer.json)"
                          : std::string("this run saved no checkpoint yet");
  };
  const auto stop_interrupted = [&](int signal) {
    env.say("lattice launch: interrupted before the next job started; " + kept_text(env.checkpoint_step()));
    return 128 + signal;
  };
  for (int restarts = 0;; ++restarts) {
    if (const int signal = interrupted()) return stop_interrupted(signal);
    const JobResult job = launcher.run(current, layout.world, args);
    const double ended = env.now();
    const Verdict verdict = classify(job);
    const std::optional<int64_t> saved = env.checkpoint_step();
    const std::string kept = kept_text(saved);
    if (verdict == Verdict::completed) return 0;
    if (verdict == Verdict::interrupted) {
      env.say("lattice launch: interrupted; " + kept);
      if (job.interrupt_signal > 0) return 128 + job.interrupt_signal;
      return job.exit_status > 128 ? job.exit_status : 130;
    }
    if (verdict == Verdict::failed && job.crash_signal != 0) {
      const int signal = job.crash_signal;
      env.say("lattice launch: " +
              (job.crashed_rank >= 0 ? "rank " + std::to_string(job.crashed_rank) : std::string("a rank")) +
              " crashed (signal " + std::to_string(signal) + ": " + strsignal(signal) +
              "): a fault of the run, not a lost host: not restarted; " + kept);
      return 128 + signal;  // as a shell reports a process the signal ended
    }
    // The first job refused by train before any step: train's line says why (bad input), alone.
    if (verdict == Verdict::failed && job.refused && restarts == 0 && job.last_step == 0) return job.exit_status;
    if (verdict == Verdict::failed) {
      env.say("lattice launch: the job failed on its own (exit " + std::to_string(job.exit_status) +
              "), not by a lost rank: not restarted; " + kept);
      return job.exit_status;
    }
    // A lost rank.
    // Exit 3 and rank_lost lines come from a rank that lost a peer (a stall or an MPI error).
    const std::string reason = !job.hosts_died.empty() ? "rank died"
                               : job.no_progress       ? "no progress"
                               : mpirun_own_status(job.exit_status) && job.ranks_reporting_lost.empty()
                                   ? "mpirun failed (exit " + std::to_string(job.exit_status) + ")"
                                   : "rank lost";
    // A rank of the job before still holds --save's lock (its host stopped without dying): a relaunch
    // would be refused it, and that rank could yet write the checkpoint the relaunch resumes from.
    if (!job.save_locked_by.empty()) {
      env.say("lattice launch: stopping: " + job.save_locked_by + ": end that process, then launch again " +
              (saved ? "with --resume " + options.save_dir + " among train's flags to go on from its checkpoint"
                     : std::string("as before")) +
              "; " + kept);
      env.event({{"event", "launch_stopped"}, {"reason", "save_locked"}, {"checkpoint_step", saved ? *saved : 0}});
      return kExitRankLost;
    }
    if (restarts >= options.max_restarts) {
      env.say("lattice launch: stopping: a rank was lost (" + reason + ") after " + std::to_string(restarts) +
              " restart(s), the limit (--max-restarts " + std::to_string(options.max_restarts) + "); " + kept);
      env.event({{"event", "launch_stopped"}, {"reason", "max_restarts"}, {"checkpoint_step", saved ? *saved : 0}});
      return kExitRankLost;
    }
    for (const std::string& h : job.hosts_died)
      if (!(env.local && env.local(Host{h, 1}))) dead.insert(h);
    std::vector<Host> next;
    std::vector<std::string> lost;
    for (const Host& h : hosts) {
      if (const int signal = interrupted()) return stop_interrupted(signal);
      const bool was_running = std::any_of(current.begin(), current.end(), [&](const Host& c) { return c.name == h.name; });
      if (dead.count(h.name)) {
        if (was_running) lost.push_back(h.name + " (its rank was killed)");
        continue;
      }
      if (!env.answers(h)) {
        if (was_running) lost.push_back(h.name + " (does not answer)");
        continue;
      }
      next.push_back(h);
    }
    const int slots = total_slots(next);
    if (slots < options.min_ranks) {
      env.say("lattice launch: stopping: " + std::to_string(slots) + " slot(s) answer" +
              (next.empty() ? "" : " (" + hostfile_text(next).substr(0, hostfile_text(next).size() - 1) + ")") +
              ", fewer than --min-ranks " + std::to_string(options.min_ranks) + "; " + kept);
      env.event({{"event", "launch_stopped"}, {"reason", "min_ranks"}, {"slots", slots},
                 {"checkpoint_step", saved ? *saved : 0}});
      return kExitRankLost;
    }
    int slots_per_host = next.front().slots;
    for (const Host& h : next) slots_per_host = std::min(slots_per_host, h.slots);
    if (const int signal = interrupted()) return stop_interrupted(signal);
    // The most ranks that a layout fits, from every slot down to --min-ranks, at most
    // kFewerRanksTried counts (each a whole search): a global batch that 3 ranks cannot split may
    // train on 2 of them, while a model too large for a rank's memory fits no fewer ranks either.
    Layout chosen;
    std::string no_layout;
    bool found = false;
    const int least = std::max({1, options.min_ranks, slots - kFewerRanksTried + 1});
    for (int ranks = slots; !found && ranks >= least; --ranks) {
      if (const int signal = interrupted()) return stop_interrupted(signal);
      try {
        chosen = env.plan(ranks, slots_per_host);
        found = true;
      } catch (const InputError& e) {
        if (no_layout.empty()) no_layout = e.what();
      }
    }
    if (!found) {
      env.say("lattice launch: stopping: " + no_layout +
              (slots > least ? ", nor of fewer down to " + std::to_string(least) +
                                   (least == std::max(1, options.min_ranks) ? " (--min-ranks)" : "")
                             : std::string()) +
              "; " + kept);
      env.event({{"event", "launch_stopped"}, {"reason", "no_layout"}, {"checkpoint_step", saved ? *saved : 0}});
      return kExitRankLost;
    }
    Restart r;
    r.number = restarts + 1;
    r.max_restarts = options.max_restarts;
    r.reason = reason;
    r.lost_hosts = lost;
    // Fewer ranks than slots: mpirun fills the hosts' slots in order, so the hosts past the last rank
    // get none, and are neither named nor given to the job.
    {
      std::vector<Host> used;
      for (const Host& h : next) {
        if (total_slots(used) >= chosen.world) break;
        used.push_back(h);
      }
      next = used;
    }
    for (const Host& h : next) r.hosts.push_back(h.name);
    r.from = layout;
    r.to = chosen;
    r.idle_slots = slots - chosen.world;
    r.resume_step = saved ? *saved : 0;
    r.resume_unreadable = !saved && unreadable();
    r.resume_dir = saved || r.resume_unreadable ? options.save_dir : "";
    if (!saved && !r.resume_unreadable)
      for (const char* start : {"--resume", "--init", "--load"})
        if (const auto dir = flag_value(args, {start})) {
          r.own_start = std::string(start) + " " + *dir;
          if (std::string(start) == "--resume") r.resume_step = options.own_resume_step;  // where it goes on from
        }
    r.steps_redone = std::max<int64_t>(0, job.last_step - r.resume_step);
    r.seconds_lost = job.seconds_since_progress + (env.now() - ended);
    env.say(restart_line(r));
    env.event(restart_event(r));
    args = relaunch_args(args, chosen, global_batch, r.resume_dir, env.report_written && env.report_written());
    current = next;
    layout = chosen;
  }
}

}  // namespace lattice::cli::launch
