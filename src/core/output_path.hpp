#pragma once
// The one rule for every path lattice writes (docs/design.md §14.1), decided here for every output
// flag. lattice writes
//   (a) a path that does not exist yet,
//   (b) a file or directory it made itself and recognises by content as the same kind (OutputKind:
//       a generator marker, a trace's otherData, a checkpoint's manifest), or
//   (c) an existing regular file the user allows with --overwrite (OutputRules::overwrite);
// never one of the command's inputs (OutputRules::inputs: the file itself, anything inside an input
// directory, and no directory output holding an input), never anything inside a directory another
// output of the run owns whole (OutputRules::closed: the --save directory), never a directory, FIFO
// or device where a file goes, and never a directory of another kind: --overwrite replaces files,
// never a directory's contents. A refusal is one InputError "<flag> <path> ...: <why>" before
// anything is touched. Files are written to a temporary sibling and renamed (core/atomic_dir.hpp).
#include <string>
#include <vector>

#include "core/error.hpp"

namespace lattice {

enum class OutputKind {
  html,            // a page of core/html_page.hpp: kHtmlGenerator in its head
  svg,             // a picture: kSvgGenerator right after its <svg> tag
  trace,           // a Chrome trace of report/trace_writer.hpp: "otherData": {"generator": "lattice"}
  bench,           // a `lattice bench --save` result: one JSON object with schema, host and measured_at
  checkpoint_dir,  // --save: kCheckpointManifest listing every entry (or a checkpoint from before manifests)
  data_dir,        // prepare --out: any file of kDataFiles' names in it is lattice's; not a checkpoint or report
  report_dir,      // --report-dir: kRunLog a lattice run log (the first record a start or a step)
};

inline constexpr const char* kHtmlGenerator = "<meta name=\"generator\" content=\"lattice\">";
inline constexpr const char* kSvgGenerator = "<!-- generator: lattice -->";
inline constexpr const char* kTraceGenerator = "lattice";
inline constexpr const char* kCheckpointManifest = "lattice-checkpoint.json";
inline constexpr const char* kRunLog = "run.jsonl";
inline constexpr const char* kRunReport = "report.html";
// What `lattice prepare` writes into its directory (data/tokenizer_files.hpp names them too).
inline constexpr const char* kDataFiles[] = {"train.bin", "val.bin", "tokenizer.json", "tokenizer.model", "data.json"};

// A path of the command's and the flag that named it ("--data", "data"), for the message.
struct NamedPath {
  std::string flag, path;
};

struct OutputRules {
  bool overwrite = false;           // --overwrite: an existing regular file of another kind may be replaced
  std::vector<NamedPath> inputs;    // files and directories the command reads (empty paths are skipped)
  std::vector<NamedPath> closed;    // directories another output owns whole: nothing else goes inside
  // The report directory this command writes (train's --report-dir, lattice report's run): the one
  // whose files it may write. Any other directory holding a run log holds no output of its.
  std::string own_report_dir = "";
};

// Whether `path` is a file or directory of `kind` that lattice wrote (an empty directory counts as
// any directory kind). Reads at most the head and tail of a file.
bool is_own_kind(const std::string& path, OutputKind kind);

// Throws InputError unless `path` may receive an output of `kind` under the rule above. `flag` names
// the output in the message ("--html"). For a file: its missing parent directories are created and a
// file beside it is created and removed, as the write will (core/atomic_dir.hpp check_file_writable).
// Why the file at `path` is not a lattice run log (a report's run.jsonl): "is not a regular file", "is
// not a lattice run log"; "" when it is one (its first line a start or step record) or empty.
std::string run_log_problem(const std::string& path);

void check_output_path(const std::string& path, OutputKind kind, const std::string& flag,
                       const OutputRules& rules = {});

// check_output_path again (the path may have changed since the command started), then `contents`
// written to a temporary sibling, synced and renamed over `path`.
void write_output_file(const std::string& path, OutputKind kind, const std::string& flag, const std::string& contents,
                       const OutputRules& rules = {});

// A directory's path named by its last component: "ck/", "ck//", "ck/." and "ck/./" are "ck"; "/" and
// "." stay themselves. A checkpoint is staged beside its directory (ck.tmp-PID) and locked beside it
// (.ck.lattice-lock), names made from that last component: "ck/" made them inside ck.
std::string directory_path(const std::string& path);

// Whether `inner` is `outer` or lies below it, both taken absolute with links resolved as far as
// they exist (an output path need not exist yet).
bool path_within(const std::string& inner, const std::string& outer);

// DirLock's one refusal that means another run holds the lock (a caller may wait for it), apart from
// the others (a directory that cannot be made, a lock file that cannot be opened).
class LockHeldError : public InputError {
 public:
  using InputError::InputError;
};

// An exclusive lock on an output directory for as long as the object lives: flock on a file beside
// it, "<parent>/.<name>.lattice-lock" (the directory itself is swapped out by each atomic save). The
// kernel drops the lock when its process ends, however it ends, so a relaunch after a crash or a
// kill -9 is never refused. The holder removes the file when it lets go (a run killed leaves it,
// harmlessly); a run that locked a file since removed retries on the path's new file.
class DirLock {
 public:
  DirLock() = default;
  // Throws LockHeldError "<flag> <dir> is being written by another lattice run (pid N on HOST)" if
  // it is held, InputError for any other cause.
  DirLock(const std::string& dir, const std::string& flag);
  ~DirLock() { release(); }
  DirLock(DirLock&& other) noexcept { take(other); }
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  // Removes the lock file (under the lock: a waiter that opened it sees its inode gone and opens
  // anew) and the parent directories made for it, when they are still empty.
  void release() noexcept;
  void take(DirLock& other) noexcept;
  int fd_ = -1;
  std::string lock_path_;
  std::vector<std::string> made_dirs_;  // deepest first
};

}  // namespace lattice
