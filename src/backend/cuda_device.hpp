#pragma once
// The CUDA device (--device cuda, built with -DLATTICE_CUDA=ON): its memory (cudaMalloc, no managed
// memory) and its table of operations over src/cuda's kernels and cuBLASLt GEMMs, every launch on
// the default stream in the model's order, so a host copy after them sees their results. Scratch
// and the cuBLASLt workspace come from the tracking allocator (MemoryCategory::workspaces), so the
// memory report counts them. docs/gpu.md.
#include <string>

#include "backend/device_ops.hpp"
#include "tensor/device_memory.hpp"

namespace lattice {

// Empty when a CUDA device is usable, else why not (one line). Makes the context and measures its
// memory (cuda_memory().context_bytes; the driver's used bytes are cudaMemGetInfo's total − free,
// which on a shared GPU includes other processes').
std::string cuda_unavailable();
const DeviceMemory& cuda_memory();
const DeviceOps& cuda_ops();
// Whether fp32 GEMMs may use TF32 (off by default: the parity runs compare against the CPU's fp32).
void cuda_allow_tf32(bool allow);

}  // namespace lattice
