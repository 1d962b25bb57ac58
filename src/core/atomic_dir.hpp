#pragma once
// Crash-safe replacement of a file or a directory: everything is written under a temporary
// sibling name, fsynced, and only then renamed over the final name. A crash at any point leaves
// either the complete old version or the complete new one, never a mix or a half-written file.
#include <cstddef>
#include <string>

namespace lattice {

// A file written to `final_path + ".tmp"` and renamed over final_path by commit().
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& final_path);
  ~AtomicFile();  // removes the temporary file if commit() was not called
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();  // fsync, close, rename over final_path, fsync the parent directory

 private:
  std::string final_path_, temp_path_;
  int fd_ = -1;
};

// Writes a whole buffer atomically (an AtomicFile with one write).
void write_file_atomically(const std::string& path, const void* data, size_t bytes);

// A directory built at `final_path + ".tmp-<pid>"` and swapped in for final_path by commit().
class AtomicDir {
 public:
  explicit AtomicDir(const std::string& final_path);
  ~AtomicDir();  // removes the temporary directory if commit() was not called
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  const std::string& path() const { return temp_path_; }  // where to write the files
  // fsyncs every file and the directory, then replaces final_path (an existing directory there is
  // exchanged atomically where the filesystem allows it, else renamed aside first) and removes
  // the previous version.
  void commit();

 private:
  std::string final_path_, temp_path_;
  bool committed_ = false;
};

}  // namespace lattice
