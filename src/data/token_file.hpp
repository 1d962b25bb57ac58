#pragma once
// llm.c's token file: a header of 256 int32 (magic 20240520, version 1, token count), then the
// tokens as uint16, all little-endian.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "core/atomic_dir.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

// Writes atomically (temporary file, fsync, rename): a crash never leaves a half-written file.
void write_token_file(const std::string& path, std::span<const uint16_t> tokens);
// The same written and synced beside `path`, not yet in place (commit() renames it over `path`;
// dropping it removes it): files that belong together are all written before any replaces its old one.
std::unique_ptr<AtomicFile> stage_token_file(const std::string& path, std::span<const uint16_t> tokens);

// What ranks compare to know they read the same token files under the same --data path: each of
// train.bin and val.bin's size and a hash of its first and last 64 KiB ("-" for a file that is not
// there). Cheap at any size; a file differing only in its middle passes, which per-host copies made
// by one prepare (the case it guards) never do.
std::string token_files_fingerprint(const std::string& dir);
// One file's part of it: "<bytes>-<16 hex digits>", or "-" where no regular file is. A checkpoint
// records its train.bin's, so a resume on another file is told its batches are not the run's.
std::string token_file_fingerprint(const std::string& path);

// A validated token file held in memory (MemoryCategory::data). Copies are cheap and share the tokens.
class TokenFile {
 public:
  using Tokens = tracked_vector<uint16_t, MemoryCategory::data>;
  // Throws InputError naming the file and the defect: missing, short header, bad magic or
  // version, size not matching the count, or a token >= vocab.
  static TokenFile load(const std::string& path, int vocab);

  std::span<const uint16_t> tokens() const { return *tokens_; }
  size_t size() const { return tokens_->size(); }
  const std::string& path() const { return path_; }

 private:
  TokenFile(std::string path, std::shared_ptr<const Tokens> tokens)
      : path_(std::move(path)), tokens_(std::move(tokens)) {}

  std::string path_;
  std::shared_ptr<const Tokens> tokens_;
};

}  // namespace lattice::data
