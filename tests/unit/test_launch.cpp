// `lattice launch`'s decisions (cli/launch_supervisor.hpp) against a fake launcher: the hostfile,
// what a job's end means, which hosts come back, the planner's layout, the relaunch's flags, the
// resume point, the restart and stop rules, and the restart line and event.
// Past the usual length on purpose: the supervisor's rules share one fake launcher and its scripted job
// ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "cli/launch_supervisor.hpp"
#include "core/error.hpp"

namespace lattice::cli::launch {
namespace {

TEST(LaunchHostfile, ParsesSlotsCommentsAndBlankLines) {
  const auto hosts = parse_hostfile("# two hosts\n10.0.0.2 slots=2\n\n  10.0.0.3 slots=2 max_slots=4  # b\nc\n", "H");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "10.0.0.2");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].name, "10.0.0.3");
  EXPECT_EQ(hosts[2].slots, 1);  // OpenMPI's default
  EXPECT_EQ(total_slots(hosts), 5);
  EXPECT_EQ(host_of_rank(hosts, 0), "10.0.0.2");
  EXPECT_EQ(host_of_rank(hosts, 3), "10.0.0.3");
  EXPECT_EQ(host_of_rank(hosts, 4), "c");
  EXPECT_EQ(hostfile_text(hosts), "10.0.0.2 slots=2\n10.0.0.3 slots=2\nc slots=1\n");
}

