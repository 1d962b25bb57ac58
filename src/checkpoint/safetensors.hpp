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

namespace lattice {
class AtomicFile;
}

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

// A tensor's name, dtype and shape: what a file's header says of it before any byte is written.
struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// Writes a safetensors file as a stream: the header from the specs first, then each tensor's bytes
// in file order() (widest dtype first, else as given), from as many append() calls as the caller
// likes, so no buffer ever holds the whole file (a checkpoint's tensors arrive one at a time from
// the ranks that hold them). The constructor throws InputError for a duplicate or empty name or an
// unknown dtype; append() for bytes out of order or beyond a tensor's end; commit() unless every
// byte was written. Atomic: the file appears at `path` only at commit() (fsync, rename).
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // uncommitted: the temporary file is removed
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  // The specs in the order their bytes must arrive.
  const std::vector<TensorSpec>& order() const { return specs_; }
  // The next `bytes` of tensor `name`, which must be the tensor being written (or the next one).
  void append(const std::string& name, const void* data, size_t bytes);
  void commit();

 private:
  std::string path_;
  std::vector<TensorSpec> specs_;
  std::vector<size_t> sizes_;
  size_t current_ = 0, written_ = 0;  // the tensor being written, its bytes so far
  std::unique_ptr<AtomicFile> file_;
};

// Writes whole tensors atomically through a SafetensorsWriter. Throws InputError as it does, or for
// bytes != product(shape) * dtype size. Tensors are laid out by decreasing element size so every
// tensor is aligned to its element size.
void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A validated safetensors file: held in memory (load), or its header only with tensors read on
// demand (open: what checkpoints use, so no rank holds a whole file). Copies are cheap and share
// the bytes.
class SafetensorsFile {
 public:
  // Throws InputError naming the file and the defect: missing, truncated, malformed JSON,
  // offsets out of range or overlapping, dtype/shape inconsistent with the byte count.
  static SafetensorsFile load(const std::string& path);
  // The same checks, reading only the header: TensorRef::data is null, read() gives the bytes.
  static SafetensorsFile open(const std::string& path);
  // Bytes [offset, offset + bytes) of tensor `name` into `out` (throws InputError naming the file
  // if it cannot be read, or the range is beyond the tensor).
  void read(const std::string& name, size_t offset, size_t bytes, void* out) const;

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
  static SafetensorsFile parse(const std::string& path, bool hold_data);

  std::string path_;
  using Storage = tracked_vector<uint64_t, MemoryCategory::checkpoint_io>;  // 8-byte-aligned
  std::shared_ptr<const Storage> data_;
  // Copies of the tensors whose file offset is not a multiple of their element size (null if none).
  std::shared_ptr<const Storage> realigned_;
  std::map<std::string, TensorRef> tensors_;
  std::map<std::string, uint64_t> file_offset_;  // where each tensor's bytes start in the file
  std::map<std::string, std::string> metadata_;
};

}  // namespace lattice::checkpoint
