#include "core/atomic_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace lattice {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// fsync a file or directory by path; directories must be synced for renames in them to persist.
void fsync_path(const std::string& path, bool is_dir) {
  const int fd = ::open(path.c_str(), (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  require(fd >= 0, "cannot open " + path + " to sync it: " + errno_text());
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  require(ok, "cannot sync " + path + ": " + why);
}

void make_parent_dirs(const std::string& path) {
  std::error_code ec;
  const std::string parent = parent_of(path);
  fs::create_directories(parent, ec);
  require(!ec, "cannot create directory " + parent + ": " + ec.message());
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// "<host> <pid>": who is writing a temporary directory.
std::string marker_text() { return this_host() + " " + std::to_string(::getpid()) + "\n"; }

// Whether `digits` (the tail of a name) is the id of a process of this host that is gone.
bool dead_process(const std::string& digits) {
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  const long pid = std::atol(digits.c_str());
  return pid > 0 && pid != ::getpid() && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

// Whether `dir` is empty or holds only an empty marker file (a save killed before its marker said whose).
bool holds_at_most_an_empty_marker(const fs::path& dir) {
  std::error_code ec;
  int entries = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (++entries > 1 || it->path().filename() != AtomicDir::kMarker || !it->is_regular_file(size_ec) ||
        fs::file_size(it->path(), size_ec) != 0 || size_ec)
      return false;
  }
  return !ec;
}

// Temporaries in `parent` left by processes of this host that are gone: NAME.lattice-trash-PID (a
// replaced version being deleted; only lattice makes these names), and NAME.tmp-PID / NAME.old-PID
// carrying our marker with that host and pid.
void remove_stale_temporaries(const std::string& parent) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code ignored;
    if (!it->is_directory(ignored)) continue;
    const std::string name = it->path().filename().string();
    const size_t trash = name.rfind(AtomicDir::kTrashInfix);
    if (trash != std::string::npos && trash > 0) {
      if (dead_process(name.substr(trash + std::strlen(AtomicDir::kTrashInfix)))) fs::remove_all(it->path(), ignored);
      continue;
    }
    const size_t dash = name.find_last_of('-');
    if (dash == std::string::npos || dash < 5) continue;
    const std::string kind = name.substr(dash - 4, 4), digits = name.substr(dash + 1);
    if ((kind != ".tmp" && kind != ".old") || !dead_process(digits)) continue;
    std::ifstream marker(it->path() / AtomicDir::kMarker);
    std::string host, owner;
    if (!(marker >> host >> owner)) {
      // Killed between making the directory and writing its marker (before or after creating the
      // marker's file): it holds nothing else, so removing it loses nothing. One holding anything
      // more is not known to be ours, and stays.
      marker.close();
      if (holds_at_most_an_empty_marker(it->path())) fs::remove_all(it->path(), ignored);
      continue;
    }
    if (host != this_host() || owner != digits) continue;  // not ours
    fs::remove_all(it->path(), ignored);
  }
}

}  // namespace

void remove_dead_saves_beside(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(parent_of(path), ec)) remove_stale_temporaries(parent_of(path));
}

std::vector<std::string> make_dirs_noting(const std::string& dir, std::error_code& ec) {
  std::vector<std::string> made;
  std::error_code probe;
  for (fs::path p = dir; !p.empty() && !fs::exists(p, probe); p = p.parent_path()) made.push_back(p.string());
  fs::create_directories(dir, ec);
  if (ec) remove_empty_dirs(made), made.clear();
  return made;
}

void remove_empty_dirs(const std::vector<std::string>& dirs) noexcept {
  std::error_code ignored;
  for (const std::string& d : dirs) fs::remove(d, ignored);  // fails, harmlessly, unless empty
}

void check_file_writable(const std::string& path, const std::string& what) {
  std::error_code ec;
  const std::string head = "cannot write " + what + " " + path + ": ";
  require(!fs::is_directory(path, ec), head + "it is a directory");
  const std::string parent = parent_of(path);
  // The parents the probe needs are made for it and removed after it: the write makes them
  // again, and a run refused in between leaves no empty directory behind.
  const std::vector<std::string> made = make_dirs_noting(parent, ec);
  require(!ec, head + "cannot create " + parent + ": " + ec.message());
  // A file created and removed beside it: what the atomic write will do (permissions, read-only
  // file systems, a parent that is a file).
  const std::string probe = path + ".probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  const std::string why = fd >= 0 ? "" : errno_text();
  if (fd >= 0) ::close(fd), ::unlink(probe.c_str());
  remove_empty_dirs(made);
  require(fd >= 0, head + why);
}

FreeSpace free_space_at(const std::string& path) {
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);  // not lexically normalised: "link/.." is the link target's parent
  while (!fs::exists(at, ec) && at.has_parent_path() && at != at.parent_path()) at = at.parent_path();
  struct statvfs st {};
  if (::statvfs(at.c_str(), &st) != 0) return {};
  // root may write into the blocks reserved for it (ext4's 5%), as a save run as root will. A file
  // system that reports no size, or no file count (some FUSE mounts, btrfs's inodes), does not say.
  const bool root = ::geteuid() == 0;
  FreeSpace free;
  if (st.f_blocks > 0) free.bytes = int64_t(root ? st.f_bfree : st.f_bavail) * int64_t(st.f_frsize);
  if (st.f_files > 0) free.files = int64_t(root ? st.f_ffree : st.f_favail);
  return free;
}

