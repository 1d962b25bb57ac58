#pragma once
// The comm watchdog: a rank that stops responding (SIGSTOP, a dead link, a deadlock) must not hang
// the job. Every blocking communication runs inside a WaitScope; a thread ends the process with
// one line naming the rank, the operation and the group when a scope stays open longer than the
// timeout. It ends with _exit after printing, not MPI_Abort: the abort goes through the launcher's
// daemon, which may be what is unreachable. Every other rank blocks on the lost one in turn, so
// every rank stops within the timeout.
//
// A rank that loses a peer (a stall the watchdog sees, or an MPI error on a link: the peer died or
// the connection broke) exits with kExitRankLost, not 1: 1 is bad input, and `lattice launch`
// restarts a job only on a lost rank (docs/recovery.md). Before exiting it prints its one line on
// stderr and, when the run writes JSON Lines, {"event":"rank_lost", ...} on stdout.
#include <string>

namespace lattice::comm {

inline constexpr int kExitRankLost = 3;

// Whether exit_rank_lost also writes the JSON line (train --json); off by default.
void report_rank_lost_as_json(bool json);

// Prints "lattice: rank R: <what>; stopping" on stderr (and the rank_lost JSON line with `reason`
// "stalled" or "peer_failed" and `detail`), then _exit(kExitRankLost). Safe from any thread.
[[noreturn]] void exit_rank_lost(const char* reason, const std::string& what, const std::string& detail);

// Makes an MPI error on the world communicator (and every communicator split from it) exit
// through exit_rank_lost ("peer_failed") rather than OpenMPI's abort with status 1.
void exit_on_mpi_errors();

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
