#include "checkpoint/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_dir.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/pinned_path.hpp"

namespace lattice::checkpoint {
namespace {

using nlohmann::json;

constexpr char kMetadataKey[] = "__metadata__";

// A name from a file, fit for a one-line message: control characters escaped (\x0a), cut at
// 80 bytes.
std::string printable(const std::string& text) {
  constexpr size_t kMax = 80;
  size_t end = std::min(text.size(), kMax);
  while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (end < text.size()) out += "...";
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Element count of a shape, or -1 for a negative dimension or an overflow.
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(count, d, &count)) return -1;
  }
  return count;
}

// Bytes a dtype and shape need, or throws with `where` naming the tensor.
size_t tensor_bytes(const std::string& where, const std::string& dtype, const std::vector<int64_t>& shape) {
  const int64_t count = element_count(shape);
  require(count >= 0, where + " has an invalid shape " + shape_text(shape));
  size_t bytes = 0;
  require(!__builtin_mul_overflow(static_cast<size_t>(count), dtype_bytes(dtype), &bytes),
          where + " is too large: shape " + shape_text(shape));
  return bytes;
}

void write_u64_le(AtomicFile& file, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  file.write(b, sizeof(b));
}

}  // namespace

size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2},  {"U32", 4}, {"U64", 8}};
  const auto it = kSizes.find(dtype);
  require(it != kSizes.end(), "unknown safetensors dtype '" + printable(dtype) + "'");
  return it->second;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path) {
  std::set<std::string> seen;
  for (const TensorSpec& t : specs) {
    const std::string where = "cannot write " + path + ": tensor '" + printable(t.name) + "'";
    require(!t.name.empty() && t.name != kMetadataKey,
            "cannot write " + path + ": invalid tensor name '" + printable(t.name) + "'");
    require(seen.insert(t.name).second, where + " appears twice");
    require(dtype_bytes(t.dtype) > 0, where + " has an unknown dtype");
    tensor_bytes(where, t.dtype, t.shape);
  }
  // Widest elements first: with an 8-byte-aligned data section every tensor stays aligned.
  std::stable_sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return dtype_bytes(a.dtype) > dtype_bytes(b.dtype);
  });
  specs_ = std::move(specs);
  json header = json::object();
  size_t offset = 0;
  for (const TensorSpec& t : specs_) {
    sizes_.push_back(tensor_bytes(path, t.dtype, t.shape));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + sizes_.back()}}};
    offset += sizes_.back();
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format allows trailing spaces

  file_ = std::make_unique<AtomicFile>(path);
  write_u64_le(*file_, text.size());
  file_->write(text.data(), text.size());
  while (current_ < sizes_.size() && sizes_[current_] == 0) ++current_;
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::append(const std::string& name, const void* data, size_t bytes) {
  if (bytes == 0) return;
  const std::string where = "cannot write " + path_ + ": tensor '" + printable(name) + "'";
  require(current_ < specs_.size(), where + ": every tensor is already written");
  require(specs_[current_].name == name, where + " arrived while '" + printable(specs_[current_].name) +
                                             "' has " + std::to_string(sizes_[current_] - written_) +
                                             " bytes to come");
  require(bytes <= sizes_[current_] - written_, where + ": " + std::to_string(bytes) + " bytes given, " +
                                                    std::to_string(sizes_[current_] - written_) + " to come");
  require(data != nullptr, where + " has no data");
  file_->write(data, bytes);
  written_ += bytes;
  if (written_ == sizes_[current_]) {
    written_ = 0;
    ++current_;
    while (current_ < sizes_.size() && sizes_[current_] == 0) ++current_;
  }
}

