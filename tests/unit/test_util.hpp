#pragma once
// Helpers shared by the unit tests that touch files and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.hpp"

namespace lattice::testing_util {

// The scratch directories of the running test, removed when it ends if it passed (a failed test's are
// kept, to be looked at; each name carries the test and the process). Without this every run of the
// suite left its files under /tmp.
inline std::vector<std::string>& scratch_dirs_of_test() {
  static std::vector<std::string> dirs;
  return dirs;
}
struct ScratchDirRemover : testing::EmptyTestEventListener {
  void OnTestEnd(const testing::TestInfo& info) override {
    std::error_code ec;
    if (info.result() && info.result()->Passed())
      for (const auto& d : scratch_dirs_of_test()) std::filesystem::remove_all(d, ec);
    scratch_dirs_of_test().clear();
  }
};
// Installed once, before main, in whichever test file includes this header first.
inline const bool scratch_dir_remover_installed = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new ScratchDirRemover);
  return true;
}();

// A fresh directory for the running test: <tmp>/lattice_<prefix>_<test name>_<pid>.
inline std::string scratch_dir(const std::string& prefix) {
  namespace fs = std::filesystem;
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::temp_directory_path() /
                       ("lattice_" + prefix + "_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  scratch_dirs_of_test().push_back(dir.string());
  return dir.string();
}

// f must throw an InputError whose one-line message contains `fragment`.
template <class F>
void expect_input_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an InputError containing: " << fragment;
  } catch (const lattice::InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << fragment;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line: " << e.what();
  }
}

}  // namespace lattice::testing_util
