#pragma once
// A child process that cannot outlive its parent: lattice launch's jobs and plan --hardware local's
// MPI measurement (each an mpirun whose ranks must end when the lattice that started them does).
#include <csignal>
#include <string>
#include <vector>

#include <sys/types.h>

namespace lattice {

// fork + exec of argv with stdin from /dev/null; the child leads its own session (so its own process
// group too: a terminal's Ctrl-C reaches the parent alone, and mpirun's ranks stay in the child's
// session, where lattice launch finds what is left of a job). The child gets SIGTERM when the parent
// dies, however it dies (mpirun then ends its ranks). stdout and stderr go to `out_fd`/`err_fd` (-1:
// /dev/null); an exec that fails says so on stderr after `who`. Returns the child's pid, or -1.
// SIGINT, SIGTERM and SIGHUP are held while it forks: the child drops the parent's handlers before
// it can run one, and the parent stores the child's pid in `group` (when given) before one it
// receives is handled, so a Ctrl-C in that instant reaches the new child too.
pid_t spawn_tied_child(const std::vector<std::string>& argv, int out_fd, int err_fd, const char* who,
                       volatile sig_atomic_t* group = nullptr);

}  // namespace lattice
