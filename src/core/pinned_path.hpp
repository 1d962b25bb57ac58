#pragma once
// PinnedPath: what a path names held open from one instant (a directory's files, or one file), so that
// a reader of a directory another process replaces whole (a checkpoint a run saves into:
// core/atomic_dir.hpp swaps a new directory in and removes the old) reads the one version it began
// with to its end. A removed file stays readable through a descriptor, so the save neither waits for
// the reader nor spoils its read. A file named alone (--init ck/model.safetensors) is pinned too: its
// tensors are read by opening it again, each time.
//
// While a path is pinned, pinned_path maps it and "<dir>/<name>" to the pinned files, and
// directory_identity gives the identity it had when pinned: the readers below (input_file.hpp,
// safetensors, the checkpoint's checks) open files through pinned_path and need no descriptor of
// their own. Linux's /proc/self/fd names the pinned files; a path that cannot be pinned (gone,
// unreadable, neither a directory nor a regular file, or a directory of over kMaxPinnedEntries entries)
// is read as it stands, as before.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace lattice {

// Entries of a directory a pin holds open at most (a checkpoint holds about ten; a pin takes no more of
// the process's descriptors than this, and none where it runs out).
inline constexpr int kMaxPinnedEntries = 64;

class PinnedPath {
 public:
  // Pins `path` until destroyed. Nested pins of one path share the outer one's version.
  explicit PinnedPath(const std::string& path);
  ~PinnedPath();
  PinnedPath(const PinnedPath&) = delete;
  PinnedPath& operator=(const PinnedPath&) = delete;
  // Whether this object holds the pin (false: not pinnable, or an outer pin serves).
  bool holds() const { return owner_; }

 private:
  std::string key_;
  bool owner_ = false;
};

// The path to open for `path`: a pinned path's pinned file or directory; under a pinned directory its
// pinned file, a name the pinned version did not hold (or not as a regular file) resolved in that
// version's directory; `path` otherwise. Messages still name `path`. The result names a descriptor
// of the pin: open it while the pin lives (each reader opens it at once).
std::string pinned_path(const std::string& path);

// The names a pinned directory held when it was pinned (its entries' names, sorted), or `false`
// where `dir` is not pinned.
bool pinned_names(const std::string& dir, std::vector<std::string>& names);

// The directory at a path: its device, inode and change time (all 0 when there is none); a pinned
// directory's as it was pinned. The inode alone is not enough: a save's new directory often takes
// the inode the one before last freed (seen after 0.5 s of saves every few milliseconds); its change
// time, set as it was made and renamed in, tells them apart.
using DirectoryIdentity = std::array<uint64_t, 4>;
DirectoryIdentity directory_identity(const std::string& dir);

}  // namespace lattice
