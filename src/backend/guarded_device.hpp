#pragma once
// The guarded device (--device cpu-guarded): the CPU's kernels over memory the host cannot touch.
// Its buffers (the categories tensor/device_memory.hpp puts on the device) live in one reserved
// region whose pages are PROT_NONE except while a seam operation runs, so a host loop, memcpy or
// MPI call that reads or writes device memory without going through the seam faults at once, as it
// would on a GPU (a host dereference of a cudaMalloc pointer). It is how the CUDA path's structure —
// every host touch of device memory a copy through the seam — is tested on machines without a GPU;
// its numbers are the CPU's, bit for bit. docs/gpu.md, docs/design.md §18.
#include "backend/device_ops.hpp"
#include "tensor/device_memory.hpp"

namespace lattice {

const DeviceMemory& guarded_memory();
const DeviceOps& guarded_ops();

}  // namespace lattice
