// Fuzz target: checkpoint::SafetensorsFile::load (model.safetensors, optimizer.safetensors,
// --init FILE.safetensors). A file that loads must give views that are in bounds, aligned to their
// element size and readable as their element type, agree with get(name, dtype, shape), and write
// back and load again to the same tensors.
#include <cstring>
#include <map>

#include "checkpoint/safetensors.hpp"
#include "fuzz_util.hpp"

using namespace lattice;
using namespace lattice::checkpoint;

namespace {

// Reads every element as its type, as the loaders do (static_cast<const float*>(t.data)[i]).
template <class T>
void read_all(const TensorRef& t) {
  const T* p = static_cast<const T*>(t.data);
  volatile T sink{};
  for (size_t i = 0; i < t.bytes / sizeof(T); ++i) sink = p[i];
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch() + "/input.safetensors";
  static const std::string again = fuzz::scratch() + "/again.safetensors";
  fuzz::write_file(path, data, size);
  fuzz::accepts([&] {
    const SafetensorsFile file = SafetensorsFile::load(path);
    std::vector<TensorRef> tensors;
    for (const std::string& name : file.names()) {
      const TensorRef& t = file.get(name);
      FUZZ_CHECK(t.name == name);
      const size_t element = dtype_bytes(t.dtype);
      int64_t count = 1;
      for (int64_t d : t.shape) {
        FUZZ_CHECK(d >= 0);
        count *= d;  // no overflow: the loader checked the product
      }
      FUZZ_CHECK(t.bytes == size_t(count) * element);
      FUZZ_CHECK(t.bytes == 0 || t.data != nullptr);
      FUZZ_CHECK(t.bytes == 0 || reinterpret_cast<uintptr_t>(t.data) % element == 0);
      switch (element) {
        case 1: read_all<uint8_t>(t); break;
        case 2: read_all<uint16_t>(t); break;
        case 4: read_all<float>(t); break;
        case 8: read_all<double>(t); break;
        default: FUZZ_CHECK(!"unexpected element size");
      }
      FUZZ_CHECK(&file.get(name, t.dtype, t.shape) == &t);
      tensors.push_back(t);
    }
    // What was read writes back (aligned, widest first) and loads to the same tensors.
    write_safetensors(again, tensors, file.metadata());
    const SafetensorsFile copy = SafetensorsFile::load(again);
    FUZZ_CHECK(copy.names() == file.names());
    FUZZ_CHECK(copy.metadata() == file.metadata());
    for (const TensorRef& t : tensors) {
      const TensorRef& c = copy.get(t.name, t.dtype, t.shape);
      FUZZ_CHECK(c.bytes == t.bytes);
      FUZZ_CHECK(t.bytes == 0 || std::memcmp(c.data, t.data, t.bytes) == 0);
    }
  });
  return 0;
}
