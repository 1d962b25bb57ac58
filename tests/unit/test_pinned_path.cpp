// PinnedPath (core/pinned_path.hpp): a reader of a directory that a save replaces whole (AtomicDir,
// the way a checkpoint is saved) reads the version it pinned to the end, through the same path
// strings and the same readers (input_file.hpp) as an unpinned one, and never sees the next version.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/atomic_dir.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/pinned_path.hpp"
#include "test_util.hpp"

namespace lattice {
namespace {

namespace fs = std::filesystem;

// A save of `files` (name, contents) into `dir` as a checkpoint's: a whole new directory swapped in,
// the previous one removed.
void save(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  AtomicDir out(dir);
  for (const auto& [name, text] : files) std::ofstream(fs::path(out.path()) / name) << text;
  out.commit();
}

std::string text_of(const std::string& path) { return read_regular_file(path, "file"); }

// This process's open descriptors: a pin lets go of every one it opened.
size_t open_descriptors() {
  size_t n = 0;
  for (auto it = fs::directory_iterator("/proc/self/fd"); it != fs::directory_iterator(); ++it) ++n;
  return n;
}

TEST(PinnedPath, ReadsThePinnedVersionAfterSavesReplacedAndRemovedIt) {
  const fs::path root = testing_util::scratch_dir("pinned");
  const std::string ck = (root / "ck").string();
  save(ck, {{"trainer.json", "step 1"}, {"model", "weights 1"}, {"old_only", "gone next"}});
  const DirectoryIdentity before = directory_identity(ck);
  const size_t descriptors = open_descriptors();
  {
    const PinnedPath pin(ck);
    ASSERT_TRUE(pin.holds());
    EXPECT_EQ(open_descriptors(), descriptors + 5);  // the directory and its four files (the marker too)
    EXPECT_EQ(text_of(ck + "/trainer.json"), "step 1");
    save(ck, {{"trainer.json", "step 2"}, {"model", "weights 2"}, {"new_only", "new"}});
    save(ck, {{"trainer.json", "step 3"}, {"model", "weights 3"}, {"new_only", "new"}});
    // Two saves later (the pinned version's files unlinked), every file is still the pinned save's.
    EXPECT_EQ(text_of(ck + "/model"), "weights 1");
    EXPECT_EQ(text_of(ck + "/old_only"), "gone next");
    // A name only the later saves hold is not there for this reader, and the message names the path.
    testing_util::expect_input_error([&] { text_of(ck + "/new_only"); }, "file " + ck + "/new_only does not exist");
    // Other spellings of the directory reach the same pin; its identity is the pinned one.
    EXPECT_EQ(text_of(ck + "//model"), "weights 1");
    EXPECT_EQ(text_of((root / "." / "ck" / "model").string()), "weights 1");
    EXPECT_EQ(directory_identity(ck + "/"), before);
    std::vector<std::string> names;
    ASSERT_TRUE(pinned_names(ck, names));
    EXPECT_EQ(names, (std::vector<std::string>{std::string(AtomicDir::kMarker), "model", "old_only", "trainer.json"}));
    {
      const PinnedPath inner(ck), file_inside(ck + "/model");  // nested readers share the outer version
      EXPECT_FALSE(inner.holds());
      EXPECT_FALSE(file_inside.holds());  // pinned anew, it would be the live (third) save's file
      EXPECT_EQ(text_of(ck + "/model"), "weights 1");
    }
    EXPECT_EQ(text_of(ck + "/model"), "weights 1");  // the inner one let go of nothing
  }
  // Let go: the path is the directory as it is now, and no descriptor is left open.
  EXPECT_EQ(open_descriptors(), descriptors);
  EXPECT_EQ(text_of(ck + "/model"), "weights 3");
  EXPECT_NE(directory_identity(ck), before);
  EXPECT_EQ(pinned_path(ck + "/model"), ck + "/model");
}

TEST(PinnedPath, WhatIsNotARegularFileIsLeftToTheReadersCheck) {
  const fs::path root = testing_util::scratch_dir("pinned");
  const std::string ck = (root / "ck").string();
  save(ck, {{"model", "weights"}});
  ASSERT_EQ(::mkfifo((ck + "/pipe").c_str(), 0600), 0);
  const PinnedPath pin(ck);
  ASSERT_TRUE(pin.holds());  // the FIFO was not opened (that would wait for a writer)
  testing_util::expect_input_error([&] { text_of(ck + "/pipe"); },
                                   "file " + ck + "/pipe is not a regular file (it is a FIFO)");
  EXPECT_EQ(text_of(ck + "/model"), "weights");
}

TEST(PinnedPath, TheWorkingDirectoryAndALinkToNothingPin) {
  const fs::path root = testing_util::scratch_dir("pinned");
  const std::string ck = (root / "ck").string();
  save(ck, {{"model", "weights"}});
  fs::create_symlink("nowhere", fs::path(ck) / "dangling");
  {
    // A link to nothing is no file of this version (not a save removing it): pinned in one try.
    const PinnedPath pin(ck);
    EXPECT_TRUE(pin.holds());
    EXPECT_EQ(pinned_path(ck + "/dangling").rfind("/proc/self/fd/", 0), 0u);  // looked up in the pinned version
  }
  const fs::path cwd = fs::current_path();
  fs::current_path(ck);  // `--checkpoint .`: its files are "./model", or "model"
  {
    const PinnedPath pin(".");
    EXPECT_TRUE(pin.holds());
    EXPECT_EQ(pinned_path("./model").rfind("/proc/self/fd/", 0), 0u) << pinned_path("./model");
    EXPECT_EQ(pinned_path("model").rfind("/proc/self/fd/", 0), 0u) << pinned_path("model");
    EXPECT_EQ(text_of("./model"), "weights");
  }
  fs::current_path(cwd);
}

TEST(PinnedPath, AFileNamedAloneIsPinnedWhatIsNeitherIsReadAsItStands) {
  const fs::path root = testing_util::scratch_dir("pinned");
  const std::string file = (root / "model.safetensors").string();
  std::ofstream(file) << "version 1";
  {
    const PinnedPath pin(file);
    ASSERT_TRUE(pin.holds());
    write_file_atomically(file, "version 2", 9);  // renamed over it, the old one unlinked
    EXPECT_EQ(text_of(file), "version 1");
  }
  EXPECT_EQ(text_of(file), "version 2");
  ASSERT_EQ(::mkfifo((root / "pipe").c_str(), 0600), 0);
  const PinnedPath on_fifo((root / "pipe").string()), on_nothing((root / "missing").string()), on_empty("");
  EXPECT_FALSE(on_fifo.holds());  // and not opened: the test would wait here for a writer
  EXPECT_FALSE(on_nothing.holds());
  EXPECT_FALSE(on_empty.holds());
  EXPECT_EQ(pinned_path((root / "pipe").string()), (root / "pipe").string());
  EXPECT_EQ(directory_identity((root / "missing").string()), (DirectoryIdentity{0, 0, 0, 0}));
}

}  // namespace
}  // namespace lattice
