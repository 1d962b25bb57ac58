// DirLock (core/output_path.hpp): a lock another holder has is told apart, by type, from every
// other refusal, since `lattice launch` waits for the one and not the others.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/output_path.hpp"
#include "test_util.hpp"

namespace lattice {
namespace {

namespace fs = std::filesystem;

TEST(DirLock, HeldLockIsItsOwnErrorAndNamesTheHolder) {
  const fs::path dir = testing_util::scratch_dir("dirlock");
  const std::string save = (dir / "ck").string();
  {
    DirLock first(save, "--save");
    // flock locks belong to an open file, so a second lock in this process is refused as another run's.
    try {
      DirLock second(save, "--save");
      FAIL() << "a held lock was taken twice";
    } catch (const LockHeldError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--save " + save + " is being written by another lattice run (pid " +
                          std::to_string(::getpid()) + " on "),
                std::string::npos)
          << what;
    }
  }
  DirLock again(save, "--save");  // let go: free for the next holder
}

TEST(DirLock, OtherCausesAreNotAHeldLock) {
  const fs::path dir = testing_util::scratch_dir("dirlock");
  std::ofstream(dir / "file") << "the user's\n";
  // The lock's parent would have to be made under a regular file.
  const std::string save = (dir / "file" / "sub" / "ck").string();
  bool refused = false;
  try {
    DirLock lock(save, "--save");
  } catch (const LockHeldError&) {
    ADD_FAILURE() << "a path that cannot hold a lock was taken for a held lock";
  } catch (const InputError&) {
    refused = true;
  }
  EXPECT_TRUE(refused);
  std::ifstream in(dir / "file");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "the user's");  // untouched
}

}  // namespace
}  // namespace lattice
