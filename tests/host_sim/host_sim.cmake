# The host simulation's two programs, built with the tests (included by tests/CMakeLists.txt in a CPU
# build without the sanitizers): lattice_cuda_check_host (scripts/cuda-host-check.sh's program: every
# kernel of src/cuda against its CPU kernel) and lattice_cuda_host (scripts/cuda-host-trainer.sh's: the
# trainer with --device cuda on the simulation). src/cuda is rewritten file by file
# (scripts/cuda-host-rewrite.sh) and its kernels compiled once for both; the scripts build the same
# programs by hand. The flags are the scripts': C++17 as nvcc, -O2, UBSan's alignment check, and not
# the project's -march (the simulation's arithmetic is the host's plain one, as in the scripts).
set(HOST_SIM_DIR ${CMAKE_BINARY_DIR}/host-sim)
file(GLOB HOST_SIM_INPUTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/cuda/*.cuh
     ${CMAKE_SOURCE_DIR}/src/cuda/*.hpp)
set(HOST_SIM_KERNELS)
set(HOST_SIM_REWRITTEN)
foreach(input ${HOST_SIM_INPUTS})
  get_filename_component(name ${input} NAME)
  if(name STREQUAL "gemm.cu")
    continue()  # compiled as it is, against the simulated cuBLASLt (check) or not at all (trainer)
  endif()
  set(output ${HOST_SIM_DIR}/cuda/${name})
  set(extra)
  if(name STREQUAL "mma.cuh")
    set(extra ${CMAKE_CURRENT_SOURCE_DIR}/host_sim/mma_emulated.inc)
  endif()
  add_custom_command(OUTPUT ${output}
                     COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/cuda-host-rewrite.sh ${CMAKE_SOURCE_DIR} ${HOST_SIM_DIR} ${name}
                     DEPENDS ${input} ${extra} ${CMAKE_SOURCE_DIR}/scripts/cuda-host-rewrite.sh
                             ${CMAKE_SOURCE_DIR}/scripts/cuda-host-common.sh
                     COMMENT "host simulation: rewriting src/cuda/${name}" VERBATIM)
  list(APPEND HOST_SIM_REWRITTEN ${output})
  if(name MATCHES "\\.cu$" AND NOT name STREQUAL "check_main.cu")
    list(APPEND HOST_SIM_KERNELS ${output})
  endif()
endforeach()
set_source_files_properties(${HOST_SIM_DIR}/cuda/check_main.cu ${HOST_SIM_KERNELS} PROPERTIES LANGUAGE CXX)
add_custom_target(lattice_host_sim_sources DEPENDS ${HOST_SIM_REWRITTEN})

# The scripts' flags, in place of the directory's (no -march; -O2 and -UNDEBUG after the build
# type's -O3 -DNDEBUG). -Werror with LATTICE_WERROR, as the rest of the build (the scripts always).
# CUDA_HOST_SANITIZE_FLAGS changes the scripts' programs only.
set(HOST_SIM_SANITIZE -fsanitize=alignment -fno-sanitize-recover=alignment)
set(HOST_SIM_FLAGS -O2 -UNDEBUG -g ${HOST_SIM_SANITIZE} -fopenmp -Wall -Wextra -Wno-unknown-pragmas)
if(LATTICE_WERROR)
  list(APPEND HOST_SIM_FLAGS -Werror)
endif()
set(HOST_SIM_INCLUDES ${CMAKE_CURRENT_SOURCE_DIR}/host_sim/include ${HOST_SIM_DIR} ${CMAKE_SOURCE_DIR}/src ${LATTICE_GENERATED})

add_library(lattice_host_sim_kernels OBJECT ${HOST_SIM_KERNELS})
set_target_properties(lattice_host_sim_kernels PROPERTIES COMPILE_OPTIONS "${HOST_SIM_FLAGS}" CXX_STANDARD 17 CXX_EXTENSIONS OFF)
target_include_directories(lattice_host_sim_kernels PRIVATE ${HOST_SIM_INCLUDES})
add_dependencies(lattice_host_sim_kernels lattice_host_sim_sources lattice_version)

add_executable(lattice_cuda_check_host ${HOST_SIM_DIR}/cuda/check_main.cu ${CMAKE_CURRENT_SOURCE_DIR}/host_sim/cublaslt_sim.cpp
               ${CMAKE_SOURCE_DIR}/src/cuda/gemm.cu $<TARGET_OBJECTS:lattice_host_sim_kernels>)
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/cuda/gemm.cu PROPERTIES LANGUAGE CXX)
set_target_properties(lattice_cuda_check_host PROPERTIES COMPILE_OPTIONS "${HOST_SIM_FLAGS}" CXX_STANDARD 17 CXX_EXTENSIONS OFF)
target_compile_definitions(lattice_cuda_check_host PRIVATE LATTICE_CUDA_HOST_SIM)
target_include_directories(lattice_cuda_check_host PRIVATE ${HOST_SIM_INCLUDES})
target_link_libraries(lattice_cuda_check_host PRIVATE lattice_layer_kernels ${HOST_SIM_SANITIZE} -fopenmp)
add_dependencies(lattice_cuda_check_host lattice_host_sim_sources)

# The trainer: src/backend as the CPU build compiles it but with LATTICE_HAVE_CUDA and the simulation's
# CUDA headers first, the GEMMs the CPU's (gemm_host.cpp), linked before the CPU build's layers so
# that its backend objects stand in for theirs.
file(GLOB HOST_SIM_BACKEND CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/*.cpp)
add_library(lattice_host_sim_backend OBJECT ${HOST_SIM_BACKEND})
target_compile_definitions(lattice_host_sim_backend PRIVATE LATTICE_HAVE_CUDA)
target_include_directories(lattice_host_sim_backend BEFORE PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/host_sim/include ${HOST_SIM_DIR})
target_include_directories(lattice_host_sim_backend PRIVATE ${CMAKE_BINARY_DIR}/layer-include/backend ${LATTICE_GENERATED})
target_link_libraries(lattice_host_sim_backend PRIVATE lattice_third_party)
add_dependencies(lattice_host_sim_backend lattice_host_sim_sources lattice_version)

add_library(lattice_host_sim_gemm OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/host_sim/gemm_host.cpp)
set_target_properties(lattice_host_sim_gemm PROPERTIES COMPILE_OPTIONS "-O2;-UNDEBUG;-g;-fopenmp;-Wall;-Wextra;$<$<BOOL:${LATTICE_WERROR}>:-Werror>" CXX_STANDARD 17 CXX_EXTENSIONS OFF)
target_include_directories(lattice_host_sim_gemm PRIVATE ${HOST_SIM_INCLUDES})
add_dependencies(lattice_host_sim_gemm lattice_host_sim_sources lattice_version)

add_executable(lattice_cuda_host ${CMAKE_SOURCE_DIR}/src/cli/main.cpp $<TARGET_OBJECTS:lattice_host_sim_backend>
               $<TARGET_OBJECTS:lattice_host_sim_kernels> $<TARGET_OBJECTS:lattice_host_sim_gemm>)
target_include_directories(lattice_cuda_host PRIVATE ${CMAKE_BINARY_DIR}/layer-include/cli ${LATTICE_GENERATED})
target_link_libraries(lattice_cuda_host PRIVATE lattice_layer_cli ${HOST_SIM_SANITIZE})
add_dependencies(lattice_cuda_host lattice_version)
