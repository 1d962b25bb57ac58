#pragma once
// Errors that reach the user as one line on stderr. InputError = bad flags, configs, files,
// layouts (exit 1); UsageError = a flag's value not of its kind (exit 2, as the CLI maps the flag
// parser's own usage errors).
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace lattice {

// A library's wording made plain for the one line a user reads: nlohmann's "[json.exception.
// parse_error.101] " tags dropped (the file's name and the parse error stay).
inline std::string without_library_tags(std::string s) {
  for (size_t at = s.find("[json.exception."); at != std::string::npos; at = s.find("[json.exception.", at)) {
    const size_t close = s.find(']', at);
    if (close == std::string::npos) break;
    s.erase(at, close + 1 - at + (close + 1 < s.size() && s[close + 1] == ' ' ? 1 : 0));
  }
  return s;
}

class InputError : public std::runtime_error {
 public:
  // Line breaks (a quoted value of the user's may hold them) are written as \n: always one line.
  explicit InputError(const std::string& what) : std::runtime_error(one_line(without_library_tags(what))) {}

 private:
  static std::string one_line(std::string s) {
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == '\n' || s[i] == '\r') s.replace(i, 1, s[i] == '\n' ? "\\n" : "\\r"), ++i;
    return s;
  }
};

// A flag's value that does not parse as its kind ("abc" or "80XB" for a size): a usage error, exit 2
// as the flag parser's own ("--layers abc"). One that parses but is out of bounds ("0", "inf" for a
// size) stays an InputError, exit 1, as the flag bounds' ("--layers 0").
class UsageError : public InputError {
 public:
  using InputError::InputError;
};

// The exit status an error of the user's input ends with: 2 for usage, 1 otherwise.
inline int exit_status_of(const std::exception& e) { return dynamic_cast<const UsageError*>(&e) ? 2 : 1; }

// Raised when training diverges (NaN/inf loss): not the user's input, but still a clean exit 1.
class TrainingError : public std::runtime_error {
 public:
  explicit TrainingError(const std::string& what) : std::runtime_error(what) {}
};

// How a caught exception is told on its one line: std::filesystem's "filesystem error: status: File
// name too long [PATH]" as "PATH: File name too long", library tags dropped, line breaks as spaces.
inline std::string error_line(const std::exception& e) {
  std::string s;
  if (const auto* fs_error = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    s = fs_error->path1().string();
    if (!fs_error->path2().empty()) s += " and " + fs_error->path2().string();
    s += (s.empty() ? "" : ": ") + fs_error->code().message();
  } else {
    s = without_library_tags(e.what());
  }
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

[[noreturn]] inline void fail(const std::string& what) { throw InputError(what); }
inline void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

}  // namespace lattice
