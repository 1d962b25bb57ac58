#pragma once
// An activation kept for backward, stored in the activation dtype (fp32 or bf16), or compressed to
// 8 bits (fp8(): tensor/fp8.hpp, --activation-compression fp8), and counted by the tracking
// allocator under its (layer, op) tag. It lives in the run's device memory (tensor/device_memory.hpp)
// and its values come and go as device buffers; the 8-bit form is the host's only (the CLI refuses it
// on another device).
#include <cstdint>

#include "core/config.hpp"
#include "tensor/bf16.hpp"
#include "tensor/device_memory.hpp"
#include "tensor/fp8.hpp"
#include "tensor/memory_tracker.hpp"

namespace lattice {

class Stored {
 public:
  Stored() = default;
  Stored(int64_t numel, DType dtype, int layer, const char* op)
      : buf_(size_t(numel) * bytes_of(dtype), layer, op), numel_(numel), dtype_(dtype) {}

  // Kept in 8 bits, in rows of `row` elements; load() and load_as() give it back in `dtype`, the
  // compute dtype (what the forward computed it in).
  static Stored fp8(int64_t numel, int64_t row, DType dtype, int layer, const char* op) {
    Stored t;
    t.buf_ = TrackedBuffer(size_t(fp8_bytes(numel, row)), layer, op);
    t.numel_ = numel, t.dtype_ = dtype, t.row_ = row;
    return t;
  }
  bool compressed() const { return row_ > 0; }

  explicit operator bool() const { return bool(buf_); }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return int64_t(buf_.bytes()); }
  const void* data() const { return buf_.data(); }
  void* data() { return buf_.data(); }
  // Direct fp32 access: only valid when dtype() == fp32 and not compressed().
  float* f32() { return static_cast<float*>(buf_.data()); }
  const float* f32() const { return static_cast<const float*>(buf_.data()); }

  // Store fp32 values (converting if the storage is bf16 or 8-bit).
  void store(const float* src) {
    const DeviceMemory& m = device_memory();
    if (compressed()) {
      fp8_compress(src, numel_, row_, codes(), scales());
    } else if (dtype_ == DType::fp32) {
      if (src == f32()) return;
      if (m.host_addressable) copy_f32(src, f32(), numel_);
      else m.copy(f32(), src, size_t(numel_) * 4);
    } else {
      m.to_bf16(src, static_cast<uint16_t*>(buf_.data()), numel_);
    }
  }
  // Store values of the compute dtype (fp32, or bf16 bits), compressing them: 8-bit storage only.
  void store_compressed(const void* src) {
    if (dtype_ == DType::bf16) fp8_compress(static_cast<const uint16_t*>(src), numel_, row_, codes(), scales());
    else fp8_compress(static_cast<const float*>(src), numel_, row_, codes(), scales());
  }
  // The values in the compute dtype, written into `out` (8-bit storage only).
  void load_as(void* out) const {
    if (dtype_ == DType::bf16) fp8_expand(codes(), scales(), numel_, row_, static_cast<uint16_t*>(out));
    else fp8_expand(codes(), scales(), numel_, row_, static_cast<float*>(out));
  }
  // Read back as fp32: returns the storage itself when fp32, else widens into `scratch`.
  const float* load(float* scratch) const {
    if (compressed()) {
      fp8_expand(codes(), scales(), numel_, row_, scratch);
      return scratch;
    }
    if (dtype_ == DType::fp32) return f32();
    device_memory().from_bf16(static_cast<const uint16_t*>(buf_.data()), scratch, numel_);
    return scratch;
  }
  void reset() { buf_.reset(), numel_ = 0, row_ = 0; }

 private:
  uint8_t* codes() const { return static_cast<uint8_t*>(const_cast<void*>(buf_.data())); }
  uint8_t* scales() const { return codes() + numel_; }
  static void copy_f32(const float* src, float* dst, int64_t n);
  TrackedBuffer buf_;
  int64_t numel_ = 0;
  DType dtype_ = DType::fp32;
  int64_t row_ = 0;  // > 0: 8-bit storage in rows of row_ elements
};

}  // namespace lattice