TEST(LaunchHostfile, RefusesWhatItCannotRead) {
  auto message = [](const std::string& text) {
    try {
      parse_hostfile(text, "hosts.txt");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message("a slots=2\nb slots=two\n"),
            "hosts.txt:2: slots must be a whole number from 1 to 1048576 (got 'two')");
  EXPECT_EQ(message("a slots=0\n"), "hosts.txt:1: slots must be a whole number from 1 to 1048576 (got '0')");
  EXPECT_EQ(message("a cpus=2\n"), "hosts.txt:1: 'cpus=2' is not slots=N or max_slots=N");
  EXPECT_EQ(message("a\nb\na slots=2\n"), "hosts.txt:3: host 'a' is listed twice");
  EXPECT_EQ(message("# nothing\n\n"), "hosts.txt: the hostfile lists no host");
  EXPECT_EQ(message("a slots=4 max_slots=2\n"), "hosts.txt:1: max_slots 2 is below slots 4");
  EXPECT_EQ(message("a max_slots=2 slots=4\n"), "hosts.txt:1: max_slots 2 is below slots 4");  // either order
  // mpirun would take one of two counts silently, or refuse two lines for one node in pages.
  EXPECT_EQ(message("a slots=2 slots=3\n"), "hosts.txt:1: slots is given twice");
  EXPECT_EQ(message("a max_slots=2 max-slots=3\n"), "hosts.txt:1: max-slots is given twice");
  EXPECT_EQ(message("localhost slots=1\n127.0.0.1 slots=1\n"),
            "hosts.txt:2: '127.0.0.1' and 'localhost' both name this machine (mpirun refuses two slot counts for "
            "one node): list it once");
  try {
    parse_hostfile("node1 slots=1\nlocalhost slots=1\n", "h", "node1");
    ADD_FAILURE() << "this machine's name and localhost accepted together";
  } catch (const InputError&) {
  }
  EXPECT_EQ(parse_hostfile("node1 slots=1\nnode2 slots=1\n", "h", "node1").size(), 2u);
}

TEST(LaunchHosts, LocalNames) {
  EXPECT_TRUE(is_local_host("localhost", "node1"));
  EXPECT_TRUE(is_local_host("127.0.0.1", "node1"));
  EXPECT_TRUE(is_local_host("node1", "node1"));
  EXPECT_FALSE(is_local_host("10.77.0.3", "node1"));
  EXPECT_TRUE(is_local_host("LOCALHOST", "node1"));
  EXPECT_TRUE(is_local_host("Node1", "node1"));
}

TEST(LaunchHosts, TheRemoteAgentIsMpirunsOwn) {
  using Agents = std::vector<std::vector<std::string>>;
  EXPECT_EQ(remote_agents({}, nullptr), (Agents{{"ssh"}, {"rsh"}}));  // OpenMPI's default
  EXPECT_EQ(remote_agents({}, "/x/agent.sh : rsh"), (Agents{{"/x/agent.sh"}, {"rsh"}}));  // a list, in order
  EXPECT_EQ(remote_agents({}, "ssh -p 2222"), (Agents{{"ssh", "-p", "2222"}}));
  // mpirun's command line wins over the environment.
  EXPECT_EQ(remote_agents({"--oversubscribe", "--mca", "plm_rsh_agent", "/y/a.sh"}, "ssh"), (Agents{{"/y/a.sh"}}));
  EXPECT_EQ(remote_agents({"-mca", "plm_rsh_agent", "rsh"}, nullptr), (Agents{{"rsh"}}));
}

TEST(LaunchOutput, ReadsStepsLostRanksAndDeadHosts) {
  EXPECT_EQ(step_in_line(R"({"event":"step","step":12,"loss":5.1})"), 12);
  EXPECT_EQ(step_in_line(R"({"bits_per_byte":8.0,"event":"step","loss":5.5,"step":3,"tokens":256})"), 3);
  EXPECT_EQ(step_in_line(R"({"event":"restart","resume_step":3})"), std::nullopt);
  EXPECT_EQ(step_in_line("step    7/100 | loss 5.2"), 7);
  EXPECT_EQ(step_in_line(R"({"event":"eval","step":12})"), std::nullopt);
  EXPECT_EQ(lost_rank_in_line(R"({"event":"rank_lost","rank":2,"reason":"stalled"})"), 2);
  EXPECT_EQ(lost_rank_in_line("lattice: rank 1: no progress for 8 s in all_reduce on the dp group (a peer stopped "
                              "responding or the link is down; --comm-timeout 8); stopping (exit 3: rank lost)"),
            1);
  EXPECT_EQ(lost_rank_in_line("lattice train: rank 0: error: bad"), std::nullopt);
  const auto killed = died_rank_in_line(
      "mpirun noticed that process rank 2 with PID 0 on node lattice-mn-b exited on signal 9 (Killed).");
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(killed->rank, 2);
  EXPECT_EQ(killed->signal, 9);
  const auto crashed = died_rank_in_line(
      "mpirun noticed that process rank 1 with PID 4242 on node a exited on signal 11 (Segmentation fault).");
  ASSERT_TRUE(crashed.has_value());
  EXPECT_EQ(crashed->signal, 11);
  EXPECT_TRUE(is_crash_signal(crashed->signal));
  EXPECT_FALSE(is_crash_signal(killed->signal));
  EXPECT_EQ(died_rank_in_line("mpirun detected that one or more processes exited with non-zero status"), std::nullopt);
}

TEST(LaunchVerdict, RestartsOnlyOnALostRank) {
  JobResult j;
  EXPECT_EQ(classify(j), Verdict::completed);
  j.exit_status = 1;
  EXPECT_EQ(classify(j), Verdict::failed);  // bad input
  j.exit_status = 2;
  EXPECT_EQ(classify(j), Verdict::failed);  // usage
  j.exit_status = 3;
  EXPECT_EQ(classify(j), Verdict::lost);  // train's lost rank
  j.exit_status = 128 + SIGKILL;
  EXPECT_EQ(classify(j), Verdict::lost);
  j.exit_status = 128 + SIGSEGV;
  EXPECT_EQ(classify(j), Verdict::failed);  // lattice crashed: a bug, not a lost host
  j.exit_status = 1;
  j.ranks_reporting_lost = {0};
  EXPECT_EQ(classify(j), Verdict::lost);  // a rank said so before mpirun's status
  j = {};
  j.exit_status = 0;
  j.no_progress = true;
  EXPECT_EQ(classify(j), Verdict::lost);  // the launcher's timeout killed a hung job
  j.interrupted = true;
  EXPECT_EQ(classify(j), Verdict::interrupted);
  // mpirun's own crash in its teardown, after the launcher ended a hung job: still a lost rank.
  j = {};
  j.no_progress = true;
  j.exit_status = 128 + SIGSEGV;
  EXPECT_EQ(classify(j), Verdict::lost);
  // A rank's crash, with the survivors' lost-rank reports and exit 3 after it: the run's own fault.
  j = {};
  j.exit_status = 3;
  j.ranks_reporting_lost = {0};
  j.hosts_died = {"A"};
  j.crash_signal = SIGSEGV;
  j.crashed_rank = 1;
  EXPECT_EQ(classify(j), Verdict::failed);
}

TEST(LaunchArgs, RelaunchReplacesTheLayoutAndResumes) {
  const std::vector<std::string> args = {"--data", "d", "--tensor-model-parallel-size", "2", "--micro-batch=2",
                                         "--sequence-parallel", "--zero", "1", "--save", "ck", "--save-every", "3",
                                         "--init", "w.safetensors", "--json"};
  Layout l;
  l.tp = 1;
  l.pp = 1;
  l.dp = 2;
  l.world = 2;
  l.micro_batch = 4;
  const auto out = relaunch_args(args, l, 8, "ck");
  const std::vector<std::string> want = {"--data", "d", "--save", "ck", "--save-every", "3", "--json",
                                         "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
                                         "--micro-batch", "4", "--recompute", "none", "--global-batch", "8",
                                         "--resume", "ck"};
  EXPECT_EQ(out, want);
  // The job wrote the run's --report-dir log: the relaunch continues it, named once however often relaunched.
  const auto continued = relaunch_args(out, l, 8, "ck", true);
  EXPECT_EQ(std::count(continued.begin(), continued.end(), "--continue-report"), 1);
  EXPECT_EQ(std::count(continued.begin(), continued.end(), "--resume"), 1);
  const auto again = relaunch_args(continued, l, 8, "ck", true);
  EXPECT_EQ(std::count(again.begin(), again.end(), "--continue-report"), 1);
  EXPECT_EQ(relaunch_args(continued, l, 8, "ck", false), want);  // and not when it did not
  // The interleaved schedule needs virtual stages, which a relaunch's layout has not: dropped on any
  // number of stages (train refused it, and the job was lost); zero bubble only on one stage.
  Layout two_stages = l;
  two_stages.pp = 2;
  for (const std::vector<std::string>& schedule :
       {std::vector<std::string>{"--schedule", "interleaved"}, std::vector<std::string>{"--schedule=interleaved"}})
    EXPECT_EQ(flag_value(relaunch_args(schedule, two_stages, 8, ""), {"--schedule"}), std::nullopt);
  EXPECT_EQ(flag_value(relaunch_args({"--schedule", "zb-h1"}, two_stages, 8, ""), {"--schedule"}), "zb-h1");
  EXPECT_EQ(flag_value(relaunch_args({"--schedule", "zb-h1"}, l, 8, ""), {"--schedule"}), std::nullopt);
  // Nothing saved yet: the run's own --init stays (from step 0).
  const auto fresh = relaunch_args(args, l, 8, "");
  EXPECT_EQ(std::vector<std::string>(fresh.end() - 2, fresh.end()),
            (std::vector<std::string>{"--init", "w.safetensors"}));
  EXPECT_EQ(flag_value(args, {"--save"}), "ck");
  EXPECT_EQ(flag_value(args, {"--micro-batch"}), "2");
  EXPECT_EQ(flag_value(args, {"--resume"}), std::nullopt);
}

// The tests' model: 2 layers of h 64, a global batch of 8 in micro-batches of 2, 1 GiB a rank.
plan::PlanRequest small_request() {
  plan::PlanRequest base;
  base.model.layers = 2;
  base.model.hidden = 64;
  base.model.heads = 4;
  base.model.seq_len = 32;
  base.model.vocab = 256;
  base.global_batch = 8;
  base.micro_batch = 2;
  base.gpu_memory = int64_t(1) << 30;
  base.save = true;
  return base;
}

TEST(LaunchLayout, PlannerChoosesAFittingLayoutOfTheSlotsLeft) {
  plan::PlanRequest base = small_request();
  const plan::Hardware hw = plan::hardware_preset("cpu");
  const Layout two = choose_layout(base, hw, 2, 2);
  EXPECT_EQ(two.world, 2);
  EXPECT_EQ(two.tp * two.pp * two.dp, 2);
  EXPECT_EQ(8 % (two.micro_batch * two.dp), 0);
  EXPECT_GT(two.predicted_step_s, 0);
  const Layout one = choose_layout(base, hw, 1, 1);
  EXPECT_EQ(one.tp * one.pp * one.dp, 1);
  // TP stays within a host: one slot a host allows no TP.
  const Layout spread = choose_layout(base, hw, 4, 1);
  EXPECT_EQ(spread.tp, 1);
  base.gpu_memory = 1 << 10;  // 1 KiB a rank: nothing fits
  EXPECT_THROW(choose_layout(base, hw, 2, 2), InputError);
}

TEST(LaunchLayout, AnMoEModelKeepsAnExpertParallelSizeTheRanksLeftAllow) {
  plan::PlanRequest base = small_request();
  base.model.moe.experts = 4;
  base.layout.ep = 4;  // the run's: 4 ranks of DP
  const Layout two = choose_layout(base, plan::hardware_preset("cpu"), 2, 2);
  EXPECT_EQ(two.dp % two.ep, 0) << two.describe();
  EXPECT_EQ(4 % two.ep, 0);
  // The relaunch's flags: the run's EP size gone, the layout's in its place (none at EP 1).
  Layout l = two;
  l.ep = 2;
  const auto args = relaunch_args({"--num-experts", "4", "--expert-model-parallel-size", "4", "--ep=4", "--save", "ck"},
                                  l, 8, "ck");
  EXPECT_EQ(flag_value(args, {"--expert-model-parallel-size", "--ep"}), "2");
  EXPECT_EQ(std::count(args.begin(), args.end(), "--expert-model-parallel-size"), 1);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--ep=4"), 0);
  l.ep = 1;
  EXPECT_EQ(flag_value(relaunch_args({"--ep", "4"}, l, 8, ""), {"--expert-model-parallel-size", "--ep"}), std::nullopt);
}

// The fake launcher: plays back scripted job results and records what it was asked to run.
class FakeLauncher final : public Launcher {
 public:
  std::deque<JobResult> results;
  struct Call {
    std::vector<std::string> hosts;
    int world;
    std::vector<std::string> args;
  };
  std::vector<Call> calls;
  JobResult run(const std::vector<Host>& hosts, int world, const std::vector<std::string>& args) override {
    Call c{{}, world, args};
    for (const Host& h : hosts) c.hosts.push_back(h.name);
    calls.push_back(c);
    JobResult r = results.front();
    results.pop_front();
    return r;
  }
};

struct World {
  std::vector<Host> hosts{{"A", 2}, {"B", 2}};
  std::vector<std::string> answering{"A", "B"};
  std::optional<int64_t> saved;
  double clock = 100;
  std::vector<std::string> lines;
  std::vector<nlohmann::json> events;
  std::vector<int> planned_worlds;
  Environment env() {
    Environment e;
    e.answers = [this](const Host& h) {
      return std::find(answering.begin(), answering.end(), h.name) != answering.end();
    };
    e.checkpoint_step = [this] { return saved; };
    e.plan = [this](int world, int) {
      planned_worlds.push_back(world);
      Layout l;
      l.dp = world;
      l.world = world;
      l.micro_batch = 8 / world;
      return l;
    };
    e.now = [this] { return clock += 0.5; };
    e.say = [this](const std::string& line) { lines.push_back(line); };
    e.event = [this](const nlohmann::json& j) { events.push_back(j); };
    return e;
  }
};

Layout tp2dp2() {
  Layout l;
  l.tp = 2;
  l.dp = 2;
  l.world = 4;
  l.micro_batch = 2;
  return l;
}

JobResult died_on(const std::string& host, int64_t last_step) {
  JobResult j;
  j.exit_status = 137;
  j.hosts_died = {host};
  j.last_step = last_step;
  j.seconds_since_progress = 2;
  return j;
}

const std::vector<std::string> kArgs = {"--data", "d", "--tensor-model-parallel-size", "2", "--micro-batch", "2",
                                        "--save", "ck", "--save-every", "3", "--json"};

TEST(LaunchSupervisor, AKilledHostIsLeftOutAndTheRunResumes) {
  World w;
  FakeLauncher fake;
  fake.results = {died_on("B", 7), JobResult{}};
  w.saved = 6;
  const int status = supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env());
  EXPECT_EQ(status, 0);
  ASSERT_EQ(fake.calls.size(), 2u);
  EXPECT_EQ(fake.calls[0].world, 4);
  EXPECT_EQ(fake.calls[1].hosts, std::vector<std::string>{"A"});  // B answers, but its rank was killed
  EXPECT_EQ(fake.calls[1].world, 2);
  EXPECT_EQ(w.planned_worlds, std::vector<int>{2});
  const auto& args = fake.calls[1].args;
  EXPECT_EQ(flag_value(args, {"--resume"}), "ck");
  EXPECT_EQ(flag_value(args, {"--tensor-model-parallel-size"}), "1");
  EXPECT_EQ(flag_value(args, {"--micro-batch"}), "4");
  EXPECT_EQ(flag_value(args, {"--global-batch"}), "8");
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0],
            "lattice launch: restart 1 of at most 3 (rank died): lost B (its rank was killed); TP 2 × DP 2 (4 ranks, "
            "micro-batch 2) → DP 2 (2 ranks, micro-batch 4) on A; resuming ck at step 6, 1 step(s) redone, 2.5 s lost");
  ASSERT_EQ(w.events.size(), 1u);
  EXPECT_EQ(w.events[0]["event"], "restart");
  EXPECT_EQ(w.events[0]["steps_redone"], 1);
  EXPECT_EQ(w.events[0]["resume_step"], 6);
  EXPECT_EQ(w.events[0]["from"]["tp"], 2);
  EXPECT_EQ(w.events[0]["to"]["world"], 2);
}

