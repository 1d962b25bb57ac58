// --async-save's pieces (train/background_save.hpp): the host copy replays the file a direct write
// makes, byte for byte, and is counted under checkpoint_io; a background save commits only when told,
// and one dropped before leaves the previous checkpoint and no temporary; an empty temporary of a
// killed process is removed by the next save.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "core/atomic_dir.hpp"
#include "test_util.hpp"
#include "train/background_save.hpp"

namespace fs = std::filesystem;
using namespace lattice;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

ModelConfig tiny() {
  ModelConfig c;
  c.layers = 1, c.hidden = 8, c.heads = 2, c.seq_len = 4, c.vocab = 16, c.dropout = 0;
  return c;
}

// Every tensor of `specs` in order, element i of the k-th tensor = k + i / 1000 (+ `shift`).
template <class Sink>
void append_all(const std::vector<checkpoint::TensorSpec>& specs, Sink& out, float shift = 0) {
  for (size_t k = 0; k < specs.size(); ++k) {
    int64_t n = 1;
    for (int64_t d : specs[k].shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(k) + float(i) / 1000 + shift;
    out.append(specs[k].name, v.data(), v.size() * 4);
  }
}

std::unique_ptr<SaveImage> image_of(const std::string& dir, float shift) {
  auto im = std::make_unique<SaveImage>();
  im->dir = dir, im->config = tiny();
  append_all(checkpoint::model_tensor_specs(im->config), im->model, shift);
  im->optimizer_name = "adamw", im->element_prefixes = {"exp_avg."};
  append_all(checkpoint::model_tensor_specs(im->config, "exp_avg."), im->optimizer, shift);
  im->files = {{"notes.txt", "a small file"}};
  im->trainer_state = {{"step", 7}};
  return im;
}

}  // namespace

TEST(BackgroundSave, HostCopyReplaysTheDirectWriteByteForByte) {
  const std::string dir = testing_util::scratch_dir("bgsave");
  const std::vector<checkpoint::TensorSpec> specs = checkpoint::model_tensor_specs(tiny());
  {
    checkpoint::SafetensorsWriter direct(dir + "/direct.safetensors", specs, {{"format", "pt"}});
    append_all(specs, direct);
    direct.commit();
  }
  const int64_t before = MemoryTracker::of(MemoryCategory::checkpoint_io).live_bytes();
  {
    HostFile copy;
    append_all(specs, copy);
    EXPECT_EQ(MemoryTracker::of(MemoryCategory::checkpoint_io).live_bytes() - before, copy.bytes());  // counted
    checkpoint::SafetensorsWriter replayed(dir + "/replayed.safetensors", specs, {{"format", "pt"}});
    copy.replay(replayed);
    replayed.commit();
  }
  EXPECT_EQ(MemoryTracker::of(MemoryCategory::checkpoint_io).live_bytes(), before);  // and given back
  EXPECT_EQ(read_all(dir + "/direct.safetensors"), read_all(dir + "/replayed.safetensors"));
}

TEST(BackgroundSave, CommitsOnlyWhenToldAndADroppedOneLeavesThePrevious) {
  const std::string dir = testing_util::scratch_dir("bgsave");
  const std::string ckpt = dir + "/ck";
  {
    BackgroundSave save(image_of(ckpt, 0));
    save.wait();
    EXPECT_TRUE(save.done());
    EXPECT_FALSE(fs::exists(ckpt));  // written and synced, not in place
    save.commit();
  }
  ASSERT_TRUE(fs::exists(ckpt + "/" + checkpoint::kManifest));
  EXPECT_EQ(read_all(ckpt + "/notes.txt"), "a small file");
  const std::string model = read_all(ckpt + "/model.safetensors");
  { BackgroundSave dropped(image_of(ckpt, 1)); }  // never committed: a refused or abandoned save
  EXPECT_EQ(read_all(ckpt + "/model.safetensors"), model);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"ck"});  // no temporary left
}

TEST(AtomicDir, RemovesTheEmptyTemporaryOfAProcessKilledBeforeItsMarker) {
  const std::string dir = testing_util::scratch_dir("bgsave");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a process of this host that is gone
  const std::string empty = dir + "/ck.tmp-" + std::to_string(child), kept = dir + "/other.tmp-" + std::to_string(child);
  fs::create_directories(empty);
  fs::create_directories(kept);
  std::ofstream(kept + "/user-file") << "not lattice's";  // no marker, not empty: not ours to remove
  AtomicDir out(dir + "/ck");
  EXPECT_FALSE(fs::exists(empty));
  EXPECT_TRUE(fs::exists(kept + "/user-file"));
}
