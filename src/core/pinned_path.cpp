#include "core/pinned_path.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace lattice {

namespace {

// The descriptors of one pinned path, closed when it goes (also when a try throws halfway).
struct Pin {
  int dir_fd = -1;                   // the directory, or the file pinned alone
  std::map<std::string, int> files;  // regular files by name
  std::vector<std::string> names;    // every entry, sorted
  DirectoryIdentity identity{};

  Pin() = default;
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  Pin(Pin&& other) noexcept
      : dir_fd(std::exchange(other.dir_fd, -1)), files(std::move(other.files)), names(std::move(other.names)),
        identity(other.identity) {
    other.files.clear();
  }
  ~Pin() {
    for (const auto& [name, fd] : files) ::close(fd);
    if (dir_fd >= 0) ::close(dir_fd);
  }
};

std::mutex pins_mutex;
std::map<std::string, Pin>& pins() {
  static std::map<std::string, Pin> all;
  return all;
}

// One spelling per path: "ck", "ck/", "./ck" and, from inside it, "." are the same key (absolute and
// lexically normal: a reader composes "<dir>/<name>" from the string the pin was made with, and no
// link is resolved, so no file system lookup is needed).
std::string key_of(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) p = path;
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.string();
}

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

DirectoryIdentity identity_of(const struct stat& st) {
  return {uint64_t(st.st_dev), uint64_t(st.st_ino), uint64_t(st.st_ctim.tv_sec), uint64_t(st.st_ctim.tv_nsec)};
}

enum class Outcome { pinned, again, missing, unpinnable };

// One try. A regular file is opened alone. A directory is opened, its entries listed and every
// regular file opened through the directory's descriptor, so each file is this one directory's
// whatever is renamed meanwhile. The directory must still be at `dir` once all are open: it was then
// not yet moved aside, so no save had begun removing its files, and the list is whole.
Outcome try_pin(const std::string& dir, Pin& pin) {
  // What the path is, before anything is opened: a FIFO's open would wait for a writer, a device's
  // might act. Not there: a save by two renames (a file system without the exchange) leaves no
  // directory there for a moment, hence a few tries more; a path not there at all is its reader's to name.
  struct stat named {};
  if (::stat(dir.c_str(), &named) != 0) return errno == ENOENT ? Outcome::missing : Outcome::unpinnable;
  if (!S_ISDIR(named.st_mode) && !S_ISREG(named.st_mode)) return Outcome::unpinnable;
  pin.dir_fd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (S_ISDIR(named.st_mode) ? O_DIRECTORY : 0));
  if (pin.dir_fd < 0) return errno == ENOENT || errno == ENOTDIR ? Outcome::again : Outcome::unpinnable;
  struct stat held {};
  if (::fstat(pin.dir_fd, &held) != 0 || ::access(fd_path(pin.dir_fd).c_str(), F_OK) != 0) return Outcome::unpinnable;
  if (S_ISREG(held.st_mode)) {
    pin.identity = identity_of(held);
    return Outcome::pinned;
  }
  if (!S_ISDIR(held.st_mode)) return Outcome::again;  // replaced by something else between stat and open
  const int list_fd = ::dup(pin.dir_fd);
  DIR* listing = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
  if (!listing) {
    if (list_fd >= 0) ::close(list_fd);
    return Outcome::unpinnable;
  }
  const std::unique_ptr<DIR, int (*)(DIR*)> closes_listing(listing, ::closedir);
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") pin.names.push_back(name);
    if (int(pin.names.size()) > kMaxPinnedEntries) return Outcome::unpinnable;
  }
  std::sort(pin.names.begin(), pin.names.end());
  for (const std::string& name : pin.names) {
    struct stat st {};
    // Only regular files are opened (a FIFO or a device is left to the reader's own check, which names
    // it); a link is followed, as the reader's open would.
    if (::fstatat(pin.dir_fd, name.c_str(), &st, 0) != 0) {
      // Gone since the listing (a save removing this version: try again), or a link to nothing or a
      // loop, which the reader names.
      if (errno == ENOENT && ::fstatat(pin.dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return Outcome::again;
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;
    const int fd = ::openat(pin.dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ENOENT) return Outcome::again;
      // Out of descriptors: the pin gives up rather than leave the reader none.
      if (errno == EMFILE || errno == ENFILE) return Outcome::unpinnable;
      continue;  // unreadable: the reader's open says why
    }
    try {
      pin.files.emplace(name, fd);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  struct stat now {};
  if (::stat(dir.c_str(), &now) != 0 || now.st_dev != held.st_dev || now.st_ino != held.st_ino) return Outcome::again;
  pin.identity = identity_of(now);
  return Outcome::pinned;
}

}  // namespace

PinnedPath::PinnedPath(const std::string& path) : key_(key_of(path)) {
  if (path.empty()) return;
  // An outer pin serves: of this path, or of a directory that holds it (pinning its file anew would
  // take the live one, another version than the directory's).
  if (pinned_path(path) != path) return;
  const std::lock_guard<std::mutex> lock(pins_mutex);
  // A save swaps directories within microseconds and a try takes about as long: a try that met one
  // is made again, a bounded number of times (after which the path is read as it stands). A path
  // missing gets a few tries (the gap of a save by two renames), not a thousand.
  for (int attempt = 0, missing = 0; attempt < 1000 && missing < 20; ++attempt) {
    Pin pin;
    const Outcome outcome = try_pin(path, pin);
    if (outcome == Outcome::pinned) {
      owner_ = pins().emplace(key_, std::move(pin)).second;  // another thread's pin of it first: that one serves
      return;
    }
    if (outcome == Outcome::unpinnable) return;
    if (outcome == Outcome::missing) {
      ++missing;
      std::this_thread::yield();
    }
  }
}

PinnedPath::~PinnedPath() {
  if (!owner_) return;
  const std::lock_guard<std::mutex> lock(pins_mutex);
  pins().erase(key_);  // its descriptors closed
}

std::string pinned_path(const std::string& path) {
  const std::lock_guard<std::mutex> lock(pins_mutex);
  if (pins().empty() || path.empty()) return path;
  const std::filesystem::path p(key_of(path));
  if (const auto it = pins().find(p.string()); it != pins().end()) return fd_path(it->second.dir_fd);
  // The nearest pinned directory above `path`: a file in it is its pinned file, anything else (a
  // name it did not hold, a deeper path) is looked up in the pinned version's own directory.
  for (std::filesystem::path up = p.parent_path(); !up.empty(); up = up.parent_path()) {
    const auto it = pins().find(up.string());
    if (it != pins().end()) {
      const Pin& pin = it->second;
      if (up == p.parent_path())
        if (const auto file = pin.files.find(p.filename().string()); file != pin.files.end())
          return fd_path(file->second);
      return fd_path(pin.dir_fd) + "/" + p.lexically_relative(up).string();
    }
    if (up == up.parent_path()) break;  // the root
  }
  return path;
}

bool pinned_names(const std::string& dir, std::vector<std::string>& names) {
  const std::lock_guard<std::mutex> lock(pins_mutex);
  const auto it = pins().find(key_of(dir));
  if (it == pins().end()) return false;
  names = it->second.names;
  return true;
}

DirectoryIdentity directory_identity(const std::string& dir) {
  {
    const std::lock_guard<std::mutex> lock(pins_mutex);
    if (const auto it = pins().find(key_of(dir)); !dir.empty() && it != pins().end()) return it->second.identity;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {0, 0, 0, 0};
  return identity_of(st);
}

}  // namespace lattice