TEST(LaunchSupervisor, AKilledRankOnTheLaunchersOwnHostKeepsIt) {
  World w;
  w.hosts = {{"localhost", 2}};
  w.answering = {"localhost"};
  FakeLauncher fake;
  fake.results = {died_on("localhost", 7), JobResult{}};
  w.saved = 6;
  Environment env = w.env();
  env.local = [](const Host& h) { return h.name == "localhost"; };
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, env), 0);
  ASSERT_EQ(fake.calls.size(), 2u);
  EXPECT_EQ(fake.calls[1].hosts, std::vector<std::string>{"localhost"});
}

TEST(LaunchSupervisor, AStalledHostThatAnswersStays) {
  World w;
  FakeLauncher fake;
  JobResult stalled;
  stalled.exit_status = 3;
  stalled.ranks_reporting_lost = {0};
  stalled.last_step = 4;
  fake.results = {stalled, JobResult{}};
  w.saved = 3;
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 0);
  ASSERT_EQ(fake.calls.size(), 2u);
  EXPECT_EQ(fake.calls[1].hosts, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(fake.calls[1].world, 4);
  EXPECT_NE(w.lines[0].find("(rank lost): no host lost (every host answers)"), std::string::npos) << w.lines[0];
}

TEST(LaunchSupervisor, AHostThatDoesNotAnswerIsLeftOut) {
  World w;
  FakeLauncher fake;
  JobResult hung;
  hung.no_progress = true;
  hung.exit_status = 137;
  hung.last_step = 5;
  fake.results = {hung, JobResult{}};
  w.answering = {"A"};  // the link to B is cut
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 0);
  EXPECT_EQ(fake.calls[1].hosts, std::vector<std::string>{"A"});
  EXPECT_NE(w.lines[0].find("(no progress): lost B (does not answer)"), std::string::npos) << w.lines[0];
  // Nothing saved yet: from step 0, every step redone.
  EXPECT_EQ(flag_value(fake.calls[1].args, {"--resume"}), std::nullopt);
  EXPECT_NE(w.lines[0].find("from step 0 (no checkpoint saved yet), 5 step(s) redone"), std::string::npos);
}

