#pragma once
// Hugging Face safetensors: an 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {string: string}},
// then the raw tensor bytes (offsets relative to the end of the header).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/memory_tracker.hpp"

namespace lattice::checkpoint {

// A view of one tensor's bytes (little-endian, row-major), aligned to its element size.
struct TensorRef {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I32", "U8", ... (see dtype_bytes)
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};

// Bytes per element of a safetensors dtype; throws InputError for an unknown one.
size_t dtype_bytes(const std::string& dtype);

// Writes atomically (temporary file, fsync, rename). Throws InputError for a duplicate or empty
// name, an unknown dtype, or bytes != product(shape) * dtype size. Tensors are laid out by
// decreasing element size so every tensor is aligned to its element size.
void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A validated safetensors file held in memory. Copies are cheap and share the bytes.
class SafetensorsFile {
 public:
  // Throws InputError naming the file and the defect: missing, truncated, malformed JSON,
  // offsets out of range or overlapping, dtype/shape inconsistent with the byte count.
  static SafetensorsFile load(const std::string& path);

  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  // Throws InputError naming the tensor and the file if it is missing.
  const TensorRef& get(const std::string& name) const;
  // Also throws if the tensor's dtype or shape differs from the expected one.
  const TensorRef& get(const std::string& name, const std::string& dtype,
                       const std::vector<int64_t>& shape) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  using Storage = tracked_vector<uint64_t, MemoryCategory::checkpoint_io>;  // 8-byte-aligned
  std::shared_ptr<const Storage> data_;
  // Copies of the tensors whose file offset is not a multiple of their element size (null if none).
  std::shared_ptr<const Storage> realigned_;
  std::map<std::string, TensorRef> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lattice::checkpoint