void SafetensorsWriter::commit() {
  require(current_ == specs_.size(), "cannot write " + path_ + ": tensor '" +
                                         printable(current_ < specs_.size() ? specs_[current_].name : "") +
                                         "' is not complete");
  file_->commit();
}

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const TensorRef& t : tensors) {
    const std::string where = "cannot write " + path + ": tensor '" + printable(t.name) + "'";
    const size_t expected = tensor_bytes(where, t.dtype, t.shape);
    require(t.bytes == expected, where + " is " + t.dtype + " " + shape_text(t.shape) + " = " +
                                     std::to_string(expected) + " bytes, but " + std::to_string(t.bytes) +
                                     " bytes were given");
    require(t.data != nullptr || t.bytes == 0, where + " has no data");
    specs.push_back({t.name, t.dtype, t.shape});
  }
  SafetensorsWriter out(path, std::move(specs), metadata);
  for (const TensorSpec& spec : out.order())
    for (const TensorRef& t : tensors)
      if (t.name == spec.name) out.append(t.name, t.data, t.bytes);
  out.commit();
}

SafetensorsFile SafetensorsFile::load(const std::string& path) { return parse(path, true); }
SafetensorsFile SafetensorsFile::open(const std::string& path) { return parse(path, false); }

void SafetensorsFile::read(const std::string& name, size_t offset, size_t bytes, void* out) const {
  const TensorRef& t = get(name);
  require(offset <= t.bytes && bytes <= t.bytes - offset, "checkpoint " + path_ + ": bytes [" +
                                                              std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                                                              ") are beyond tensor '" + printable(name) + "'");
  if (t.data) {
    std::memcpy(out, static_cast<const char*>(t.data) + offset, bytes);
    return;
  }
  std::ifstream in(pinned_path(path_), std::ios::binary);
  in.seekg(static_cast<std::streamoff>(file_offset_.at(name) + offset));
  in.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  require(in.good() || bytes == 0, "cannot read tensor '" + printable(name) + "' of checkpoint " + path_ +
                                       " (the file changed or shrank while it was read)");
}