TEST(LaunchSupervisor, NeverRestartsBadInput) {
  World w;
  FakeLauncher fake;
  JobResult bad;
  bad.exit_status = 1;
  fake.results = {bad};
  w.saved = 3;
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 1);
  EXPECT_EQ(fake.calls.size(), 1u);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0], "lattice launch: the job failed on its own (exit 1), not by a lost rank: not restarted; the "
                        "checkpoint in ck holds step 3");
}

TEST(LaunchSupervisor, StopsBelowMinRanks) {
  World w;
  FakeLauncher fake;
  fake.results = {died_on("B", 7)};
  w.saved = 6;
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {4, 3, "ck"}, fake, w.env()), kExitRankLost);
  EXPECT_EQ(fake.calls.size(), 1u);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0], "lattice launch: stopping: 2 slot(s) answer (A slots=2), fewer than --min-ranks 4; the "
                        "checkpoint in ck holds step 6");
  EXPECT_EQ(w.events.back()["event"], "launch_stopped");
}

TEST(LaunchSupervisor, StopsAfterMaxRestarts) {
  World w;
  FakeLauncher fake;
  JobResult stalled;
  stalled.exit_status = 3;
  fake.results = {stalled, stalled, stalled};
  w.saved = 3;
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 2, "ck"}, fake, w.env()), kExitRankLost);
  EXPECT_EQ(fake.calls.size(), 3u);
  ASSERT_EQ(w.lines.size(), 3u);
  EXPECT_EQ(w.lines[2], "lattice launch: stopping: a rank was lost (rank lost) after 2 restart(s), the limit "
                        "(--max-restarts 2); the checkpoint in ck holds step 3");
}

