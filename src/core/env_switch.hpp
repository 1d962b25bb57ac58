#pragma once
// Environment switches for measurements (LATTICE_CUDA_GEMM_EPILOGUES, LATTICE_CUDA_GEMM_TUNE,
// LATTICE_CUDA_ATTENTION_DENSE, ...): one rule for all of them, read where each is decided.
#include <cstdlib>
#include <string>

namespace lattice {

// The variable's value, "" where it is not set.
inline std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
// A switch that is on unless the variable is exactly "0".
inline bool env_switch_on(const char* name) { return env_value(name) != "0"; }

}  // namespace lattice
