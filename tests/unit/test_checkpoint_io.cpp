// Checkpoint I/O: safetensors round trips and validation, atomic files and directories.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/atomic_dir.hpp"
#include "checkpoint/safetensors.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace lattice;
using namespace lattice::checkpoint;

namespace {

std::string scratch_dir() { return lattice::testing_util::scratch_dir("ckpt"); }
using lattice::testing_util::expect_input_error;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A hand-made safetensors file: length prefix, the given header text, then `data_bytes` zeros.
void write_raw_safetensors(const std::string& path, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  write_all(path, bytes + header + std::string(data_bytes, '\0'));
}

struct Sample {
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-8f, 6.0f};  // [2, 3]
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000};                     // [2]
  std::vector<int32_t> i32 = {7, -9, 123456};                        // [3]
  std::vector<uint8_t> u8 = {1, 2, 3, 4, 5};                         // [5]: odd size
  std::vector<TensorRef> refs() const {
    // The U8 tensor first: the writer must still keep the wider tensors aligned.
    return {{"bytes", "U8", {5}, u8.data(), 5},
            {"h.0.attn.c_attn.weight", "F32", {2, 3}, f32.data(), 24},
            {"half", "BF16", {2}, bf16.data(), 4},
            {"step", "I32", {3}, i32.data(), 12}};
  }
};

}  // namespace

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  const std::string dir = scratch_dir();
  const Sample s;
  const std::string path = dir + "/model.safetensors";
  write_safetensors(path, s.refs(), {{"format", "pt"}, {"step", "12"}});
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(::getpid())));

  const SafetensorsFile file = SafetensorsFile::load(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"bytes", "h.0.attn.c_attn.weight", "half", "step"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("step"), "12");
  const TensorRef& w = file.get("h.0.attn.c_attn.weight", "F32", {2, 3});
  ASSERT_EQ(w.bytes, 24u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data) % 4, 0u);
  EXPECT_EQ(std::memcmp(w.data, s.f32.data(), 24), 0);
  EXPECT_EQ(std::memcmp(file.get("half", "BF16", {2}).data, s.bf16.data(), 4), 0);
  EXPECT_EQ(std::memcmp(file.get("step", "I32", {3}).data, s.i32.data(), 12), 0);
  EXPECT_EQ(std::memcmp(file.get("bytes", "U8", {5}).data, s.u8.data(), 5), 0);
  EXPECT_TRUE(file.has("half"));
  EXPECT_FALSE(file.has("nope"));

  const SafetensorsFile copy = file;  // copies share the bytes
  EXPECT_EQ(std::memcmp(copy.get("h.0.attn.c_attn.weight").data, s.f32.data(), 24), 0);
}

TEST(Safetensors, WritesTheHuggingFaceLayout) {
  const std::string dir = scratch_dir();
  const Sample s;
  const std::string path = dir + "/m.safetensors";
  write_safetensors(path, s.refs(), {{"format", "pt"}});
  const std::string bytes = read_all(path);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i)
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(header_len % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + header_len + 24 + 4 + 12 + 5);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_len));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  const auto& w = header["h.0.attn.c_attn.weight"];
  EXPECT_EQ(w["dtype"], "F32");
  EXPECT_EQ(w["shape"], nlohmann::json({2, 3}));
  const uint64_t begin = w["data_offsets"][0];
  EXPECT_EQ(w["data_offsets"][1].get<uint64_t>() - begin, 24u);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + header_len + begin, s.f32.data(), 24), 0);
}

TEST(Safetensors, WriteRejectsInconsistentTensors) {
  const std::string dir = scratch_dir();
  const std::vector<float> data(6);
  const std::string path = dir + "/bad.safetensors";
  expect_input_error(
      [&] {
        write_safetensors(path, {{"w", "F32", {2, 3}, data.data(), 20}});
      },
      "tensor 'w' is F32 [2, 3] = 24 bytes, but 20 bytes were given");
  expect_input_error(
      [&] {
        write_safetensors(path, {{"w", "Q4", {6}, data.data(), 24}});
      },
      "unknown safetensors dtype 'Q4'");
  expect_input_error(
      [&] {
        write_safetensors(path, {{"w", "F32", {6}, data.data(), 24}, {"w", "F32", {6}, data.data(), 24}});
      },
      "tensor 'w' appears twice");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(::getpid())));
}

