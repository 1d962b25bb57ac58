#include "core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/pinned_path.hpp"

namespace lattice {

namespace {

const char* what_it_is(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of another type";
}

}  // namespace

std::string why_absent(const std::string& path) {
  struct stat st {};
  if (::stat(pinned_path(path).c_str(), &st) != 0 && errno == ENOTDIR) return ": " + std::string(std::strerror(ENOTDIR));
  return " does not exist";
}

bool names_a_non_directory(const std::string& path) {
  struct stat st {};
  if (::stat(pinned_path(path).c_str(), &st) != 0) return errno == ENOTDIR;
  return !S_ISDIR(st.st_mode);
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(pinned_path(path).c_str(), &st) != 0)
    fail(what + " " + path + (errno == ENOENT ? " does not exist" : ": " + std::string(std::strerror(errno))));
  require(S_ISREG(st.st_mode), what + " " + path + " is not a regular file (it is " + what_it_is(st.st_mode) + ")");
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
  require_regular_file(path, what);
  // O_NONBLOCK: should the path turn into a FIFO after the check, the open does not wait for a writer.
  const int fd = ::open(pinned_path(path).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  require(fd >= 0, "cannot read " + what + " " + path + ": " + std::strerror(errno));
  std::string text, why;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    why = " is not a regular file (it changed while it was opened)";
  else if (size_t(st.st_size) > max_bytes)
    why = " is larger than " + std::to_string(max_bytes) + " bytes";
  else
    text.resize(size_t(st.st_size));
  for (size_t done = 0; why.empty() && done < text.size();) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = ": cannot read it: " + std::string(std::strerror(errno));
    else if (n == 0) why = ": it shrank while it was read";
    else done += size_t(n);
  }
  ::close(fd);
  require(why.empty(), what + " " + path + why);
  return text;
}

}  // namespace lattice
