#include "core/standard_output.hpp"

#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lattice::standard_output {

namespace {
const char* command_name = "";
int first_error = 0;  // errno of the first failed write (0: none yet)
}  // namespace

void start(const char* command) {
  command_name = command;
  std::signal(SIGPIPE, SIG_IGN);
  // A file past `ulimit -f` is a failed write (EFBIG) said in one line like a full disk, not a
  // process killed by SIGXFSZ in the middle of a save.
  std::signal(SIGXFSZ, SIG_IGN);
}

bool flush(bool going_on) {
  if (first_error != 0) return false;
  const bool flushed = std::fflush(stdout) == 0;
  const int seen = errno;  // of the failed flush, or (likely) of the write that set the error flag
  if (flushed && !std::ferror(stdout)) return true;
  // A pipe whose reader left polls as an error, however long ago the failed write was.
  pollfd out{STDOUT_FILENO, POLLOUT, 0};
  first_error = ::poll(&out, 1, 0) == 1 && (out.revents & POLLERR) ? EPIPE : seen != 0 ? seen : EIO;
  // A reader that left is no failure (the exit status stays the command's): a note, not an error.
  if (first_error == EPIPE)
    std::fprintf(stderr, "lattice %s: note: cannot write standard output: its reader left (%s)%s\n", command_name,
                 std::strerror(first_error), going_on ? "; carrying on without it" : "");
  else
    std::fprintf(stderr, "lattice %s: error: cannot write standard output: %s%s\n", command_name,
                 std::strerror(first_error), going_on ? " (carrying on without it)" : "");
  return false;
}

int exit_status(int status) {
  flush(false);
  return first_error == 0 || first_error == EPIPE ? status : 1;
}

}  // namespace lattice::standard_output