TEST(LaunchSupervisor, StopsWhenNoLayoutFits) {
  World w;
  FakeLauncher fake;
  fake.results = {died_on("B", 7)};
  Environment env = w.env();
  env.plan = [](int, int) -> Layout { throw InputError("no layout fits 2 rank(s)"); };
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, env), kExitRankLost);
  EXPECT_EQ(w.lines.back(), "lattice launch: stopping: no layout fits 2 rank(s), nor of fewer down to 1 "
                            "(--min-ranks); this run saved no checkpoint yet");
}

TEST(LaunchSupervisor, ACrashIsPassedOnNotRestarted) {
  World w;
  FakeLauncher fake;
  JobResult crashed = died_on("B", 7);
  crashed.exit_status = 3;  // the survivors' exit after the crash
  crashed.ranks_reporting_lost = {0};
  crashed.crash_signal = SIGSEGV;
  crashed.crashed_rank = 3;
  fake.results = {crashed};
  w.saved = 6;
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 128 + SIGSEGV);
  EXPECT_EQ(fake.calls.size(), 1u);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0], std::string("lattice launch: rank 3 crashed (signal 11: ") + strsignal(SIGSEGV) +
                            "): a fault of the run, not a lost host: not restarted; the checkpoint in ck holds step 6");
}

