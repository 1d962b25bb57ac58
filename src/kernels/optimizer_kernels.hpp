#pragma once
// The optimizer's element-wise kernels: AdamW's update of one run of elements and the gradient's sum
// of squares (for the global norm and clipping). optim/optimizer.cpp calls them on the CPU; src/cuda
// has their device forms. They live here, below optim, so that both devices share one definition.
#include <cstddef>
#include <cstdint>

namespace lattice {

// The per-step scalars of AdamW (bias corrections folded in), in fp32 as the update uses them.
struct AdamWScalars {
  float b1, b2, eps, step_size, inv_sqrt_bc2;
};
AdamWScalars adamw_scalars(double beta1, double beta2, double eps, double lr, int64_t step);
// m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²; w = w·decay − step_size·m / (√v·inv_sqrt_bc2 + eps).
void adamw_update(float* m, float* v, float* w, const float* grad, int64_t n, float decay, const AdamWScalars& a);
// The same update of the gradient grad · grad_scale (clipping's factor, 1 for none), the new weights
// also narrowed into w16 (bf16 GEMM weights) unless it is null: one pass instead of scale_grads, the
// update and to_bf16, bitwise their result.
void adamw_update_fused(float* m, float* v, float* w, uint16_t* w16, const float* grad, int64_t n, float decay,
                        const AdamWScalars& a, float grad_scale);
// One tensor's adamw_update_fused arguments, and a host array of them (their data on the device where
// the device is one).
struct AdamWSegment {
  float *m, *v, *w;
  uint16_t* w16;
  const float* grad;
  int64_t n;
  float decay, grad_scale;
};
struct AdamWSegments {
  const AdamWSegment* segments;
  size_t count;
};
// adamw_update_fused of every segment: the optimizer's step in one call, so that a device updates
// every tensor in one launch instead of one a tensor (each element's update is the same function of
// its own values, so the bits are the per-segment calls').
void adamw_update_segments(AdamWSegments batch, const AdamWScalars& a);

// Σ grads[i]² in double: each thread's contiguous share summed in vector lanes, the shares added in
// thread order (a fixed order for a given thread count).
double grad_sum_squares(const float* grads, int64_t n);
// One run of a gradient's elements (a tensor, or this rank's piece of one).
struct GradPiece {
  const float* data;
  int64_t n;
};
// Runs and the slots their sums go to, both arrays in host memory (the runs' data on the device).
struct GradPieceSums {
  const GradPiece* pieces;
  double* sums;
  size_t count;
};
// sums[i] = grad_sum_squares(pieces[i]) for every run: the global norm's sums in one call, so that a
// device answers them with one copy to the host instead of one a tensor. (A struct, not a span: the
// header is C++17 for nvcc 11.8.)
void grad_sums_squares(GradPieceSums batch);
// grads *= factor (clipping).
void scale_grads(float* grads, int64_t n, float factor);
// Whether every value is finite (fp16 loss scaling's overflow check).
bool all_finite(const float* values, int64_t n);

}  // namespace lattice
