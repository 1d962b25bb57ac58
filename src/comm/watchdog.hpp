#pragma once
// The comm watchdog: a rank that stops responding (SIGSTOP, a dead link, a deadlock) must not hang
// the job. Every blocking communication runs inside a WaitScope; a thread ends the process with
// one line naming the rank, the operation and the group when a scope stays open longer than the
// timeout. It ends with _exit after printing, not MPI_Abort: the abort goes through the launcher's
// daemon, which may be what is unreachable. Every other rank blocks on the lost one in turn, so
// every rank stops within the timeout.
namespace lattice::comm {

// Starts the watchdog of this process (world rank `rank`); `timeout_seconds` <= 0 turns it off.
// Calling it again changes the timeout.
void start_watchdog(double timeout_seconds, int rank);

// [construction, destruction) is a wait on `op` over `group` (static strings). Scopes may nest:
// the outermost one is timed.
class WaitScope {
 public:
  WaitScope(const char* op, const char* group);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;
};

}  // namespace lattice::comm
