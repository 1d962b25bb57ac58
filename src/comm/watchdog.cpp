#include "comm/watchdog.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace lattice::comm {

namespace {

// Never destroyed: the thread may outlive static destruction at exit.
struct State {
  std::atomic<double> timeout_s{0};
  std::atomic<int> rank{0};
  std::atomic<int64_t> waiting_since_us{0};  // 0: not waiting
  std::atomic<const char*> op{""}, group{""};
  std::atomic<bool> started{false};
  int depth = 0;  // nesting, on the communicating thread only
};
State& state() {
  static State* s = new State;
  return *s;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watch() {
  State& s = state();
  for (;;) {
    const double timeout = s.timeout_s.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout > 0 && timeout < 4 ? 100 : 500));
    const int64_t since = s.waiting_since_us.load();
    if (timeout <= 0 || since == 0) continue;
    const double waited = double(now_us() - since) * 1e-6;
    if (waited < timeout) continue;
    std::fprintf(stderr,
                 "lattice: rank %d: no progress for %.0f s in %s on the %s group (a peer stopped responding "
                 "or the link is down; --comm-timeout %g); stopping\n",
                 s.rank.load(), waited, s.op.load(), s.group.load(), timeout);
    std::fflush(stderr);
    _exit(1);
  }
}

}  // namespace

void start_watchdog(double timeout_seconds, int rank) {
  State& s = state();
  s.timeout_s = timeout_seconds;
  s.rank = rank;
  if (timeout_seconds > 0 && !s.started.exchange(true)) std::thread(watch).detach();
}

WaitScope::WaitScope(const char* op, const char* group) {
  State& s = state();
  if (s.depth++ > 0) return;
  s.op = op;
  s.group = group;
  s.waiting_since_us = now_us();
}

WaitScope::~WaitScope() {
  State& s = state();
  if (--s.depth == 0) s.waiting_since_us = 0;
}

}  // namespace lattice::comm