// The streaming writer: a tensor's bytes may come in any number of appends, in file order only,
// and the file appears only when every byte has come; open() reads the header and read() the bytes
// the file holds, equal to what load() holds.
TEST(Safetensors, StreamsTensorsInPiecesAndReadsThemBack) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/streamed.safetensors";
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1, -2, -3};
  const std::vector<uint16_t> h = {0x3f80, 0x4000};
  {
    SafetensorsWriter out(path, {{"a", "F32", {2, 3}}, {"h", "BF16", {2}}, {"b", "F32", {3}}, {"empty", "F32", {0}}},
                          {{"format", "pt"}});
    // Widest first, else in the given order: a, b, empty, then the 2-byte h.
    ASSERT_EQ(out.order().size(), 4u);
    EXPECT_EQ(out.order()[1].name, "b");
    EXPECT_EQ(out.order()[3].name, "h");
    out.append("a", a.data(), 8);
    expect_input_error([&] { out.append("b", b.data(), 12); }, "tensor 'b' arrived while 'a' has 16 bytes to come");
    expect_input_error([&] { out.append("a", a.data() + 2, 20); }, "20 bytes given, 16 to come");
    out.append("a", a.data() + 2, 16);
    out.append("b", b.data(), 12);
    expect_input_error([&] { out.commit(); }, "tensor 'h' is not complete");
    EXPECT_FALSE(fs::exists(path));
    out.append("h", h.data(), 4);
    out.commit();
  }
  const auto loaded = SafetensorsFile::load(path);
  EXPECT_EQ(std::memcmp(loaded.get("a", "F32", {2, 3}).data, a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(loaded.get("b").data, b.data(), 12), 0);
  EXPECT_EQ(loaded.metadata().at("format"), "pt");
  const auto opened = SafetensorsFile::open(path);
  EXPECT_EQ(opened.get("a").data, nullptr);
  std::vector<float> got(2);
  opened.read("a", 12, 8, got.data());
  EXPECT_EQ(got, (std::vector<float>{4, 5}));
  uint16_t second = 0;
  opened.read("h", 2, 2, &second);
  EXPECT_EQ(second, 0x4000);
  expect_input_error([&] { opened.read("b", 8, 8, got.data()); }, "are beyond tensor 'b'");
  expect_input_error([&] { opened.read("c", 0, 4, got.data()); }, "has no tensor 'c'");
}

TEST(Safetensors, AnUncommittedStreamLeavesNoFile) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/dropped.safetensors";
  const std::vector<float> a = {1, 2};
  {
    SafetensorsWriter out(path, {{"a", "F32", {2}}});
    out.append("a", a.data(), 4);
  }  // a failure elsewhere: destroyed before commit
  EXPECT_FALSE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(Safetensors, RejectsTruncatedFile) {
  const std::string dir = scratch_dir();
  const Sample s;
  const std::string path = dir + "/model.safetensors";
  write_safetensors(path, s.refs());
  const std::string bytes = read_all(path);
  write_all(path, bytes.substr(0, bytes.size() - 4));
  expect_input_error([&] { SafetensorsFile::load(path); },
                     "checkpoint " + path + " is truncated: header says 45 bytes of data, file has 41");
  write_all(path, bytes.substr(0, 20));
  expect_input_error([&] { SafetensorsFile::load(path); }, "is truncated: header length says");
  write_all(path, bytes.substr(0, 5));
  expect_input_error([&] { SafetensorsFile::load(path); }, "is truncated: 5 bytes");
  write_all(path, bytes + "xyz");
  expect_input_error([&] { SafetensorsFile::load(path); }, "has 3 unexpected bytes after its last tensor");
}

TEST(Safetensors, RejectsMalformedHeaders) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/m.safetensors";
  expect_input_error([&] { SafetensorsFile::load(dir + "/none.safetensors"); },
                     "none.safetensors does not exist");

  write_raw_safetensors(path, "{\"w\": {\"dtype\": ", 0);
  expect_input_error([&] { SafetensorsFile::load(path); }, "has a malformed JSON header");

  write_raw_safetensors(path, R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20);
  expect_input_error([&] { SafetensorsFile::load(path); },
                     "tensor 'w' is F32 [2, 3] = 24 bytes, but its data_offsets span 20 bytes");

  write_raw_safetensors(path, R"({"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", 4);
  expect_input_error([&] { SafetensorsFile::load(path); }, "tensor 'w' has unknown dtype 'F99'");

  write_raw_safetensors(path, R"({"w":{"dtype":"F32","shape":[1]}})", 0);
  expect_input_error([&] { SafetensorsFile::load(path); }, "tensor 'w' has no valid \"data_offsets\"");

  write_raw_safetensors(path,
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        12);
  expect_input_error([&] { SafetensorsFile::load(path); }, "tensors 'a' and 'b' overlap");

  write_raw_safetensors(path, R"({"__metadata__":{"k":3}})", 0);
  expect_input_error([&] { SafetensorsFile::load(path); }, "__metadata__ value of 'k' is not a string");
}

