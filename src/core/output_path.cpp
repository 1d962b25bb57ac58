#include "core/output_path.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#ifndef STATX_ATTR_MOUNT_ROOT  // Linux 5.8's; older C libraries' headers lack the name
#define STATX_ATTR_MOUNT_ROOT 0x00002000
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/atomic_dir.hpp"
#include "core/error.hpp"

namespace fs = std::filesystem;

namespace lattice {

namespace {

constexpr size_t kSniffBytes = 64 << 10;  // a signature sits in a file's first (or last) bytes

// Up to `bytes` of a regular file, from its start or from its end; "" when it cannot be read.
std::string sniff(const std::string& path, size_t bytes, bool from_end = false) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const size_t size = size_t(st.st_size), take = std::min(size, bytes);
    text.resize(take);
    const ssize_t n = ::pread(fd, text.data(), take, off_t(from_end ? size - take : 0));
    text.resize(n > 0 ? size_t(n) : 0);
  }
  ::close(fd);
  return text;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

const char* kind_text(OutputKind kind) {
  switch (kind) {
    case OutputKind::html: return "an HTML page";
    case OutputKind::svg: return "an SVG picture";
    case OutputKind::trace: return "a trace";
    case OutputKind::bench: return "a bench result";
    case OutputKind::checkpoint_dir: return "a checkpoint directory";
    case OutputKind::data_dir: return "a prepared-data directory";
    case OutputKind::report_dir: return "a report directory";
  }
  return "an output";
}

bool is_directory_kind(OutputKind kind) {
  return kind == OutputKind::checkpoint_dir || kind == OutputKind::data_dir || kind == OutputKind::report_dir;
}

bool own_file(const std::string& path, OutputKind kind) {
  const std::string head = sniff(path, kSniffBytes);
  switch (kind) {
    case OutputKind::html:
      // Pages from before the generator marker: html_page.hpp's exact opening and its page script.
      return head.find(kHtmlGenerator) != std::string::npos ||
             (starts_with(head, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>") &&
              sniff(path, 4096, true).find("setAttribute('data-charts-ready'") != std::string::npos);
    case OutputKind::svg:
      return starts_with(head, "<svg") && head.find(kSvgGenerator) != std::string::npos;
    case OutputKind::trace:
      // The writer's JSON (keys in order; a layout may follow the generator); before the marker, its
      // first event named rank 0's track.
      return starts_with(head, std::string("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"") +
                                   kTraceGenerator + "\"") ||
             starts_with(head, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[{\"args\":{\"name\":\"rank 0\"}");
    case OutputKind::bench: {
      const nlohmann::json j = nlohmann::json::parse(head, nullptr, false);
      return j.is_object() && j.contains("schema") && j.contains("host") && j.contains("measured_at");
    }
    default: return false;
  }
}

// The names in `dir` (not recursive); `ok` false when it cannot be listed.
std::vector<std::string> entries_of(const std::string& dir, bool& ok) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    names.push_back(it->path().filename().string());
  ok = !ec;
  return names;
}

bool holds(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A checkpoint written before checkpoints carried a manifest: exactly its three files, and a
// trainer.json that records a model and a step.
bool is_legacy_checkpoint(const std::string& dir, const std::vector<std::string>& entries) {
  for (const std::string& name : entries)
    if (name != "model.safetensors" && name != "optimizer.safetensors" && name != "trainer.json") return false;
  const nlohmann::json state = nlohmann::json::parse(sniff(dir + "/trainer.json", kSniffBytes), nullptr, false);
  return state.is_object() && state.contains("model") && state.contains("step") && holds(entries, "model.safetensors");
}

// Whether the directory `path` is the root of a mount (a file system's or a bind mount's): statx's
// attribute where the kernel reports it, else a device other than its parent's.
bool is_mount_point(const std::string& path) {
  struct statx st {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_BASIC_STATS, &st) == 0 && (st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
    return (st.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  struct stat self {}, parent {};
  const std::string up = directory_path(path) + "/..";
  return ::stat(path.c_str(), &self) == 0 && ::stat(up.c_str(), &parent) == 0 && self.st_dev != parent.st_dev;
}

// Why the existing directory `dir` is not lattice's of `kind` ("" when it is). The messages keep the
// words earlier versions printed (scripts and tests look for them).
std::string why_not_own_dir(const std::string& dir, OutputKind kind, bool overwrite) {
  bool listed = false;
  const std::vector<std::string> entries = entries_of(dir, listed);
  if (!listed) return "cannot list it";
  if (entries.empty()) return "";
  const std::string manifest = dir + "/" + kCheckpointManifest;
  if (kind == OutputKind::checkpoint_dir) {
    if (!holds(entries, kCheckpointManifest))
      return is_legacy_checkpoint(dir, entries) ? "" : "it holds " + entries.front() + " and is not a lattice checkpoint (no " +
                                                       kCheckpointManifest + "); choose a new or empty directory";
    std::vector<std::string> files;
    try {
      files = nlohmann::json::parse(sniff(manifest, kSniffBytes)).at("files").get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception& e) {
      return manifest + " is not a valid checkpoint manifest: " + e.what();
    }
    for (const std::string& name : entries)
      if (!holds(files, name)) return "it holds " + name + ", which its checkpoint manifest does not list; move it away first";
    return "";
  }
  if (kind == OutputKind::report_dir) {
    if (!holds(entries, kRunLog)) return "it holds files and no run.jsonl: name a new or empty directory (or an earlier report's)";
    const std::string problem = run_log_problem(dir + "/" + kRunLog);
    return problem.empty() ? "" : "its run.jsonl " + problem + ": name a new or empty directory";
  }
  // A prepared-data directory: never a checkpoint's or a report's (their tokenizer.model and
  // run.jsonl are not ours to replace), and each file prepare writes, where one is there, lattice's.
  if (holds(entries, kCheckpointManifest) || holds(entries, "model.safetensors") || holds(entries, "trainer.json"))
    return "it is a checkpoint directory, not a prepared-data directory: name a new or empty directory";
  if (holds(entries, kRunLog)) return "it is a report directory, not a prepared-data directory: name a new or empty directory";
  if (overwrite) return "";
  for (const char* name : kDataFiles) {
    if (!holds(entries, name)) continue;
    const std::string path = dir + "/" + name, head = sniff(path, kSniffBytes);
    bool ours = false;
    if (starts_with(name, "train.") || starts_with(name, "val.")) {
      const int32_t magic = 20240520;  // the llm.c token file's (data/token_file.hpp)
      ours = head.size() >= 4 && std::memcmp(head.data(), &magic, 4) == 0;
    } else if (std::string(name) == "tokenizer.model") {
      // A SentencePiece model has no signature: it is ours beside our tokenizer.json (they go as a pair).
      const nlohmann::json j = nlohmann::json::parse(sniff(dir + "/tokenizer.json", kSniffBytes), nullptr, false);
      ours = j.is_object() && j.contains("kind") && j.contains("fingerprint");
    } else {
      const nlohmann::json j = nlohmann::json::parse(head, nullptr, false);
      ours = j.is_object() && (j.contains("fingerprint") || (j.contains("train") && j.contains("val")));
    }
    if (!ours) return "its " + std::string(name) + " is not one lattice prepare wrote: name a new directory, or pass --overwrite to replace it";
  }
  return "";
}

fs::path resolved(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

}  // namespace

std::string directory_path(const std::string& path) {
  std::string p = path;
  for (;;) {
    if (p.size() > 1 && p.back() == '/') p.pop_back();
    else if (p.size() >= 2 && p.compare(p.size() - 2, 2, "/.") == 0) p.resize(p.size() - 1);
    else break;
  }
  return p;
}

bool path_within(const std::string& inner, const std::string& outer) {
  const fs::path a = resolved(inner), b = resolved(outer);
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai)
    if (bi->empty() && std::next(bi) == b.end()) break;  // a trailing separator
    else if (ai == a.end() || *ai != *bi) return false;
  return true;
}

bool is_own_kind(const std::string& path, OutputKind kind) {
  std::error_code ec;
  if (is_directory_kind(kind)) return fs::is_directory(path, ec) && why_not_own_dir(path, kind, false).empty();
  return fs::is_regular_file(path, ec) && own_file(path, kind);
}

void check_output_path(const std::string& path, OutputKind kind, const std::string& flag, const OutputRules& rules) {
  const std::string refuse = "cannot write " + flag + " " + path + ": ";
  require(!path.empty(), flag + " needs a path");
  const bool directory = is_directory_kind(kind);
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  const bool exists = fs::exists(status);
  // A symbolic link: a save swaps its directory in whole, which would put a directory where the link
  // was (and lock the link's target); and a link to nothing (or a loop) cannot be written at all.
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    std::error_code link_ec;
    const std::string target = fs::read_symlink(path, link_ec).string();
    if (kind == OutputKind::checkpoint_dir)
      fail("cannot save to " + path + ": it is a symbolic link (to " + target +
           "), and a save replaces the directory whole: name the directory itself");
    require(exists, refuse + "it is a symbolic link to " + target + ", which does not exist (or is a loop of links)");
  }
  // What sits at the path first: a directory where a file goes is never replaced, whatever else holds.
  if (exists && !directory && !fs::is_regular_file(status))
    fail(refuse + (fs::is_directory(status) ? "it is a directory" : "it is not a regular file (a FIFO, device or socket)"));
  if (exists && directory && !fs::is_directory(status))
    fail(kind == OutputKind::checkpoint_dir ? "cannot save to " + path + ": it exists and is not a directory"
                                            : refuse + "it exists and is not a directory");
  // A save replaces its directory whole by a rename, which a mount point refuses (EBUSY): said now,
  // not after the training before the first save.
  if (exists && kind == OutputKind::checkpoint_dir && is_mount_point(path))
    fail("cannot save to " + path + ": it is a mount point, and a save replaces its directory whole (a rename the "
         "mount refuses): save into a directory inside it (" + directory_path(path) + "/ck)");
  if (exists && directory) {
    const std::string why = why_not_own_dir(path, kind, rules.overwrite);
    if (!why.empty()) fail((kind == OutputKind::checkpoint_dir ? "cannot save to " + path + ": " : refuse) + why);
  }
  // The files a directory output writes: a checkpoint directory is replaced whole; the others get
  // their own files only.
  std::vector<std::string> written = {path};
  if (kind == OutputKind::data_dir)
    for (const char* name : kDataFiles) written.push_back((fs::path(path) / name).string());
  if (kind == OutputKind::report_dir)
    written = {(fs::path(path) / kRunLog).string(), (fs::path(path) / kRunReport).string()};
  for (const NamedPath& input : rules.inputs) {
    if (input.path.empty()) continue;
    const std::string named = " (" + input.flag + " " + input.path + ")";
    for (const std::string& file : written) {
      const bool same = same_file(file, input.path) || (path_within(file, input.path) && path_within(input.path, file));
      require(!same, refuse + (file == path ? "it is" : "it would replace") + " an input of this command" + named);
      require(!path_within(file, input.path), refuse + "it is inside an input of this command" + named);
    }
    require(kind != OutputKind::checkpoint_dir || !path_within(input.path, path),
            refuse + "it holds an input of this command" + named + ", and a save replaces it whole");
  }
  for (const NamedPath& closed : rules.closed)
    require(closed.path.empty() || !path_within(path, closed.path),
            refuse + "it is inside " + closed.flag + " " + closed.path + ", which holds that output alone");
  // Inside a checkpoint directory (its manifest there or above; after the rules naming this run's own
  // inputs and outputs, which say more): a save replaces that directory whole and refuses one holding
  // an entry it did not write, so an output put there (plan --svg ck) would be lost or stop the next save.
  for (fs::path up = fs::absolute(directory_path(path), ec).lexically_normal().parent_path(); !up.empty();
       up = up.parent_path()) {
    if (fs::is_regular_file(up / kCheckpointManifest, ec))
      fail((kind == OutputKind::checkpoint_dir ? "cannot save to " + path + ": " : refuse) + "it is inside checkpoint " +
           up.string() +
           ", which a save replaces whole (and refuses while it holds what it did not write): write it elsewhere");
    if (up == up.parent_path()) break;
  }
  // A file beside another run's run.jsonl: its report.html and trace are that run's (a plan page over
  // its report, an SVG over its trace.json under --overwrite), not this command's.
  if (!directory) {
    const fs::path parent = fs::absolute(path, ec).lexically_normal().parent_path();
    if (fs::is_regular_file(parent / kRunLog, ec) &&
        (rules.own_report_dir.empty() || !fs::equivalent(parent, rules.own_report_dir, ec)))
      fail(refuse + "it is inside report directory " + parent.string() +
           " (its run.jsonl, report.html and trace are that run's): write it elsewhere");
  }
  if (exists && !directory)
    require(rules.overwrite || own_file(path, kind),
            refuse + "it exists and is not " + kind_text(kind) + " lattice wrote: name a new file, or pass --overwrite to replace it");
  if (!directory || !exists) check_file_writable(path, flag);
}

void write_output_file(const std::string& path, OutputKind kind, const std::string& flag, const std::string& contents,
                       const OutputRules& rules) {
  check_output_path(path, kind, flag, rules);
  write_file_atomically(path, contents.data(), contents.size());
}

DirLock::DirLock(const std::string& dir, const std::string& flag) {
  const fs::path at = resolved(dir);
  std::string name = ".";  // appended piece by piece: GCC 12 misreads `"." + std::string` (-Wrestrict)
  name.append(at.filename().string()).append(".lattice-lock");
  const fs::path lock = at.parent_path() / name;
  // The parents the lock needs, made now and removed with it when still empty (a refused run
  // leaves no empty directory behind).
  std::error_code ec;
  made_dirs_ = make_dirs_noting(at.parent_path().string(), ec);
  lock_path_ = lock.string();
  for (;;) {
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const std::string why = std::strerror(errno);
      lock_path_.clear();
      release();
      fail("cannot lock " + flag + " " + dir + ": cannot open " + lock.string() + ": " + why);
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char holder[320] = {};
      const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
      ::close(fd_), fd_ = -1;
      lock_path_.clear();  // the holder's file, not ours to remove
      made_dirs_.clear();
      std::string who = n > 0 ? std::string(holder, size_t(n)) : "";  // "PID on HOST"
      who.erase(std::remove(who.begin(), who.end(), '\n'), who.end());
      throw LockHeldError(flag + " " + dir + " is being written by another lattice run" +
                          (who.empty() ? "" : " (pid " + who + ")"));
    }
    // Locked: but a holder that released it meanwhile removed the file this descriptor names, and a
    // third run may have made a new one and locked that. Ours only if the path is still this file.
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(lock.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev)
      break;
    ::close(fd_), fd_ = -1;
  }
  // Who holds it, for the message above (best effort: the lock holds without it): the host too, since
  // under lattice launch the holder may be a rank on another host.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string pid = std::to_string(::getpid()) + " on " + host + "\n";
  const bool noted = ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == ssize_t(pid.size());
  (void)noted;
}

void DirLock::release() noexcept {
  if (fd_ >= 0) {
    if (!lock_path_.empty()) ::unlink(lock_path_.c_str());  // still held: no one else can own this path's file
    ::close(fd_);  // closing releases the lock
    fd_ = -1;
  }
  remove_empty_dirs(made_dirs_);
  made_dirs_.clear();
  lock_path_.clear();
}

void DirLock::take(DirLock& other) noexcept {
  fd_ = other.fd_, other.fd_ = -1;
  lock_path_ = std::move(other.lock_path_), other.lock_path_.clear();
  made_dirs_ = std::move(other.made_dirs_), other.made_dirs_.clear();
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    take(other);
  }
  return *this;
}

std::string run_log_problem(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "is not a regular file";
  std::string first = sniff(path, kSniffBytes);
  first = first.substr(0, first.find('\n'));
  if (first.empty()) return "";  // an empty log: nothing of anyone's to lose
  const nlohmann::json j = nlohmann::json::parse(first, nullptr, false);
  const std::string event = j.is_object() && j.contains("event") && j["event"].is_string() ? j["event"].get<std::string>() : "";
  return event == "start" || event == "step" ? "" : "is not a lattice run log";
}

}  // namespace lattice
