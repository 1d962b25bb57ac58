#pragma once
// Crash-safe replacement of a file or a directory: everything is written under a temporary
// sibling name, fsynced, and only then renamed over the final name. A crash at any point leaves
// either the complete old version or the complete new one, never a mix or a half-written file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <system_error>

namespace lattice {

// A file written to `final_path + ".tmp-<pid>"` (never an existing file: a user's file of that name
// is an error, not overwritten) and renamed over final_path by commit().
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& final_path);
  ~AtomicFile();  // removes the temporary file if commit() was not called
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void sync();    // fsync and close: the data is on disk, not yet in place (commit() calls it if needed)
  void commit();  // rename over final_path, fsync the parent directory

 private:
  std::string final_path_, temp_path_;
  int fd_ = -1;
  bool synced_ = false, committed_ = false;
};

// Writes a whole buffer atomically (an AtomicFile with one write).
void write_file_atomically(const std::string& path, const void* data, size_t bytes);

// Before the work that will write it: `path` can be written (missing parent directories are
// created, as the write would). Throws InputError naming `what` (e.g. "--trace") and the reason.
void check_file_writable(const std::string& path, const std::string& what);

// Removes what saves killed mid-write left beside `path` (AtomicDir's temporaries and trash of dead
// processes of this host, as every save does first), so that the space they hold counts as free.
void remove_dead_saves_beside(const std::string& path);

// What a write by this process may still take on the file system that holds `path` (or, where it
// does not exist yet, its nearest existing parent): bytes and files (inodes); -1 where the system
// does not say.
struct FreeSpace {
  int64_t bytes = -1, files = -1;
};
FreeSpace free_space_at(const std::string& path);

// Makes `dir` with its missing parents and returns those it made, deepest first (empty, with `ec`
// set, when it could not), so that a caller whose output is not written after all can take them
// back with remove_empty_dirs: a refused run leaves no empty directory behind.
std::vector<std::string> make_dirs_noting(const std::string& dir, std::error_code& ec);
// Removes each of `dirs` that is still empty, in order (a non-empty one stays, harmlessly).
void remove_empty_dirs(const std::vector<std::string>& dirs) noexcept;

// A directory built at `final_path + ".tmp-<pid>"` and swapped in for final_path by commit(). The
// temporary directory holds a marker file (kMarker: host and pid) from its first instant, so that a
// later AtomicDir in the same parent directory removes the temporaries of processes of this host
// that are no longer alive (a killed save), and nothing else.
class AtomicDir {
 public:
  static constexpr const char* kMarker = ".lattice-save";
  static constexpr const char* kTrashInfix = ".lattice-trash-";  // a replaced version being deleted
  explicit AtomicDir(const std::string& final_path);
  ~AtomicDir();  // removes the temporary directory if commit() was not called
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  const std::string& path() const { return temp_path_; }  // where to write the files
  // fsyncs every file and the directory, not yet in place (commit() calls it: then only the swap
  // remains; a background save syncs here, off the training thread: docs/design.md §14).
  void sync();
  // fsyncs every file and the directory, then replaces final_path (an existing directory there is
  // exchanged atomically where the filesystem allows it, else renamed aside first) and removes
  // the previous version.
  void commit();
  // Instead of commit: renames the temporary directory to `path` (which must not exist) and keeps it.
  void move_to(const std::string& path);

 private:
  std::string final_path_, temp_path_;
  bool committed_ = false;
};

}  // namespace lattice
