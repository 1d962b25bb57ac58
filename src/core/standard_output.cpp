#include "core/standard_output.hpp"

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
}

bool flush(bool going_on) {
  if (first_error != 0) return false;
  errno = 0;
  const bool ok = std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (ok) return true;
  first_error = errno != 0 ? errno : EIO;
  std::fprintf(stderr, "lattice %s: error: cannot write standard output: %s%s\n", command_name,
               std::strerror(first_error), going_on ? " (carrying on without it)" : "");
  return false;
}

int exit_status(int status) {
  flush(false);
  return first_error == 0 || first_error == EPIPE ? status : 1;
}

}  // namespace lattice::standard_output
