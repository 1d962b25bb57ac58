#pragma once
// LATTICE_HOST_DEVICE: marks a function whose one text serves the CPU build (g++) and the CUDA kernels
// (nvcc, src/cuda): the dropout stream, fast_exp, the bf16 rounding. Empty for a plain C++ compiler.
#if defined(__CUDACC__)
#define LATTICE_HOST_DEVICE __host__ __device__
#else
#define LATTICE_HOST_DEVICE
#endif
