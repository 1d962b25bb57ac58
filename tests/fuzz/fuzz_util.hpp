#pragma once
// Shared by the libFuzzer targets of tests/fuzz: each target writes its input where the parser
// reads it (a file, or a checkpoint directory) and calls lattice's real entry point.
//
// The contract under test (docs/reliability.md, "Bad input"): a parser given any bytes either succeeds or throws
// lattice::InputError with one non-empty line naming the cause. Everything else is a finding and
// aborts, so libFuzzer saves the input: a crash or sanitizer report, a leak, a hang, a huge
// allocation (-malloc_limit_mb), or any other exception escaping (std::bad_alloc,
// std::length_error, nlohmann::json::exception, ...).
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>

#include "core/error.hpp"

namespace lattice::fuzz {

// A private directory for this process under $TMPDIR (run.sh points it at /dev/shm when it can),
// removed at exit. Held by a pointer never freed: it outlives every static destructor.
inline const std::string& scratch() {
  static const std::string* const dir = [] {
    namespace fs = std::filesystem;
    const fs::path d = fs::temp_directory_path() / ("lattice-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    auto* kept = new std::string(d.string());
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return kept;
  }();
  return *dir;
}

// Writes the input to `path`, replacing it.
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

[[noreturn]] inline void finding(const std::string& what) {
  // The sanitizers' report stream: still open when libFuzzer closed the target's stderr.
  __sanitizer_report_error_summary(("fuzz finding: " + what).c_str());
  std::abort();
}

// An invariant the harness checks on a successful parse.
#define FUZZ_CHECK(cond)                                                                         \
  do {                                                                                           \
    if (!(cond)) ::lattice::fuzz::finding(std::string("check failed: ") + #cond + " at " +     \
                                          __FILE__ + ":" + std::to_string(__LINE__));           \
  } while (0)

// Runs f. An InputError with a one-line, non-empty message is the accepted answer to bad input
// (returns false); anything else escaping is a finding. Returns true when f succeeded.
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.empty()) finding("InputError with an empty message");
    if (what.find('\n') != std::string::npos) finding("InputError message is not one line: " + what);
    return false;
  } catch (const std::exception& e) {
    finding(std::string("uncaught ") + typeid(e).name() + " (not lattice::InputError): " + e.what());
  } catch (...) {
    finding("an exception that is not a std::exception");
  }
}

}  // namespace lattice::fuzz
