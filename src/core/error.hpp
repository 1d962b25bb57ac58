#pragma once
// Errors that reach the user as one line on stderr. InputError = bad flags, configs, files,
// layouts (exit 1); the CLI maps usage errors from the flag parser to exit 2.
#include <stdexcept>
#include <string>

namespace lattice {

class InputError : public std::runtime_error {
 public:
  // Line breaks (a quoted value of the user's may hold them) are written as \n: always one line.
  explicit InputError(const std::string& what) : std::runtime_error(one_line(what)) {}

 private:
  static std::string one_line(std::string s) {
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == '\n' || s[i] == '\r') s.replace(i, 1, s[i] == '\n' ? "\\n" : "\\r"), ++i;
    return s;
  }
};

// Raised when training diverges (NaN/inf loss): not the user's input, but still a clean exit 1.
class TrainingError : public std::runtime_error {
 public:
  explicit TrainingError(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] inline void fail(const std::string& what) { throw InputError(what); }
inline void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

}  // namespace lattice
