# shellcheck shell=bash disable=SC2034
# Sourced by .ci/run and scripts/device-check.sh (issue 33, docs/gpu.md "Toolchains"): which nvcc to
# build with, and the host compiler it needs.
#   cuda_find_nvcc       prints the nvcc: $CUDACXX if set, else /usr/local/cuda/bin/nvcc (NVIDIA's
#                        toolkit, CUDA 13 on this project's machines; CMakeLists.txt's default too),
#                        else the first nvcc on PATH (Debian's 11.8 is /usr/bin/nvcc); nothing if none
#   cuda_nvcc_version N  prints nvcc N's release (13.0, 11.8)
#   cuda_host_args N     sets CUDA_HOST_ARGS (CMake arguments), CUDA_HOST_NOTE (for the one-line
#                        summaries) and CUDA_HOST_WARN (a line for the caller to print, or empty): nvcc
#                        12 and later use the default g++; nvcc 11.x refuses g++ 12, so it gets g++-11
#                        when present, else CUDA_HOST_WARN says so and nvcc keeps its default
#                        (scripts/install-deps.sh --cuda installs g++-11)
cuda_find_nvcc() {
  if [ -n "${CUDACXX:-}" ]; then echo "$CUDACXX"
  elif [ -x /usr/local/cuda/bin/nvcc ]; then echo /usr/local/cuda/bin/nvcc
  else command -v nvcc 2>/dev/null || true
  fi
}

cuda_nvcc_version() { "$1" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'; }

cuda_host_args() {
  local v gxx
  v=$(cuda_nvcc_version "$1")
  CUDA_HOST_ARGS=()
  CUDA_HOST_NOTE=""
  CUDA_HOST_WARN=""
  if [ -n "$v" ] && [ "${v%%.*}" -lt 12 ]; then
    if gxx=$(command -v g++-11); then
      CUDA_HOST_ARGS=(-DCMAKE_CUDA_HOST_COMPILER="$gxx")
      CUDA_HOST_NOTE=", host g++-11"
    else
      CUDA_HOST_WARN="nvcc $v needs g++ 11 or older as its host compiler and there is no g++-11 (scripts/install-deps.sh --cuda installs it): trying nvcc's default"
      CUDA_HOST_NOTE=", host: nvcc's default (no g++-11)"
    fi
  fi
}