AtomicFile::AtomicFile(const std::string& final_path)
    : final_path_(final_path), temp_path_(final_path + ".tmp-" + std::to_string(::getpid())) {
  make_parent_dirs(final_path_);
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  require(fd_ >= 0, "cannot write " + temp_path_ + ": " + errno_text());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  require(fd_ >= 0, "cannot write " + temp_path_ + ": file already synced");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    require(n > 0, "cannot write " + temp_path_ + ": " + errno_text());
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::sync() {
  if (synced_) return;
  // Each system call's result is taken before its message is built: a function's arguments are
  // evaluated in no set order, so errno_text() in the same call could read errno before the call ran.
  const bool synced = fd_ >= 0 && ::fsync(fd_) == 0;
  require(synced, "cannot sync " + temp_path_ + ": " + errno_text());
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  require(closed, "cannot write " + temp_path_ + ": " + errno_text());
  synced_ = true;
}

void AtomicFile::commit() {
  require(!committed_, "cannot commit " + final_path_ + ": already committed");
  sync();
  const bool renamed = ::rename(temp_path_.c_str(), final_path_.c_str()) == 0;
  require(renamed, "cannot write " + final_path_ + ": " + errno_text());
  committed_ = true;
  fsync_path(parent_of(final_path_), true);
}

void write_file_atomically(const std::string& path, const void* data, size_t bytes) {
  AtomicFile file(path);
  file.write(data, bytes);
  file.commit();
}

AtomicDir::AtomicDir(const std::string& final_path)
    : final_path_(final_path), temp_path_(final_path + ".tmp-" + std::to_string(::getpid())) {
  std::error_code ec;
  require(!fs::exists(final_path_, ec) || fs::is_directory(final_path_, ec),
          "cannot save to " + final_path_ + ": it exists and is not a directory");
  make_parent_dirs(final_path_);
  remove_stale_temporaries(parent_of(final_path_));
  fs::remove_all(temp_path_, ec);  // a leftover from a crashed process that had our pid
  fs::create_directory(temp_path_, ec);
  require(!ec, "cannot create directory " + temp_path_ + ": " + ec.message());
  const std::string marker = marker_text();
  std::ofstream(temp_path_ + "/" + kMarker) << marker;
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_path_, ec);  // best effort: a destructor must not throw
}

void AtomicDir::sync() {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(temp_path_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file())
      fsync_path(it->path().string(), false);
    else if (it->is_directory())
      fsync_path(it->path().string(), true);
  }
  require(!ec, "cannot list " + temp_path_ + ": " + ec.message());
  fsync_path(temp_path_, true);
}

void AtomicDir::commit() {
  require(!committed_, "cannot commit " + final_path_ + ": already committed");
  sync();
  std::error_code ec;
  if (!fs::exists(final_path_, ec)) {
    const bool renamed = ::rename(temp_path_.c_str(), final_path_.c_str()) == 0;
    require(renamed, "cannot rename " + temp_path_ + " to " + final_path_ + ": " + errno_text());
    committed_ = true;
    fsync_path(parent_of(final_path_), true);
    return;
  }
  // Preferred: one atomic exchange, so final_path names a complete checkpoint at every instant;
  // the temporary name then holds the previous version, which is renamed to a trash name (which only
  // lattice makes: a later save removes it even if this process dies halfway through deleting it).
  // On a failure the new version is removed before the error goes up (as the destructor would; but a
  // rank's error may end its process without unwinding) and the previous one stays where it was.
  const std::string trash = final_path_ + kTrashInfix + std::to_string(::getpid());
  std::string previous = temp_path_;
  auto give_up = [&](const std::string& what, int error) {
    fs::remove_all(temp_path_, ec);
    fail(what + ": " + std::strerror(error));
  };
  if (::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, final_path_.c_str(), RENAME_EXCHANGE) != 0) {
    const int exchange_error = errno;  // read now: the calls below set errno too
    // Only a filesystem (or kernel) without RENAME_EXCHANGE takes the two renames; any other error
    // (EPERM of an immutable directory, EACCES, EBUSY) would meet them too.
    if (exchange_error != EINVAL && exchange_error != ENOSYS && exchange_error != ENOTSUP)
      give_up("cannot replace " + final_path_ + " with " + temp_path_, exchange_error);
    // Move the old one aside, then rename the new one in.
    previous = trash;
    fs::remove_all(previous, ec);
    if (::rename(final_path_.c_str(), previous.c_str()) != 0)
      give_up("cannot move the previous " + final_path_ + " aside", errno);
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
      const int error = errno;
      if (::rename(previous.c_str(), final_path_.c_str()) != 0) {  // put the previous version back
        // Neither version at the name: both kept (a later save would remove the trash name's) and named.
        committed_ = true;
        fail("cannot rename " + temp_path_ + " to " + final_path_ + ": " + std::strerror(error) +
             "; the previous version is in " + previous + " and the new one in " + temp_path_ + ": move one back");
      }
      give_up("cannot rename " + temp_path_ + " to " + final_path_, error);
    }
  }
  committed_ = true;
  fsync_path(parent_of(final_path_), true);
  if (previous != trash && ::rename(previous.c_str(), trash.c_str()) == 0) previous = trash;
  fs::remove_all(previous, ec);
}

void AtomicDir::move_to(const std::string& path) {
  require(!committed_, "cannot move " + temp_path_ + ": already committed");
  const bool renamed = ::rename(temp_path_.c_str(), path.c_str()) == 0;
  require(renamed, "cannot rename " + temp_path_ + " to " + path + ": " + errno_text());
  committed_ = true;
}

}  // namespace lattice