TEST(Safetensors, GetNamesMissingOrMismatchedTensor) {
  const std::string dir = scratch_dir();
  const Sample s;
  const std::string path = dir + "/model.safetensors";
  write_safetensors(path, s.refs());
  const SafetensorsFile file = SafetensorsFile::load(path);
  expect_input_error([&] { file.get("wte.weight"); }, "checkpoint " + path + " has no tensor 'wte.weight'");
  expect_input_error(
      [&] {
        file.get("h.0.attn.c_attn.weight", "F32", {3, 2});
      },
      "tensor 'h.0.attn.c_attn.weight' is F32 [2, 3], expected F32 [3, 2]");
  expect_input_error([&] { file.get("half", "F32", {2}); }, "tensor 'half' is BF16 [2], expected F32 [2]");
}

TEST(AtomicFile, LeavesNothingUnlessCommitted) {
  const std::string dir = scratch_dir();
  const std::string path = dir + "/f.bin";
  write_all(path, "old");
  {
    AtomicFile file(path);
    file.write("new", 3);
    EXPECT_TRUE(fs::exists(path + ".tmp-" + std::to_string(::getpid())));
  }  // abandoned, as by an exception mid-save
  EXPECT_EQ(read_all(path), "old");
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(::getpid())));
  write_file_atomically(path, "newer", 5);
  EXPECT_EQ(read_all(path), "newer");
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(::getpid())));
}

TEST(AtomicDir, CreatesAndReplacesADirectory) {
  const std::string dir = scratch_dir();
  const std::string ckpt = dir + "/runs/ckpt";  // parent created on demand
  {
    AtomicDir out(ckpt);
    EXPECT_EQ(out.path(), ckpt + ".tmp-" + std::to_string(::getpid()));
    write_all(out.path() + "/a.txt", "first");
    out.commit();
  }
  EXPECT_EQ(read_all(ckpt + "/a.txt"), "first");
  {
    AtomicDir out(ckpt);
    write_all(out.path() + "/b.txt", "second");
    out.commit();
  }
  EXPECT_EQ(read_all(ckpt + "/b.txt"), "second");
  EXPECT_FALSE(fs::exists(ckpt + "/a.txt"));  // the previous version is replaced, not merged
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir + "/runs")) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"ckpt"});  // no .tmp-* or .old-* left behind
}

TEST(AtomicDir, UncommittedSaveLeavesPreviousCheckpointIntact) {
  const std::string dir = scratch_dir();
  const std::string ckpt = dir + "/ckpt";
  fs::create_directories(ckpt);
  write_all(ckpt + "/model.safetensors", "previous");
  std::string temp;
  try {
    AtomicDir out(ckpt);
    temp = out.path();
    write_all(out.path() + "/model.safetensors", "partial");
    throw std::runtime_error("crash mid-save");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_all(ckpt + "/model.safetensors"), "previous");
  EXPECT_FALSE(fs::exists(temp));
}

// A save killed between making its temporary directory and writing the marker's text leaves the
// directory with nothing, or with only the empty marker file: the next save beside it removes either
// (cli.async_save's kill -9 runs left one such, 1 run in 6); one holding anything else stays.
TEST(AtomicDir, NextSaveRemovesADeadSavesUnmarkedTemporary) {
  const std::string dir = scratch_dir();
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ::waitpid(child, &status, 0);  // a pid that is gone
  const std::string dead = std::to_string(child);
  fs::create_directories(dir + "/empty.tmp-" + dead);
  fs::create_directories(dir + "/marker.tmp-" + dead);
  write_all(dir + "/marker.tmp-" + dead + "/" + AtomicDir::kMarker, "");
  fs::create_directories(dir + "/more.tmp-" + dead);
  write_all(dir + "/more.tmp-" + dead + "/" + AtomicDir::kMarker, "");
  write_all(dir + "/more.tmp-" + dead + "/model.safetensors", "someone's");
  {
    AtomicDir out(dir + "/next");
    out.commit();
  }
  EXPECT_FALSE(fs::exists(dir + "/empty.tmp-" + dead));
  EXPECT_FALSE(fs::exists(dir + "/marker.tmp-" + dead));
  EXPECT_EQ(read_all(dir + "/more.tmp-" + dead + "/model.safetensors"), "someone's");
}

TEST(AtomicDir, RefusesToReplaceAFile) {
  const std::string dir = scratch_dir();
  write_all(dir + "/ckpt", "not a dir");
  expect_input_error([&] { AtomicDir out(dir + "/ckpt"); }, "exists and is not a directory");
  EXPECT_EQ(read_all(dir + "/ckpt"), "not a dir");
}
