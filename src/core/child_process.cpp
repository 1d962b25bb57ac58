#include "core/child_process.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lattice {

pid_t spawn_tied_child(const std::vector<std::string>& argv, int out_fd, int err_fd, const char* who,
                       volatile sig_atomic_t* group) {
  sigset_t held, before;
  sigemptyset(&held);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, sig);
  sigprocmask(SIG_BLOCK, &held, &before);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) {
    if (pid > 0 && group) *group = pid;
    sigprocmask(SIG_SETMASK, &before, nullptr);
    return pid;
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);  // the parent died before the line above
  setsid();
  sigprocmask(SIG_SETMASK, &before, nullptr);
  const int null_fd = open("/dev/null", O_RDWR);
  dup2(null_fd, 0);
  dup2(out_fd >= 0 ? out_fd : null_fd, 1);
  dup2(err_fd >= 0 ? err_fd : null_fd, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "%s: error: cannot run %s: %s\n", who, argv[0].c_str(), std::strerror(errno));
  _exit(127);
}

}  // namespace lattice
