#include "data/token_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_dir.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/input_file.hpp"

namespace lattice::data {

std::string token_file_fingerprint(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "-";
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  constexpr uint64_t kEdge = 64 << 10;
  std::vector<char> bytes(size_t(std::min(size, 2 * kEdge)));
  const uint64_t head = std::min(size, kEdge);
  in.read(bytes.data(), std::streamsize(head));
  if (size > head) {
    in.seekg(std::streamoff(size - (bytes.size() - head)));
    in.read(bytes.data() + head, std::streamsize(bytes.size() - head));
  }
  return std::to_string(size) + "-" + hex16(fnv1a(std::string_view(bytes.data(), bytes.size())));
}

std::string token_files_fingerprint(const std::string& dir) {
  return "train.bin " + token_file_fingerprint(dir + "/train.bin") + " val.bin " +
         token_file_fingerprint(dir + "/val.bin");
}

std::unique_ptr<AtomicFile> stage_token_file(const std::string& path, std::span<const uint16_t> tokens) {
  require(tokens.size() <= static_cast<size_t>(INT32_MAX), "cannot write " + path + ": " +
                                                               std::to_string(tokens.size()) +
                                                               " tokens exceed the format's int32 count");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  auto file = std::make_unique<AtomicFile>(path);
  file->write(header, sizeof(header));
  file->write(tokens.data(), tokens.size() * sizeof(uint16_t));
  file->sync();
  return file;
}

void write_token_file(const std::string& path, std::span<const uint16_t> tokens) {
  stage_token_file(path, tokens)->commit();
}

TokenFile TokenFile::load(const std::string& path, int vocab) {
  require_regular_file(path, "token file");
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  require(in.good(), "cannot open token file " + path);
  const size_t file_bytes = std::filesystem::file_size(path, ec);
  require(!ec, "cannot read token file " + path + ": " + ec.message());
  require(file_bytes >= kTokenFileHeaderBytes,
          "token file " + path + " is too short: " + std::to_string(file_bytes) + " bytes, less than the " +
              std::to_string(kTokenFileHeaderBytes) + "-byte header");

  int32_t header[kTokenFileHeaderInts];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  require(in.good(), "cannot read the header of token file " + path);
  require(header[0] == kTokenFileMagic, "token file " + path + " has bad magic " + std::to_string(header[0]) +
                                            " (expected " + std::to_string(kTokenFileMagic) +
                                            ", llm.c format)");
  require(header[1] == kTokenFileVersion, "token file " + path + " has version " + std::to_string(header[1]) +
                                              " (expected " + std::to_string(kTokenFileVersion) + ")");
  require(header[2] >= 0, "token file " + path + " has a negative token count " + std::to_string(header[2]));
  const size_t count = static_cast<size_t>(header[2]);
  const size_t expected_bytes = kTokenFileHeaderBytes + count * sizeof(uint16_t);
  require(file_bytes == expected_bytes,
          "token file " + path + " has the wrong size: header says " + std::to_string(count) + " tokens (" +
              std::to_string(expected_bytes) + " bytes), file has " + std::to_string(file_bytes) + " bytes");

  auto tokens = std::make_shared<Tokens>(count);
  in.read(reinterpret_cast<char*>(tokens->data()), static_cast<std::streamsize>(count * sizeof(uint16_t)));
  require(in.good() || count == 0, "cannot read the tokens of token file " + path);
  for (size_t i = 0; i < count; ++i) {
    // Not require(): its message would be built for every token.
    if ((*tokens)[i] >= vocab) {
      fail("token file " + path + ": token " + std::to_string((*tokens)[i]) + " at index " +
           std::to_string(i) + " >= vocab " + std::to_string(vocab));
    }
  }
  return TokenFile(path, std::move(tokens));
}

}  // namespace lattice::data
