#include "core/standard_output.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lattice::standard_output {

namespace {
const char* command_name = "";
int first_error = 0;  // errno of the first failed write (0: none yet)
// A regular file's offset after the last flush that wrote all it had (-1: not a regular file). The
// commands flush after each whole line (JSON lines, progress lines) and at their end.
off_t whole_to = -1;

// A write that failed part way (a full disk) leaves a line cut short: the file is cut back to where
// the last good flush left it, so it stays whole lines (JSON lines stay JSON). That is never below
// where this command's output began: what the file held before is the user's. (The shell's `>`
// opens the file write-only, so the cut is by offset, not by reading for the last newline.)
void cut_partial_line() {
  struct stat out {}, err {};
  if (whole_to < 0 || ::fstat(STDOUT_FILENO, &out) != 0 || out.st_size <= whole_to) return;
  // `> f 2>&1`: stderr's lines share the file (a human stream, not JSON lines): none is cut.
  if (::fstat(STDERR_FILENO, &err) == 0 && err.st_dev == out.st_dev && err.st_ino == out.st_ino) return;
  (void)!::ftruncate(STDOUT_FILENO, whole_to);
}
}  // namespace

void start(const char* command) {
  command_name = command;
  std::signal(SIGPIPE, SIG_IGN);
  // A file past `ulimit -f` is a failed write (EFBIG) said in one line like a full disk, not a
  // process killed by SIGXFSZ in the middle of a save.
  std::signal(SIGXFSZ, SIG_IGN);
  struct stat st {};
  // Never below the file's size at the start (`>>`; and `1<>f`, which writes over the user's bytes
  // from its offset, must not shorten the file), nor below the offset.
  if (::fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode))
    whole_to = std::max<off_t>(st.st_size, ::lseek(STDOUT_FILENO, 0, SEEK_CUR));
}

bool flush(bool going_on) {
  if (first_error != 0) return false;
  const bool flushed = std::fflush(stdout) == 0;
  const int seen = errno;  // of the failed flush, or (likely) of the write that set the error flag
  if (flushed && !std::ferror(stdout)) {
    if (whole_to >= 0) whole_to = std::max<off_t>(whole_to, ::lseek(STDOUT_FILENO, 0, SEEK_CUR));
    return true;
  }
  // A pipe whose reader left polls as an error, however long ago the failed write was.
  pollfd out{STDOUT_FILENO, POLLOUT, 0};
  first_error = ::poll(&out, 1, 0) == 1 && (out.revents & POLLERR) ? EPIPE : seen != 0 ? seen : EIO;
  // Nothing more goes there: a write after room came back would start in the middle of a line.
  cut_partial_line();
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) ::dup2(null, STDOUT_FILENO), ::close(null);
  std::clearerr(stdout);
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