TEST(LaunchSupervisor, AnInterruptionBetweenJobsStartsNoOther) {
  World w;
  FakeLauncher fake;
  fake.results = {died_on("B", 7), JobResult{}};
  w.saved = 6;
  int signal = 0;
  Environment env = w.env();
  env.answers = [&](const Host&) {
    signal = SIGINT;  // Ctrl-C while the hosts are probed
    return true;
  };
  env.interrupted = [&] { return signal; };
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, env), 128 + SIGINT);
  EXPECT_EQ(fake.calls.size(), 1u);
  EXPECT_EQ(w.lines.back(),
            "lattice launch: interrupted before the next job started; the checkpoint in ck holds step 6");
}

TEST(LaunchSupervisor, InterruptedBySigtermExits143) {
  World w;
  FakeLauncher fake;
  JobResult j;
  j.interrupted = true;
  j.interrupt_signal = SIGTERM;
  j.exit_status = 1;  // what mpirun made of it
  fake.results = {j};
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 143);
}

TEST(LaunchSupervisor, InterruptedIsNotRestarted) {
  World w;
  FakeLauncher fake;
  JobResult j;
  j.interrupted = true;
  j.exit_status = 130;
  fake.results = {j};
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 130);
  EXPECT_EQ(fake.calls.size(), 1u);
}