SafetensorsFile SafetensorsFile::parse(const std::string& path, bool hold_data) {
  const std::string who = "checkpoint " + path;
  std::error_code ec;
  require_regular_file(path, "checkpoint");
  const uint64_t file_bytes = std::filesystem::file_size(pinned_path(path), ec);
  require(!ec, "cannot read " + who + ": " + ec.message());
  std::ifstream in(pinned_path(path), std::ios::binary);
  require(in.good(), "cannot open " + who);

  require(file_bytes >= 8, who + " is truncated: " + std::to_string(file_bytes) +
                               " bytes, less than the 8-byte header length");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  // A safetensors header is a JSON object right after its length: a text file, a token file or an
  // llm.c checkpoint given as weights is named as what it is not, not by an absurd header length.
  const int first = file_bytes > 8 ? in.peek() : EOF;
  require(first == '{', who + " is not a safetensors file (no JSON header after its first 8 bytes): give a " +
                            "checkpoint directory, a model.safetensors or an llm.c .bin");
  require(header_bytes <= file_bytes - 8, who + " is truncated: header length says " +
                                              std::to_string(header_bytes) + " bytes, file has " +
                                              std::to_string(file_bytes - 8) + " after it");
  std::string header_text(header_bytes, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_bytes));
  require(in.good(), "cannot read the header of " + who);

  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::parse_error& e) {
    fail(who + " has a malformed JSON header (error at byte " + std::to_string(e.byte) + ")");
  } catch (const json::exception&) {  // out_of_range: a number beyond double (1e999)
    fail(who + " has a malformed JSON header (a number out of range)");
  }
  require(header.is_object(), who + " has a JSON header that is not an object");

  SafetensorsFile file;
  file.path_ = path;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  struct Span {
    uint64_t begin, end;
    size_t element_bytes;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      require(entry.is_object(), who + ": __metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        require(value.is_string(), who + ": __metadata__ value of '" + printable(key) + "' is not a string");
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = who + ": tensor '" + printable(name) + "'";
    require(entry.is_object(), where + " is not a JSON object");
    require(entry.contains("dtype") && entry["dtype"].is_string(), where + " has no string \"dtype\"");
    const std::string dtype = entry["dtype"].get<std::string>();
    try {
      dtype_bytes(dtype);
    } catch (const InputError&) {
      fail(where + " has unknown dtype '" + printable(dtype) + "'");
    }
    require(entry.contains("shape") && entry["shape"].is_array(), where + " has no \"shape\" array");
    std::vector<int64_t> shape;
    for (const json& d : entry["shape"]) {
      require(d.is_number_integer() && d.get<int64_t>() >= 0,
              where + " has a shape entry that is not a non-negative integer");
      shape.push_back(d.get<int64_t>());
    }
    const json& offsets = entry.value("data_offsets", json());
    require(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                offsets[1].is_number_unsigned() && offsets[0].get<uint64_t>() <= offsets[1].get<uint64_t>(),
            where + " has no valid \"data_offsets\" [begin, end]");
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    const size_t expected = tensor_bytes(where, dtype, shape);
    require(end - begin == expected, where + " is " + dtype + " " + shape_text(shape) + " = " +
                                         std::to_string(expected) + " bytes, but its data_offsets span " +
                                         std::to_string(end - begin) + " bytes");
    spans.push_back({begin, end, dtype_bytes(dtype), name});
    file.tensors_[name] = TensorRef{name, dtype, shape, nullptr, expected};
  }

  uint64_t data_end = 0;
  for (const Span& s : spans) data_end = std::max(data_end, s.end);
  require(data_end <= data_bytes, who + " is truncated: header says " + std::to_string(data_end) +
                                      " bytes of data, file has " + std::to_string(data_bytes));
  require(data_end == data_bytes,
          who + " has " + std::to_string(data_bytes - data_end) + " unexpected bytes after its last tensor");
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    require(spans[i].begin >= spans[i - 1].end,
            who + ": tensors '" + printable(spans[i - 1].name) + "' and '" + printable(spans[i].name) + "' overlap");
  }

  for (const Span& s : spans) file.file_offset_[s.name] = 8 + header_bytes + s.begin;
  if (!hold_data) return file;
  auto data = std::make_shared<Storage>((data_bytes + 7) / 8);
  in.read(reinterpret_cast<char*>(data->data()), static_cast<std::streamsize>(data_bytes));
  require(in.good() || data_bytes == 0, "cannot read the tensor data of " + who);
  // The format does not promise aligned offsets: a tensor whose offset is not a multiple of its
  // element size is copied out to an aligned place, so every view is a valid float* (int64_t*, ...).
  std::vector<std::pair<const Span*, uint64_t>> moved;  // span, offset in the aligned buffer
  uint64_t moved_bytes = 0;
  for (const Span& s : spans) {
    if (s.begin % s.element_bytes == 0 || s.begin == s.end) continue;
    moved.emplace_back(&s, moved_bytes);
    moved_bytes += (s.end - s.begin + 7) / 8 * 8;  // at most data_bytes + 7 per tensor in all
  }
  std::shared_ptr<Storage> realigned;
  if (!moved.empty()) realigned = std::make_shared<Storage>(moved_bytes / 8);
  const char* base = reinterpret_cast<const char*>(data->data());
  for (const Span& s : spans) file.tensors_[s.name].data = s.begin == s.end ? base : base + s.begin;
  for (const auto& [s, at] : moved) {
    char* dst = reinterpret_cast<char*>(realigned->data()) + at;
    std::memcpy(dst, base + s->begin, s->end - s->begin);
    file.tensors_[s->name].data = dst;
  }
  file.realigned_ = std::move(realigned);
  file.data_ = std::move(data);
  return file;
}

const TensorRef& SafetensorsFile::get(const std::string& name) const {
  const auto it = tensors_.find(name);
  require(it != tensors_.end(), "checkpoint " + path_ + " has no tensor '" + printable(name) + "'");
  return it->second;
}

const TensorRef& SafetensorsFile::get(const std::string& name, const std::string& dtype,
                                      const std::vector<int64_t>& shape) const {
  const TensorRef& t = get(name);
  require(t.dtype == dtype && t.shape == shape, "checkpoint " + path_ + ": tensor '" + printable(name) + "' is " +
                                                    t.dtype + " " + shape_text(t.shape) + ", expected " +
                                                    dtype + " " + shape_text(shape));
  return t;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

}  // namespace lattice::checkpoint
