#pragma once
// An activation kept for backward, stored in the activation dtype (fp32 or bf16) and counted by
// the tracking allocator under its (layer, op) tag.
#include <cstdint>

#include "core/config.hpp"
#include "tensor/bf16.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

class Stored {
 public:
  Stored() = default;
  Stored(int64_t numel, DType dtype, int layer, const char* op)
      : buf_(size_t(numel) * bytes_of(dtype), layer, op), numel_(numel), dtype_(dtype) {}

  explicit operator bool() const { return bool(buf_); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return int64_t(buf_.bytes()); }
  const void* data() const { return buf_.data(); }
  void* data() { return buf_.data(); }
  // Direct fp32 access: only valid when dtype() == fp32.
  float* f32() { return static_cast<float*>(buf_.data()); }
  const float* f32() const { return static_cast<const float*>(buf_.data()); }

  // Store fp32 values (converting if the storage is bf16).
  void store(const float* src) {
    if (dtype_ == DType::fp32) {
      if (src != f32()) copy_f32(src, f32(), numel_);
    } else {
      to_bf16(src, static_cast<uint16_t*>(buf_.data()), numel_);
    }
  }
  // Read back as fp32: returns the storage itself when fp32, else widens into `scratch`.
  const float* load(float* scratch) const {
    if (dtype_ == DType::fp32) return f32();
    from_bf16(static_cast<const uint16_t*>(buf_.data()), scratch, numel_);
    return scratch;
  }
  void reset() { buf_.reset(), numel_ = 0; }

 private:
  static void copy_f32(const float* src, float* dst, int64_t n);
  TrackedBuffer buf_;
  int64_t numel_ = 0;
  DType dtype_ = DType::fp32;
};

}  // namespace lattice
