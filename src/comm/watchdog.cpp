#include "comm/watchdog.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "comm/mpi_include.hpp"

namespace lattice::comm {

namespace {

// Never destroyed: the thread may outlive static destruction at exit.
struct State {
  std::atomic<double> timeout_s{0};
  std::atomic<int> rank{0};
  std::atomic<int64_t> waiting_since_us{0};  // 0: not waiting
  std::atomic<const char*> op{""}, group{""};
  std::atomic<bool> started{false};
  std::atomic<bool> json{false};
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
    char what[512];
    std::snprintf(what, sizeof what,
                  "no progress for %.0f s in %s on the %s group (a peer stopped responding or the link is down; "
                  "--comm-timeout %g)",
                  waited, s.op.load(), s.group.load(), timeout);
    char detail[256];
    std::snprintf(detail, sizeof detail, "\"op\":\"%s\",\"group\":\"%s\",\"waited_s\":%.1f,\"comm_timeout\":%g",
                  s.op.load(), s.group.load(), waited, timeout);
    exit_rank_lost("stalled", what, detail);
  }
}

// JSON string contents: the MPI library's error text may hold quotes or backslashes.
std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    out += ch;
  }
  return out;
}

void on_mpi_error(MPI_Comm*, int* code, ...) {
  char text[MPI_MAX_ERROR_STRING + 1] = {0};
  int length = 0;
  if (MPI_Error_string(*code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "MPI error %d", *code);
  const std::string message = text;
  exit_rank_lost("peer_failed",
                 "communication failed (" + message + "): a peer died or the link is down",
                 "\"mpi_error\":\"" + json_escaped(message) + "\"");
}

}  // namespace

void report_rank_lost_as_json(bool json) { state().json = json; }

void exit_rank_lost(const char* reason, const std::string& what, const std::string& detail) {
  State& s = state();
  std::fprintf(stderr, "lattice: rank %d: %s; stopping (exit %d: rank lost)\n", s.rank.load(), what.c_str(),
               kExitRankLost);
  std::fflush(stderr);
  if (s.json) {
    std::fflush(stdout);  // the line starts a line of its own
    std::fprintf(stdout, "{\"event\":\"rank_lost\",\"rank\":%d,\"reason\":\"%s\"%s%s}\n", s.rank.load(), reason,
                 detail.empty() ? "" : ",", detail.c_str());
    std::fflush(stdout);
  }
  _exit(kExitRankLost);
}

void exit_on_mpi_errors() {
  MPI_Errhandler handler;
  MPI_Comm_create_errhandler(on_mpi_error, &handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, handler);
  MPI_Errhandler_free(&handler);
}

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