// mpirun's own status (255: a daemon that could not start, a rank's MPI library aborting on a broken
// link) is a lost host in a relaunch or after steps, and passed on before the first job's first step.
TEST(LaunchVerdict, MpirunsOwnFailureIsLostOnceTheRunIsUnderWay) {
  EXPECT_TRUE(mpirun_own_status(255));
  EXPECT_TRUE(mpirun_own_status(4));
  for (int s : {0, 1, 2, 3, 128 + SIGKILL, 128 + SIGSEGV}) EXPECT_FALSE(mpirun_own_status(s)) << s;
  JobResult j;
  j.exit_status = 255;
  EXPECT_EQ(classify(j), Verdict::failed);  // the first job, no step: an mpirun or --mpi-arg that fails
  j.last_step = 4;
  EXPECT_EQ(classify(j), Verdict::lost);
  j.last_step = 0;
  j.relaunched = true;
  EXPECT_EQ(classify(j), Verdict::lost);
  j.refused = true;  // train said why: its own
  EXPECT_EQ(classify(j), Verdict::failed);
}

// The dead rank's host is the one mpirun's line names, whatever the placement; else by slot order.
TEST(LaunchOutput, ADeadRanksHostIsTheNodeMpirunNames) {
  const std::vector<Host> hosts = {{"10.0.0.2", 2}, {"Node-B", 2}};
  const auto named = died_rank_in_line(
      "mpirun noticed that process rank 1 with PID 77 on node node-b exited on signal 9 (Killed).");
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->node, "node-b");
  EXPECT_EQ(host_of_rank(hosts, 1), "10.0.0.2");        // slot order would say the first host
  EXPECT_EQ(host_of_died_rank(hosts, *named), "Node-B");  // mpirun put it on the second (--map-by node)
  EXPECT_EQ(host_of_died_rank(hosts, DiedRank{3, 9, "b.example.org"}), "Node-B");  // a name not in the file
}

// A relaunch that mpirun itself fails (exit 255: a host answers the probe but its daemon cannot start)
// is restarted like any lost rank, within --max-restarts, and says so.
TEST(LaunchSupervisor, ARelaunchMpirunFailsIsRestarted) {
  World w;
  FakeLauncher fake;
  JobResult broken;
  broken.exit_status = 255;
  broken.relaunched = true;
  fake.results = {died_on("B", 7), broken, JobResult{}};
  w.saved = 6;
  w.hosts = {{"A", 2}, {"B", 2}, {"C", 2}};
  w.answering = {"A", "B", "C"};
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), 0);
  ASSERT_EQ(fake.calls.size(), 3u);
  ASSERT_EQ(w.lines.size(), 2u);
  EXPECT_NE(w.lines[1].find("restart 2 of at most 3 (mpirun failed (exit 255)): no host lost"), std::string::npos)
      << w.lines[1];
}

// A rank of the job before still holding --save's lock (its host stopped without dying): no relaunch,
// which train would refuse, while that rank could yet write the checkpoint; exit 3, said why.
TEST(LaunchSupervisor, ASaveLockStillHeldStops) {
  World w;
  FakeLauncher fake;
  JobResult stalled;
  stalled.exit_status = 3;
  stalled.ranks_reporting_lost = {1};
  stalled.save_locked_by = "--save ck is being written by another lattice run (pid 17 on b) still";
  fake.results = {stalled};
  w.saved = 6;
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, w.env()), kExitRankLost);
  EXPECT_EQ(fake.calls.size(), 1u);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0], "lattice launch: stopping: --save ck is being written by another lattice run (pid 17 on b) "
                        "still: end that process, then launch again with --resume ck among train's flags to go on "
                        "from its checkpoint; the checkpoint in ck holds step 6");
  EXPECT_EQ(w.events.back()["reason"], "save_locked");
}

// Slots no layout can use all of (a global batch 3 ranks cannot split) train on fewer: the most that
// fit, down to --min-ranks, the idle slots said (none at all: StopsWhenNoLayoutFits).
TEST(LaunchSupervisor, FewerRanksThanSlotsWhenAllCannotFit) {
  World w;
  w.hosts = {{"A", 2}, {"B", 1}, {"C", 1}};
  w.answering = {"A", "B"};
  FakeLauncher fake;
  fake.results = {died_on("C", 7), JobResult{}};
  w.saved = 6;
  Environment env = w.env();
  const auto plan = env.plan;
  env.plan = [&](int world, int slots_per_host) {
    if (8 % world != 0) throw InputError("no layout of the model and global batch 8 fits " + std::to_string(world) + " rank(s)");
    return plan(world, slots_per_host);
  };
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, env), 0);
  ASSERT_EQ(fake.calls.size(), 2u);
  EXPECT_EQ(fake.calls[1].world, 2);
  EXPECT_EQ(fake.calls[1].hosts, std::vector<std::string>{"A"});  // its 2 slots hold both ranks: B idles
  EXPECT_NE(w.lines[0].find("on A (1 slot(s) idle: no layout of 3 ranks fits); resuming ck at step 6"),
            std::string::npos) << w.lines[0];
  EXPECT_EQ(w.events[0]["idle_slots"], 1);

}

// A checkpoint this launch promoted whose trainer.json cannot be read is resumed anyway, so that the
// job names the damage, never taken for "no checkpoint yet" (a relaunch from step 0 that train refuses
// for the checkpoint in --save, and a last line saying none was saved).
TEST(LaunchSupervisor, AnUnreadableCheckpointIsResumedForTheJobToName) {
  World w;
  FakeLauncher fake;
  JobResult damaged_refused;
  damaged_refused.exit_status = 1;
  damaged_refused.refused = true;
  damaged_refused.relaunched = true;
  fake.results = {died_on("B", 9), damaged_refused};
  Environment env = w.env();
  env.checkpoint_unreadable = [] { return true; };
  EXPECT_EQ(supervise(w.hosts, kArgs, tp2dp2(), 8, {1, 3, "ck"}, fake, env), 1);
  ASSERT_EQ(fake.calls.size(), 2u);
  EXPECT_EQ(flag_value(fake.calls[1].args, {"--resume"}), "ck");
  EXPECT_NE(w.lines[0].find("resuming ck, whose trainer.json cannot be read (the job will say why), 9 step(s) redone"),
            std::string::npos) << w.lines[0];
  EXPECT_EQ(w.lines[1], "lattice launch: the job failed on its own (exit 1), not by a lost rank: not restarted; the "
                        "checkpoint in ck cannot be read (its trainer.json)");
}

}  // namespace
}  // namespace lattice::cli::launch
